"""``split`` of tar into uncompressed tar shards, member bytes copied as they are.

The rotation rules are :class:`~shardkit.writer.ShardWriter`'s (a shard is full at
``max_count`` samples, or when the next sample would take its file over ``max_size``
bytes, end-of-archive blocks included; a sample larger than ``max_size`` stands alone),
and so are the guarantees (each shard written under a temporary name and committed
whole; its size and digest reported in a :class:`~shardkit.formats.record.ShardInfo`). What is
saved is re-encoding, and copying: the scanner keeps each sample in its read buffer until
the sample is complete, then runs of whole samples go out as single slices of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..digest import DEFAULT_HASH, HashName, check_hash
from ..formats.cut import Cut
from ..formats.names import check_pattern, shard_name
from ..formats.record import ShardInfo
from ..formats.tar import Grouping, TarScanner
from ..units import Size
from ..writer import ShardFile
from ._inputs import ShardRef, gzip_errors, open_shard

__all__ = ["RawShards", "split_raw"]

Write = Callable[[memoryview], object]


class RawShards:
    """Numbered uncompressed tar shards, fed whole samples of raw member bytes.

    Each shard is a :class:`~shardkit.writer.ShardFile` (the key rule, the cut, the
    trailer, the commit and, with ``index=True``, its ``.idx`` file). ``hash`` names the
    digest algorithm (``"none"`` leaves :attr:`ShardInfo.digest` empty and saves hashing
    every byte).
    """

    def __init__(
        self,
        pattern: str,
        *,
        max_count: int | None,
        max_size: Size | None,
        max_shards: int | None = None,
        hash: HashName = DEFAULT_HASH,
        storage_options: dict[str, Any] | None = None,
        on_shard: Callable[[ShardInfo], None] | None = None,
        index: bool = True,
    ) -> None:
        check_pattern(pattern, option="output")
        self.pattern = pattern
        self.cut = Cut(max_count, max_size)
        self.max_shards = max_shards
        self.hash = check_hash(hash)
        self.storage_options = storage_options
        self.index = index
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self.full = False
        self.before_commit: Callable[[], None] | None = None
        self._shard: ShardFile | None = None
        self._last_key: str | None = None

    def add(self, key: str, size: int, emit: Callable[[Write], None]) -> bool:
        """Add a sample of ``size`` bytes that ``emit(write)`` writes; False (and nothing
        written) once ``max_shards`` shards are full."""
        shard = self._shard
        if shard is not None:
            shard.check_key(key)
            if shard.full(size):
                self._commit()
                shard = None
        if self.full:
            return False
        if shard is None:
            shard = self._shard = ShardFile.open(
                shard_name(self.pattern, len(self.shards)),
                cut=self.cut,
                index=self.index,
                last_key=self._last_key,
                storage_options=self.storage_options,
                hash=self.hash,
            )
        shard.copy(key, size, emit)
        self._last_key = key
        return True

    def _commit(self) -> None:
        shard, self._shard = self._shard, None
        if shard is None:
            return
        if self.before_commit is not None:
            self.before_commit()  # pending bytes of this shard go out first
        info = shard.commit(len(self.shards))
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info)
        if self.max_shards is not None and len(self.shards) >= self.max_shards:
            self.full = True

    def close(self) -> list[ShardInfo]:
        self._commit()
        return self.shards

    def abort(self) -> None:
        shard, self._shard = self._shard, None
        if shard is not None:
            shard.discard()


def _split_shard(members: TarScanner, sink: RawShards) -> bool:
    """Feed ``sink`` the samples of one tar stream, with the reader's checks; False once
    the sink is full."""
    key: str | None = None
    start = end = 0

    def add(key: str, start: int, end: int) -> bool:
        return sink.add(key, end - start, lambda write: members.copy_range(start, end, write))

    for member, prefix, _ext, new in Grouping(members.url)(members):
        if new:
            if key is not None and not add(key, start, end):
                return False
            key, start = prefix, member.start
            members.keep_from(start)
        end = member.end
    return key is None or add(key, start, end)


def split_raw(
    refs: Iterable[ShardRef],
    sink: RawShards,
    storage_options: dict[str, Any] | None = None,
    *,
    chunk_size: int = 1 << 22,
) -> list[ShardInfo]:
    """Copy the samples of tar shards ``refs`` into ``sink``'s shards."""
    try:
        for ref in refs:
            raw, stream = open_shard(ref, storage_options=storage_options)
            try:
                members = TarScanner(stream, url=ref.url, chunk_size=chunk_size)
                sink.before_commit = members.flush_copy
                with gzip_errors(ref.url):
                    going = _split_shard(members, sink)
                members.flush_copy()
                sink.before_commit = None
                if not going:
                    break
            finally:
                if not ref.stdin:
                    raw.close()
    except BaseException:
        sink.abort()
        raise
    return sink.close()
