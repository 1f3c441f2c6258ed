"""``split`` of tar into uncompressed tar shards, member bytes copied as they are.

The rotation rules are :class:`~shardkit.writer.ShardWriter`'s (a shard is full at
``max_count`` samples, or when the next sample would take its file over ``max_size``
bytes, end-of-archive blocks included; a sample larger than ``max_size`` stands alone),
and so are the guarantees (each shard written under a temporary name and committed
whole; its size and digest reported in a :class:`~shardkit.writer.ShardInfo`). What is
saved is re-encoding, and copying: the scanner keeps each sample in its read buffer until
the sample is complete, then runs of whole samples go out as single slices of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .. import storage
from ..digest import DEFAULT_HASH, HashName, check_hash
from ..formats.cut import Cut
from ..formats.names import check_pattern, shard_name
from ..formats.tar import END_OF_ARCHIVE, Grouping, TarScanner, check_key_order
from ..units import Size
from ..writer import ShardInfo
from ._inputs import ShardRef, gzip_errors, open_shard

__all__ = ["RawShards", "split_raw"]

Write = Callable[[memoryview], object]


class RawShards:
    """Numbered uncompressed tar shards, fed whole samples of raw member bytes.

    ``hash`` names the digest algorithm (``"none"`` leaves :attr:`ShardInfo.digest` empty
    and saves hashing every byte).
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
    ) -> None:
        check_pattern(pattern, option="output")
        self.pattern = pattern
        self.cut = Cut(max_count, max_size, trailer=len(END_OF_ARCHIVE))
        self.max_shards = max_shards
        self.hash = check_hash(hash)
        self.storage_options = storage_options
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self.full = False
        self.before_commit: Callable[[], None] | None = None
        self._file: storage.AtomicFile | None = None
        self._write: Write | None = None
        self._count = self._size = 0  # the size counts samples whose copy may be pending
        self._last_key: str | None = None

    def add(self, key: str, size: int, emit: Callable[[Write], None]) -> bool:
        """Add a sample of ``size`` bytes that ``emit(write)`` writes; False (and nothing
        written) once ``max_shards`` shards are full."""
        check_key_order(self._last_key, key)
        file = self._file
        if file is not None and self.cut.full(self._count, self._size, size):
            self._commit()
        if self.full:
            return False
        write = self._write if self._write is not None else self._open()
        emit(write)
        self._count += 1
        self._size += size
        self._last_key = key
        return True

    def _open(self) -> Write:
        url = shard_name(self.pattern, len(self.shards))
        file = storage.open_atomic(url, storage_options=self.storage_options, hash=self.hash)
        self._file, self._count, self._size = file, 0, 0
        self._write = write = file.write  # one bound method: the scanner batches by identity
        return write

    def _commit(self) -> None:
        file = self._file
        if file is None:
            return
        if self.before_commit is not None:
            self.before_commit()  # pending bytes of this shard go out first
        file.write(END_OF_ARCHIVE)
        self._file = self._write = None
        file.commit()
        info = ShardInfo(file.url, self._count, file.size, file.digest, len(self.shards))
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info)
        if self.max_shards is not None and len(self.shards) >= self.max_shards:
            self.full = True

    def close(self) -> list[ShardInfo]:
        self._commit()
        return self.shards

    def abort(self) -> None:
        file, self._file, self._write = self._file, None, None
        if file is not None:
            file.discard()


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
