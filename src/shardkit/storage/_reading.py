"""Opening a URL for streaming reads: local files, stdin, ``pipe:``, fsspec protocols."""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, BinaryIO, cast

from .. import config
from ..errors import StorageError
from ._access import LOCAL, Access
from ._cache import _CachingReader, cache_path, open_cached
from ._filesystems import _fs
from ._remote import _STREAM_BUFFER, READ_RETRIES, _ResumableReader
from ._urls import is_executing, is_local, local_path

__all__ = ["map_file", "open_read"]


class _PipeReader(io.RawIOBase):
    """stdout of a shell command; closing checks the exit status."""

    def __init__(self, command: str) -> None:
        self._command = command
        self._proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE)
        self._out = cast(IO[bytes], self._proc.stdout)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._out.readinto(buffer)  # type: ignore[attr-defined, no-any-return]

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._out.close()
        status = self._proc.wait()
        # -13 (SIGPIPE) is normal when the reader stops early.
        if status not in (0, -13):
            raise StorageError(f"command exited with status {status}", url=f"pipe:{self._command}")


def open_read(
    url: str,
    *,
    access: Access = LOCAL,
    buffer_size: int = 1 << 20,
    cache_dir: str | None = None,
    retries: int = READ_RETRIES,
    cache_check: Callable[[BinaryIO], bool] | None = None,
    cache_limit: int | None = None,
) -> BinaryIO:
    """Open a URL for streaming reads; the caller closes the stream.

    Remote URLs stream: the first bytes arrive before the whole object has been read.
    A transient failure (connection reset, timeout, HTTP 5xx) is retried up to
    ``retries`` times with backoff, resuming at the byte offset reached (a Range request).
    With ``cache_dir``, a remote object is read from its cached copy when there is one;
    otherwise it streams as usual while a copy is written beside it, which takes its
    final name only once the stream provably ended where the object ends: at its end of
    stream, with as many bytes as the server said (where it said), and, with
    ``cache_check``, only if ``cache_check(copy)`` confirms the content is whole (an HTTP
    body without a length can end cleanly yet early). Otherwise the copy is dropped.
    ``cache_limit`` (bytes) bounds the cache folder: whole copies are evicted, least
    recently used first, never one being read (:mod:`shardkit.cachelimit`).
    ``buffer_size=0`` opens a local file unbuffered (for readers that seek over data);
    a pipe or a remote stream keeps a buffer of the default size.
    """
    stream_buffer = buffer_size or _STREAM_BUFFER  # io.BufferedReader needs one
    with opening(url, "cannot open for reading"):
        if url == "-":
            return cast(BinaryIO, sys.stdin.buffer)
        if is_executing(url):
            if not config.allow_pipe_urls():
                raise StorageError("pipe: URLs are disabled (SHARDKIT_ALLOW_PIPE=0)", url=url)
            return io.BufferedReader(_PipeReader(url[5:]), stream_buffer)
        if is_local(url):
            return open(local_path(url), "rb", buffering=buffer_size)
        if cache_dir is not None:
            cached = open_cached(cache_path(url, cache_dir), buffer_size)
            if cached is not None:
                return cached
        fs, path = _fs(url, access)
        remote = _ResumableReader(fs, path, url, retries=retries)
        if cache_dir is None:
            return io.BufferedReader(remote, stream_buffer)
        copying = _CachingReader(remote, cache_path(url, cache_dir), url, cache_check, cache_limit)
        return io.BufferedReader(copying, stream_buffer)


@contextlib.contextmanager
def opening(url: str, failed: str = "cannot open") -> Iterator[None]:
    """Raise an OSError of opening ``url`` as a StorageError naming it: ``no such file``,
    or ``failed`` and the reason (a StorageError goes on as it is)."""
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageError("no such file", url=url) from exc
    except OSError as exc:
        raise StorageError(f"{failed}: {exc.strerror or exc}", url=url) from exc


def map_file(fd: int) -> mmap.mmap | None:
    """A read-only memory map of the whole regular file open as ``fd`` (the map holds
    its own descriptor); None for anything else (a pipe, a device) or an empty file.

    Views of the map keep it alive. A file that another process truncates while it is
    mapped ends the reading process with SIGBUS, as with any memory-mapped reader:
    shards are never changed in place (they are written under a temporary name and
    renamed), and a renamed-over file stays mapped as it was."""
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return None
    return mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ)
