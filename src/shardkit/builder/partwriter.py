"""The task writer: appends encoded samples to part files with one ``writev`` each.

A worker's hot loop is read file -> check -> write. This writer keeps that loop lean: a
sample is a list of byte chunks (tar headers, data, padding) written by a single
``os.writev`` call straight from the buffers, hashed as it goes, with no join and no
userspace write buffer. The chunks come from :func:`shardkit.formats.tar.tar_chunks` (tar
headers from a fixed template, the same bytes as :func:`~shardkit.formats.tar.encode_sample`).
A part is an atomic file of the output's store (a local file renamed when complete, or one
upload straight from the worker); the writer starts a new part where the cut rule says,
decided before each sample is written, so a part streams out and is never rewritten.
"""

from __future__ import annotations

from ..formats import tar
from ..formats.cut import Cut
from ..writer import ShardFile
from .store import Store

__all__ = ["PartWriter"]


class PartWriter:
    """Write one task's samples into parts ``pattern % n`` (n = 0, 1, ...) of ``store``,
    starting a new part where ``cut`` says (:class:`~shardkit.formats.cut.Cut`); each part
    ends with ``trailer`` (``cut.trailer`` bytes long: a tar's end-of-archive blocks, or
    nothing for TFRecord and for the samples-only chunks that the build's assembly cuts).
    Each part is a :class:`~shardkit.writer.ShardFile` (the key rule, the cut, the commit)."""

    def __init__(
        self,
        store: Store,
        pattern: str,
        *,
        cut: Cut,
        trailer: bytes = b"",
        keep_sizes: bool = False,
    ) -> None:
        if len(trailer) != cut.trailer:
            raise ValueError(f"a {len(trailer)}-byte trailer, but the cut counts {cut.trailer}")
        if trailer not in (b"", tar.END_OF_ARCHIVE):
            raise ValueError("a part ends with a tar's end-of-archive blocks or nothing")
        self.store = store
        self.pattern = pattern
        self.cut = cut
        self.trailer = trailer
        self.sizes: list[int] = []  # of every sample, when ``keep_sizes``
        self._keep_sizes = keep_sizes
        self.parts: list[tuple[str, int, int, str]] = []  # name, samples, bytes, digest
        self._part: ShardFile | None = None
        self._last_key: str | None = None

    def add(self, key: str, chunks: list[bytes], size: int) -> None:
        """Append one encoded sample (``chunks`` totalling ``size`` bytes)."""
        part = self._part
        if part is not None:
            part.check_key(key)
            if part.full(size):
                self._finish(part)
                part = None
        if part is None:
            file = self.store.create(self.pattern % len(self.parts))
            part = self._part = ShardFile(
                file, cut=self.cut, trailer=bool(self.trailer), last_key=self._last_key
            )
        part.writev(key, chunks, size)
        self._last_key = key
        if self._keep_sizes:
            self.sizes.append(size)

    def _finish(self, part: ShardFile) -> None:
        self._part = None
        info = part.commit()
        self.parts.append((self.pattern % len(self.parts), info.samples, info.bytes, info.digest))

    def close(self) -> list[tuple[str, int, int, str]]:
        """Commit the last part; returns (name, samples, bytes, digest) of every part."""
        if self._part is not None:
            self._finish(self._part)
        return self.parts

    def abort(self) -> None:
        """Discard the part in progress."""
        part, self._part = self._part, None
        if part is not None:
            part.discard()
