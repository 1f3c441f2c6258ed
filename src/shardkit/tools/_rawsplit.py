"""``split`` of tar into uncompressed tar shards, member bytes copied as they are.

The rotation is :class:`~shardkit.writer.Rotation`, as for ``ShardWriter`` (a shard is full
at ``max_count`` samples, or when the next sample would take its file over ``max_size``
bytes, end-of-archive blocks included; a sample larger than ``max_size`` stands alone),
and so are the guarantees (each shard written under a temporary name and committed
whole; its size and digest reported in a :class:`~shardkit.formats.record.ShardInfo`). What is
saved is re-encoding, and copying. A local shard with a member table in its index is
copied by it (:mod:`shardkit.tools._tablecopy`): runs of whole samples as ranges of the
file mapped, checked against the table, each part of a run that one output shard takes
written at once (:meth:`~shardkit.writer.Rotation.copy_run`), no header parsed. Other
shards are read by their headers: the scanner keeps each sample in its read buffer until
the sample is complete, then runs of whole samples go out as single slices of it. Both
give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import storage
from ..digest import check_hash
from ..formats.cut import Cut
from ..formats.names import check_pattern, shard_name
from ..formats.record import ShardInfo
from ..formats.tar import TarScanner
from ..pipeline import IndexCache
from ..units import Size
from ..writer import Rotation, copy_samples
from ._inputs import ShardRef, gzip_errors, open_shard
from ._settings import DEFAULT_RUN, ToolRun
from ._tablecopy import Copy, TableShard, copy_chunks, table_of

__all__ = ["raw_shards", "split_raw"]


def raw_shards(
    pattern: str,
    max_count: int | None,
    max_size: Size | None,
    max_shards: int | None = None,
    run: ToolRun = DEFAULT_RUN,
    index: bool = True,
) -> Rotation:
    """Numbered uncompressed tar shards ``pattern``, to be fed whole samples of raw member
    bytes: a :class:`~shardkit.writer.Rotation` (the key rule, the cut, the trailer, the
    commit, ``max_shards`` and, with ``index=True``, each shard's ``.idx`` file), written
    and reported as ``run`` says: ``run.hash`` names the digest algorithm (``"none"``
    leaves :attr:`ShardInfo.digest` empty and saves hashing every byte)."""
    check_pattern(pattern, option="output")
    hash = check_hash(run.hash)

    def open_file(number: int) -> storage.AtomicFile:
        url = shard_name(pattern, number)
        return storage.open_atomic(url, access=run.access, hash=hash)

    return Rotation(
        open_file,
        cut=Cut(max_count, max_size),
        index=index,
        access=run.access,
        max_shards=max_shards,
        on_shard=run.on_shard,
    )


def split_raw(
    refs: Iterable[ShardRef], sink: Rotation, *, chunk_size: int = 1 << 22
) -> list[ShardInfo]:
    """Copy the samples of tar shards ``refs`` into ``sink``'s shards."""
    indexes = IndexCache(limit=0)  # one table held at a time
    try:
        for ref in refs:
            table = table_of(ref, indexes)
            if table is not None:
                with table:
                    if not _copy_table(table, sink):
                        break
                continue
            raw, stream = open_shard(ref)
            try:
                members = TarScanner(stream, url=ref.url, chunk_size=chunk_size)
                sink.before_commit = members.flush_copy
                with gzip_errors(ref.url):
                    going = copy_samples(members, sink)
                members.flush_copy()
                sink.before_commit = None
                if not going:
                    break
            finally:
                if not ref.stdin:
                    raw.close()
    except BaseException:
        sink.discard()
        raise
    return sink.commit()


def _copy_table(shard: TableShard, sink: Rotation) -> bool:
    """Copy the samples of ``shard`` into ``sink``'s shards; False once it is full."""

    def add(first: int, stop: int, copy: Copy) -> bool:
        return sink.copy_run(shard.keys[first:stop], shard.sizes(first, stop), copy)

    return copy_chunks(shard, add)
