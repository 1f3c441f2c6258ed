"""The reading door: how shardkit opens a file it did not just write.

A manifest, an ``.idx`` file, the build journal, a list, a cache entry: each is untrusted,
whoever wrote it. Locally, such a file is opened without blocking (``O_NONBLOCK``: a FIFO
planted at its name cannot hang the open) and must be a regular file (``fstat``: a FIFO, a
device such as ``/dev/zero`` behind a link, a socket or a folder is refused with one line);
a document read whole is size-bounded before a byte is read. Remote objects are read
through :func:`~shardkit.storage.open_read`, at most the bound plus one byte. A shard the
user names as a stream (``-``, ``pipe:``, a FIFO given by name) is opened by ``open_read``
as asked: the door is for the files shardkit finds.

Parsing what the door returns is :func:`shardkit.formats.jsondoc.load_json`'s job (bounded
size and depth).
"""

from __future__ import annotations

import errno
import fcntl
import io
import os
import stat
from typing import Any, BinaryIO

from ..budget import limit as budget_limit
from ..budget import refuse
from ..errors import StorageError
from ._access import LOCAL, Access
from ._filesystems import _fs
from ._remote import READ_RETRIES, _ResumableReader
from ._urls import is_local, local_path

__all__ = ["folder_entries", "open_regular", "open_regular_fd", "read_document", "read_regular"]

#: The most bytes one read of a document asks for (its whole is read in such steps).
_READ_STEP = 1 << 20

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
# O_NOATIME (Linux) is refused with EPERM unless this process owns the file: dropped for
# the rest of the process at the first refusal (a dataset mostly has one owner).
_no_atime = getattr(os, "O_NOATIME", 0)


def open_regular(path: str, *, url: str | None = None, buffering: int = -1) -> BinaryIO:
    """The regular file at ``path`` open for reading (binary), opened without blocking.

    Raises :class:`~shardkit.errors.StorageError` naming ``url`` (default ``path``) for
    anything that is not a regular file; :class:`FileNotFoundError` (as it is) when there
    is nothing at ``path``."""
    fd = os.open(path, _FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"not a regular file ({_kind(info.st_mode)})", url=url or path)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def open_regular_fd(path: str, *, url: str | None = None) -> int:
    """:func:`open_regular`, as a bare descriptor (for ``pread`` and locks)."""
    with open_regular(path, url=url, buffering=0) as f:
        return os.dup(f.fileno())


def read_regular(path: str, size: int, *, url: str | None = None) -> bytes:
    """At most ``size + 1`` bytes of the regular file at ``path``, in one read call: a
    source's input file listed with ``size`` bytes (one byte more tells it grew).

    A FIFO or device is refused from its ``stat``, before it is opened; the file is opened
    without blocking and checked again with ``fstat``, in case it was swapped since. Where
    permitted (the file's owner), the read leaves its access time alone (``O_NOATIME``):
    packing a dataset is no reason to write to every inode on the source disk.
    :class:`~shardkit.errors.StorageError` naming ``url`` (default ``path``) for anything
    but a regular file; OSError as it is."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        fd = _open_quietly(path)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                return os.read(fd, size + 1) if size < 0x7FFFF000 else _read_fd(fd)
        finally:
            os.close(fd)
    raise StorageError(f"not a regular file ({_kind(mode)})", url=url or path)


def _open_quietly(path: str) -> int:
    """``path`` opened for reading without blocking and, while permitted, without
    updating its access time."""
    global _no_atime
    if _no_atime:
        try:
            return os.open(path, _FLAGS | os.O_NOCTTY | _no_atime)
        except PermissionError as exc:
            if exc.errno != errno.EPERM:  # EACCES: unreadable, whatever the flags
                raise
            _no_atime = 0
    return os.open(path, _FLAGS | os.O_NOCTTY)


def _read_fd(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 26):
        parts.append(chunk)
    return b"".join(parts)


def folder_entries(folder: str) -> tuple[frozenset[str], dict[str, int]]:
    """Every name in the local ``folder`` and the size of each regular file in it (links
    followed), in one scan; OSError as it is. Only a regular file may be taken for a shard:
    a FIFO, device or socket at a shard's name is left out, so a reader never waits on one
    it found rather than was given. Every other name is kept, so one at a name a listing
    looks for (an ``.idx`` beside a shard) is found, and refused by name when it is opened
    (:func:`open_regular`), never taken for missing."""
    names: set[str] = set()
    sizes: dict[str, int] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            names.add(entry.name)
            if entry.is_file():  # follows links; a dangling one is no file
                sizes[entry.name] = entry.stat().st_size
    return frozenset(names), sizes


def read_document(
    url: str,
    *,
    access: Access = LOCAL,
    limit: int | None = None,
    what: str = "file",
) -> bytes:
    """The whole of a small file shardkit did not just write (a manifest, an index), at
    most ``limit`` bytes (None: the budget's ``document`` limit, ``SHARDKIT_MAX_DOCUMENT``,
    which the parse applies too): StorageError (one line naming ``url`` and ``what``) for
    a file over it, one that is not a regular file, or one that cannot be read."""
    budgeted = limit is None
    if limit is None:
        limit = budget_limit("document")
    try:
        if is_local(url):
            with open_regular(local_path(url), url=url) as f:
                size = os.fstat(f.fileno()).st_size
                _check_size(size, limit, url, what, budgeted)
                data = _read_bounded(f, limit)
        else:
            fs, path = _fs(url, access)
            remote = _ResumableReader(fs, path, url, retries=READ_RETRIES)
            with io.BufferedReader(remote) as stream:
                data = _read_bounded(stream, limit)
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageError(f"no such {what}", url=url) from exc
    except OSError as exc:
        raise StorageError(f"cannot read the {what}: {exc.strerror or exc}", url=url) from exc
    _check_size(len(data), limit, url, what, budgeted)  # grew while read, or remote
    return data


def _read_bounded(stream: Any, limit: int) -> bytes:
    """What ``stream`` holds, up to ``limit + 1`` bytes (one more tells it is over), read
    in steps: ``read(limit + 1)`` would allocate the whole limit for a file of a few bytes."""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = stream.read(min(left, _READ_STEP))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _check_size(size: int, limit: int, url: str, what: str, budgeted: bool) -> None:
    if size > limit and budgeted:
        refuse("document", size, what=f"the {what}", error=StorageError, url=url)
    if size > limit:
        raise StorageError(f"the {what} is larger than the {limit}-byte limit", url=url)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a file"
