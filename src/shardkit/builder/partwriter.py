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
from ..formats.tar import tar_chunks
from .store import Pending, Store

__all__ = ["PartWriter", "tar_chunks"]  # tar_chunks: formats.tar, kept importable here


class PartWriter:
    """Write one task's samples into parts ``pattern % n`` (n = 0, 1, ...) of ``store``,
    starting a new part where ``cut`` says (:class:`~shardkit.formats.cut.Cut`); each part
    ends with ``trailer`` (``cut.trailer`` bytes long)."""

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
        self.store = store
        self.pattern = pattern
        self.cut = cut
        self.trailer = trailer
        self.sizes: list[int] = []  # of every sample, when ``keep_sizes``
        self._keep_sizes = keep_sizes
        self.parts: list[tuple[str, int, int, str]] = []  # name, samples, bytes, digest
        self._file: Pending | None = None
        self._count = 0
        self._last_key: str | None = None

    def add(self, key: str, chunks: list[bytes], size: int) -> None:
        """Append one encoded sample (``chunks`` totalling ``size`` bytes)."""
        tar.check_key_order(self._last_key, key)
        file = self._file
        if file is not None and self.cut.full(self._count, file.tally.size, size):
            self._finish(file)
            file = None
        if file is None:
            file = self._file = self.store.create(self.pattern % len(self.parts))
            self._count = 0
        file.writev(chunks, size)
        self._count += 1
        self._last_key = key
        if self._keep_sizes:
            self.sizes.append(size)

    def _finish(self, file: Pending) -> None:
        self._file = None
        if self.trailer:
            file.write(self.trailer)
        file.commit()
        name = self.pattern % len(self.parts)
        self.parts.append((name, self._count, file.size, file.digest))

    def close(self) -> list[tuple[str, int, int, str]]:
        """Commit the last part; returns (name, samples, bytes, digest) of every part."""
        if self._file is not None:
            self._finish(self._file)
        return self.parts

    def abort(self) -> None:
        """Discard the part in progress."""
        file, self._file = self._file, None
        if file is not None:
            file.discard()
