"""Read byte ranges of shards, for random access: local files by ``pread``, remote objects
by ranged reads, through a small pool of open handles.

A :class:`RangeReader` keeps at most ``max_open`` shards open (least recently used is
let go first, and closed once no thread is reading through it). Local files are read with
``os.pread``, which has no file position, so threads may share a handle. With
``cache_dir`` a remote shard is first copied whole into the cache (the same copy that
:func:`shardkit.storage.open_read` keeps, committed only when proven complete, with
``cache_check(url, copy)`` where given) and then read locally; without it, each read is
one ranged request, retried on transient failures as streaming reads are. The pool
belongs to one process: it is neither pickled nor used after a fork (DataLoader workers
open their own).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import mmap
import os
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from . import storage
from .cachelimit import enforce_limit, lock_shared
from .errors import StorageError
from .formats.tar import Buffer
from .storage import LOCAL, Access

__all__ = ["RangeReader"]

logger = logging.getLogger(__name__)

_CACHE_TRIES = 5  # fetches of a shard the bounded cache keeps evicting before giving up


class _Local:
    def __init__(self, path: str, *, cached: bool = False) -> None:
        self.fd = storage.open_regular_fd(path)  # a FIFO or device there: refused
        self.size = os.fstat(self.fd).st_size
        # A cache copy stays share-locked while open, so a bounded cache keeps it.
        if cached and not lock_shared(self.fd):
            os.close(self.fd)
            raise FileNotFoundError(path)  # evicted between open and lock
        self.map: mmap.mmap | None = None

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def mapping(self) -> mmap.mmap | None:
        """The file memory-mapped (read-only, once, on first use); None if it is empty."""
        if self.map is None:
            self.map = storage.map_file(self.fd)
        return self.map

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        mapped, self.map = self.map, None
        if mapped is not None:
            with contextlib.suppress(BufferError):  # else it closes with its last view
                mapped.close()
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            self.close()


class _Remote:
    def __init__(self, url: str, access: Access) -> None:
        self.url = url
        self.fs, self.path = storage.filesystem(url, access)
        self.size = int(self.fs.size(self.path))
        self.file: Any = None
        self.lock = threading.Lock()

    def read(self, offset: int, size: int) -> bytes:
        with self.lock:  # an fsspec file has one position
            if self.file is None:
                self.file = self.fs.open(self.path, "rb", cache_type="none", size=self.size)
            self.file.seek(offset)
            return bytes(self.file.read(size))

    def close(self) -> None:
        file, self.file = self.file, None
        if file is not None:
            file.close()


class RangeReader:
    """Byte ranges of shards at any URL; see the module docs."""

    def __init__(
        self,
        *,
        access: Access = LOCAL,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        cache_check: Callable[[str, BinaryIO], bool] | None = None,
        max_open: int = 16,
    ) -> None:
        if isinstance(max_open, bool) or not isinstance(max_open, int) or max_open < 1:
            raise ValueError(f"max_open must be an int >= 1, not {max_open!r}")
        self.access = access
        self.cache_dir = cache_dir
        self.cache_limit = cache_limit
        self.cache_check = cache_check
        self.max_open = max_open
        self._init_pool()

    def _init_pool(self) -> None:
        self._pid = os.getpid()
        self._open: collections.OrderedDict[str, _Local | _Remote] = collections.OrderedDict()
        self._lock = threading.Lock()

    def size(self, url: str) -> int:
        """The size of a shard in bytes."""
        return self._handle(url).size

    def span(self, url: str, offset: int, size: int, *, mapped: bool = True) -> tuple[Buffer, int]:
        """``(buffer, start)``: the ``size`` bytes of ``url`` from ``offset`` are
        ``buffer[start : start + size]``, fewer where the shard ends first.

        A local shard (or cache copy) is memory-mapped once per process and kept while
        the shard is open (``mapped=False``: read by ``pread`` instead); the buffer is
        the map, nothing is copied, and views of it keep it alive after the shard is
        let go. Before a map is sliced the file's size is checked, so a shard cut short
        since it was mapped gives its short bytes (a read) rather than SIGBUS. A remote
        shard: the bytes of one ranged read (``start`` 0)."""
        handle = self._handle(url)
        if mapped and isinstance(handle, _Local):
            try:
                whole = handle.mapping()
                holds = os.fstat(handle.fd).st_size if whole is not None else 0
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot map: {exc}", url=url) from exc
            if whole is not None and offset + size <= min(holds, len(whole)):
                return whole, offset
        return self.read(url, offset, size, exact=False), 0

    def read(self, url: str, offset: int, size: int, *, exact: bool = True) -> bytes:
        """``size`` bytes of ``url`` from ``offset``; StorageError if fewer are there
        (``exact=False``: the bytes there are, fewer at the end of the shard)."""
        handle = self._handle(url)
        retries = storage.READ_RETRIES if isinstance(handle, _Remote) else 0
        attempt = 0
        while True:
            try:
                data = handle.read(offset, size)
                break
            except StorageError:
                raise
            except Exception as exc:
                if not storage.is_transient(exc) or attempt >= retries:
                    raise storage.read_failure(exc, url, offset, attempt) from exc
                attempt += 1
                handle.close()
                storage.wait_to_retry(url, exc, offset, attempt, retries)
        if len(data) != size and exact:
            raise StorageError(
                f"short read: {len(data)} of {size} bytes (the shard changed?)",
                url=url,
                offset=offset,
            )
        return data

    def _handle(self, url: str) -> _Local | _Remote:
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's handles are not ours
                self._init_pool()
            handle = self._open.get(url)
            if handle is not None:
                self._open.move_to_end(url)
                return handle
            handle = self._new_handle(url)
            self._open[url] = handle
            while len(self._open) > self.max_open:
                # Not closed here: a thread may be reading through it. It closes (and its
                # cache lock goes) when the last reader lets go of it.
                self._open.popitem(last=False)
            return handle

    def _new_handle(self, url: str) -> _Local | _Remote:
        with storage.opening(url):
            if storage.is_local(url):
                return _Local(storage.local_path(url))
            if self.cache_dir is not None:
                return self._cached(url, self.cache_dir)
            return _Remote(url, self.access)

    def _cached(self, url: str, cache_dir: str) -> _Local:
        """The cache copy of ``url``, fetched whole first when there is none."""
        path = storage.cache_path(url, cache_dir)
        check = None if self.cache_check is None else functools.partial(self.cache_check, url)
        for _ in range(_CACHE_TRIES):
            with contextlib.suppress(FileNotFoundError):
                return _Local(path, cached=True)
            handle: _Local | None = None
            stream = storage.open_read(
                url, access=self.access, cache_dir=cache_dir, cache_check=check
            )
            with stream:
                while stream.read(1 << 20):
                    pass
                # Locked while the stream still holds the fresh copy's lock: no process
                # can evict it in between.
                if not os.path.exists(path):  # open_read could not prove the copy whole
                    raise StorageError(
                        "cannot cache this shard: it could not be shown complete", url=url
                    )
                with contextlib.suppress(FileNotFoundError):
                    handle = _Local(path, cached=True)
            if handle is not None:
                if self.cache_limit is not None:  # now that our copy is locked: never it
                    enforce_limit(cache_dir, self.cache_limit)
                return handle
        raise StorageError("the cache evicts this shard as fast as it is fetched", url=url)

    def close(self) -> None:
        """Close every open handle."""
        with self._lock:
            while self._open:
                _, handle = self._open.popitem()
                handle.close()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "access": self.access,
            "cache_dir": self.cache_dir,
            "cache_limit": self.cache_limit,
            "cache_check": self.cache_check,
            "max_open": self.max_open,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_pool()
