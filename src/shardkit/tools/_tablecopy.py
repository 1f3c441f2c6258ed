"""The tools' copy of tar shards by their member table: runs of whole samples as ranges.

Where an input shard is an uncompressed local tar file with an index whose member table
(:mod:`shardkit.formats.members`) the readers would use, ``cat`` and ``split`` copy its
samples as byte ranges of the file, no tar header parsed in Python: the index is loaded
and checked by the readers' loader (:class:`~shardkit.pipeline._idxfiles.IndexCache`: a
bad or stale index is a FormatError, as when the shard is read), and each range read is
checked against its table before it is written
(:func:`~shardkit.formats.members.verify_members`, as a streaming read checks it). The
cut, the key rule and the written shards' indexes are the writer's
(:meth:`~shardkit.writer.Rotation.copy_run`).

The table path gives the bytes the header path gives (``cat``'s member copy,
:func:`shardkit.writer.copy_samples`) because it is taken only where the table accounts
for the whole archive: samples back to back from byte 0, each key one the grouping finds
(what :meth:`MemberTable.prepare` requires of every table), then the end of the archive
(a zero block, or the end of the file) and the size its index says. Any other shard (no
index, an index without a table, a stream on stdin, gzip, a remote file) is read by its
headers, as before: :func:`table_of` says which, and logs why (at info level for a shard
whose table the readers would use: ``shardkit -v``).
"""

from __future__ import annotations

import logging
import mmap
import os
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator
from operator import sub
from typing import BinaryIO

from .. import storage
from ..formats.members import MemberTable, verify_members
from ..formats.tar import BLOCK, Write
from ..pipeline import IndexCache
from ..storage import Access
from ._inputs import ShardRef

__all__ = ["CHUNK", "Copy", "RunSink", "TableShard", "copy_chunks", "table_of"]

logger = logging.getLogger(__name__)

CHUNK = 1 << 22
"""Bytes of whole samples mapped, checked and written at a time (one sample more if it is
larger): what the copy holds in memory."""

Copy = Callable[[int, int, Write], None]
"""``copy(i, j, write)``: write the bytes of samples ``i`` to ``j`` of a run."""
RunSink = Callable[[int, int, Copy], bool]
"""``add(first, stop, copy)``: take samples ``first`` to ``stop`` of a shard; False: stop."""

_ZERO_BLOCK = bytes(BLOCK)


class TableShard:
    """An input shard copied by its member table: :attr:`keys` of its samples,
    :attr:`ends` (sample ``i`` is bytes ``ends[i]`` to ``ends[i + 1]`` of the file), and
    :meth:`chunks` of their bytes, checked against the table; ``with`` it closes the
    file."""

    def __init__(
        self, ref: ShardRef, table: MemberTable, raw: BinaryIO, keys: list[str], ends: array[int]
    ) -> None:
        self.url = ref.url
        self.table = table
        self.raw = raw
        self.keys = keys
        self.ends = ends

    def __len__(self) -> int:
        return len(self.keys)

    def __enter__(self) -> TableShard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.close()

    def sizes(self, first: int, stop: int) -> list[int]:
        """The sizes in bytes of samples ``first`` to ``stop``."""
        ends = self.ends
        return list(map(sub, ends[first + 1 : stop + 1], ends[first:stop]))

    def chunks(self) -> Iterator[tuple[int, int, memoryview]]:
        """``(first, stop, view)``: the bytes of samples ``first`` to ``stop`` (about
        :data:`CHUNK` at a time, or one sample larger than that), a view of the file
        mapped, checked against the table first. A view is valid until the next is asked
        for: each range is mapped on its own and let go after it, so what the copy holds
        in memory is one range, not the shard."""
        ends, total = self.ends, len(self.keys)
        fd = self.raw.fileno()
        first = 0
        while first < total:
            stop = max(first + 1, bisect_right(ends, ends[first] + CHUNK, first, total + 1) - 1)
            start = ends[first] - ends[first] % mmap.ALLOCATIONGRANULARITY
            mapped = mmap.mmap(fd, ends[stop] - start, offset=start, access=mmap.ACCESS_READ)
            view = memoryview(mapped)[ends[first] - start :]
            try:
                verify_members(mapped, self.table, first, stop, url=self.url, base=start)
                yield first, stop, view
            finally:
                view.release()
                mapped.close()
            first = stop


def copy_chunks(shard: TableShard, add: RunSink) -> bool:
    """Pass each chunk of ``shard``'s samples to ``add(first, stop, copy)``, where
    ``copy(i, j, write)`` writes samples ``first + i`` to ``first + j``; stops (False)
    when ``add`` returns False."""
    ends = shard.ends
    for first, stop, view in shard.chunks():

        def copy(i: int, j: int, write: Write, at: int = first, view: memoryview = view) -> None:
            origin = ends[at]
            write(view[ends[at + i] - origin : ends[at + j] - origin])

        if not add(first, stop, copy):
            return False
    return True


def table_of(ref: ShardRef, indexes: IndexCache) -> TableShard | None:
    """The shard to copy by its member table (see the module docs; ``with`` it, to close
    its file), or None when ``ref`` is read by its headers. A bad or stale index is a
    FormatError, as for a reader. ``indexes``: the run's loader (``IndexCache(limit=0)``
    holds one shard's table at a time)."""
    why = _no_table(ref)
    if why is None:
        table = indexes.get(ref.url, Access.of(ref.access))
        why = "no index, or an index without a member table" if table is None else None
    if why is not None or table is None:
        logger.debug("%s: copied by its tar headers: %s", ref.url, why or "no index")
        return None
    raw = storage.open_read(ref.url, access=Access.of(ref.access), buffer_size=0)
    try:
        why = _not_whole(table, raw)
    except BaseException:
        raw.close()
        raise
    if why is not None:  # an index the readers take, that the copy does not: said (-v)
        raw.close()
        logger.info("%s: copied by its tar headers, not its member table: %s", ref.url, why)
        return None
    ends = array("q", table.offsets)  # back to back (prepare): each ends where the next starts
    ends.append(table.end)
    return TableShard(ref, table, raw, table.keys(0, len(table.offsets)), ends)


def _no_table(ref: ShardRef) -> str | None:
    if ref.stdin:
        return "a stream on stdin"
    if ref.format != "tar" or ref.gzip:
        return "not an uncompressed tar shard"
    if not storage.is_local(ref.url):
        return "not a local file"
    return None


def _not_whole(table: MemberTable, raw: BinaryIO) -> str | None:
    """Why the table does not account for the whole archive in ``raw`` (None when it
    does): see the module docs."""
    size = os.fstat(raw.fileno()).st_size
    if size != table.shard_bytes:
        return f"the file is {size} bytes, its index says {table.shard_bytes}"
    head = os.pread(raw.fileno(), 2, 0)
    if head == b"\x1f\x8b":
        return "a gzip stream"
    tail = os.pread(raw.fileno(), BLOCK, table.end)
    if tail and tail != _ZERO_BLOCK:
        return "its last sample is not followed by the end of the archive"
    return None
