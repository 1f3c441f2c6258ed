"""A size limit for the local shard cache (``cache_dir=`` with ``cache_limit=``).

Whole cached shards are evicted, least recently used first, until the complete copies in
the folder fit the limit; a copy that any process is reading is never evicted. Locks are
``flock`` locks, so they hold across DataLoader workers and unrelated processes sharing
the folder (on one machine; not over NFS):

* a reader holds a *shared* lock on its open copy for as long as it reads it
  (``storage.open_read``), and marks the copy used (its mtime) when it opens it;
* eviction takes the folder's lock file exclusively (one evictor at a time), then for
  each candidate a non-blocking *exclusive* lock on the copy: refused while anyone reads
  it, so that copy stays. A reader that opened a copy just before it was evicted sees it
  unlinked once it has its lock, and treats it as a miss.

A shard copy's index (its name + ``.idx``, fetched whole beside it and read once per
process, so its own mtime says nothing of use) goes with its shard: the two count as one
entry of the shard's last use and size, and are evicted together, never the index alone
while its shard stays (the shard would then be parsed on every read). An index copy whose
shard copy is gone is an entry of its own.

Copies being written (temporaries, :mod:`shardkit._temporary`) are neither counted nor
evicted, so the folder can be over the limit by the shards downloading at that moment, and
by copies in use; a fresh copy stays share-locked from its creation until its reader has it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os

from ._flock import lock_exclusive
from ._temporary import is_temporary
from .formats.names import INDEX_SUFFIX

__all__ = ["LOCK_NAME", "enforce_limit", "lock_shared"]

logger = logging.getLogger(__name__)

LOCK_NAME = ".shardkit-cache.lock"


def lock_shared(fd: int) -> bool:
    """Take a shared lock on an open cached copy and mark it used; False when the copy
    was evicted (unlinked) before the lock was had."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    if os.fstat(fd).st_nlink == 0:
        return False
    with contextlib.suppress(OSError):
        os.utime(fd)  # the LRU clock: a read-only copy's mtime is free to use
    return True


def enforce_limit(cache_dir: str, limit: int) -> list[str]:
    """Evict least recently used complete copies until those left total at most
    ``limit`` bytes, skipping copies in use (a shard copy with its index copy, if any);
    the names evicted."""
    lock_path = os.path.join(cache_dir, LOCK_NAME)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        entries = _entries(cache_dir)
        total = sum(size for _, size, _ in entries)
        evicted: list[str] = []
        for _, size, names in sorted(entries):
            if total <= limit:
                break
            if _evict(os.path.join(cache_dir, names[0])):
                for name in names[1:]:  # the shard copy's index: not locked by readers
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(cache_dir, name))
                total -= size
                evicted.extend(names)
        if total > limit:
            logger.warning(
                "shard cache %s holds %d bytes, over its %d-byte limit: the rest is in use",
                cache_dir,
                total,
                limit,
            )
        return evicted


def _entries(cache_dir: str) -> list[tuple[float, int, tuple[str, ...]]]:
    """(last use, size, names) of each complete copy in the folder, a shard copy and its
    index copy as one entry (the shard's name first)."""
    copies = {name: (used, size) for used, size, name in _complete_copies(cache_dir)}
    entries: list[tuple[float, int, tuple[str, ...]]] = []
    for name, (used, size) in copies.items():
        if name.endswith(INDEX_SUFFIX) and name[: -len(INDEX_SUFFIX)] in copies:
            continue  # counted with its shard copy
        index = copies.get(name + INDEX_SUFFIX)
        if index is None:
            entries.append((used, size, (name,)))
        else:
            entries.append((used, size + index[1], (name, name + INDEX_SUFFIX)))
    return entries


def _complete_copies(cache_dir: str) -> list[tuple[float, int, str]]:
    """(last use, size, name) of each complete copy in the folder."""
    copies = []
    with os.scandir(cache_dir) as entries:
        for entry in entries:
            if entry.name.startswith(".") or is_temporary(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.is_file(follow_symlinks=False):
                copies.append((info.st_mtime, info.st_size, entry.name))
    return copies


def _evict(path: str) -> bool:
    """Unlink ``path`` unless someone holds a lock on it; whether it was removed."""
    try:
        fd = lock_exclusive(path)
    except BlockingIOError:
        return False  # being read
    if fd is None:
        return False  # gone, or replaced by a fresh copy meanwhile: leave that one
    try:
        os.unlink(path)
        return True
    finally:
        os.close(fd)
