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
from ..formats.names import Format
from ..formats.record import ShardRecord
from ..writer import Rotation
from ._store import Pending, Store

__all__ = ["PartWriter"]


class PartWriter:
    """Write one task's samples into parts ``pattern % n`` (n = 0, 1, ...) of ``store``,
    starting a new part where ``cut`` says (:class:`~shardkit.formats.cut.Cut`); each part
    ends with ``trailer`` (``cut.trailer`` bytes long: a tar's end-of-archive blocks, or
    nothing for TFRecord and for the samples-only chunks that the build's assembly cuts).
    The parts are a :class:`~shardkit.writer.Rotation` (the key rule, the cut, the commit);
    with ``index``, each part's ``.idx`` file is written beside it (the commit renames both)."""

    def __init__(
        self,
        store: Store,
        pattern: str,
        *,
        cut: Cut,
        trailer: bytes = b"",
        keep_sizes: bool = False,
        format: Format = "tar",
        index: bool = False,
    ) -> None:
        if len(trailer) != cut.trailer:
            raise ValueError(f"a {len(trailer)}-byte trailer, but the cut counts {cut.trailer}")
        if trailer not in (b"", tar.END_OF_ARCHIVE):
            raise ValueError("a part ends with a tar's end-of-archive blocks or nothing")
        self.store = store
        self.pattern = pattern
        self.sizes: list[int] = []  # of every sample, when ``keep_sizes``
        self._keep_sizes = keep_sizes
        self._parts = Rotation(
            self._create,
            format,
            cut=cut,
            trailer=bool(trailer),
            index=index,
            access=store.access,
        )

    def _create(self, number: int) -> Pending:
        return self.store.create(self.pattern % number)

    def add(
        self, key: str, chunks: list[bytes], size: int, members: tar.Members | None = None
    ) -> None:
        """Append one encoded sample (``chunks`` totalling ``size`` bytes; ``members``:
        its plain members' extensions and sizes, :func:`~shardkit.formats.tar.tar_sample`)."""
        part = self._parts.shard(key, size)
        if part is None:  # pragma: no cover - a build's parts have no max_shards
            raise RuntimeError("a part writer has no max_shards")
        part.writev(key, chunks, size, members)
        if self._keep_sizes:
            self.sizes.append(size)

    def close(self) -> list[ShardRecord]:
        """Commit the last part; returns the record of every part (its name in the store)."""
        return [
            ShardRecord(self.pattern % info.index, info.samples, info.bytes, info.digest)
            for info in self._parts.commit()
        ]

    def abort(self) -> None:
        """Discard the part in progress."""
        self._parts.discard()
