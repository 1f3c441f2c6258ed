"""``cache_dir``: a local copy of a remote object, final only once complete.

A shard's copy is written as it streams (:class:`_CachingReader`); a small object read
whole (a shard's ``.idx``) is fetched and kept by :func:`refresh_copy`, so that once a
remote shard and its index are in the cache, reading it costs no request and takes the
mapped path of a local shard with an index."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import logging
import os
import re
from collections.abc import Callable
from typing import Any, BinaryIO

from .._temporary import create_temporary
from ..cachelimit import enforce_limit, lock_shared
from ..errors import StorageError
from ._access import LOCAL, Access
from ._doors import open_regular, read_document
from ._remote import _ResumableReader
from ._urls import basename

__all__ = ["cache_path", "open_cached", "refresh_copy"]

logger = logging.getLogger(__name__)

_DRAIN_LIMIT = 16 << 20  # bytes read on close to complete a cached copy


def cache_path(url: str, cache_dir: str) -> str:
    """Where ``open_read(url, cache_dir=...)`` keeps its copy of ``url``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", basename(url))[-80:]
    return os.path.join(cache_dir, f"{digest}-{name}")


def open_cached(path: str, buffer_size: int) -> BinaryIO | None:
    """The cached copy at ``path``, share-locked while open and marked used; None if there
    is none (or it was just evicted). It comes through the reading door: a FIFO or a
    device planted at its name is refused (StorageError), never waited on."""
    try:
        stream = open_regular(path, url=path, buffering=buffer_size)
    except FileNotFoundError:
        return None
    if not lock_shared(stream.fileno()):
        stream.close()
        return None
    return stream


def refresh_copy(
    url: str,
    path: str,
    *,
    access: Access = LOCAL,
    what: str = "file",
) -> bool:
    """Fetch the small object at ``url`` whole (:func:`read_document`, its size bounded)
    as the copy at ``path`` in a cache folder, replacing any copy there; remove the copy
    when the object is not there. Whether a copy is there now. The copy is written under
    a temporary name and renamed when whole; one that cannot be written is logged and left
    out (StorageError for an object that cannot be read). A shard's index is kept at its
    shard copy's path + ``.idx``: the cache limit evicts the two together."""
    try:  # one request: an object that is not there answers it (no existence probe first)
        data = read_document(url, access=access, what=what)
    except StorageError as exc:
        if not isinstance(exc.__cause__, FileNotFoundError):
            raise
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return False
    tmp = ""
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fd, tmp = create_temporary(path)
        with open(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
        return True
    except OSError as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        logger.warning("%s: not cached: cannot write %s: %s", url, path, exc)
        return False


class _CachingReader(io.RawIOBase):
    """Pass a stream through while copying it to ``path``, committed only when complete
    (see :func:`open_read`).

    The copy never costs the reader a byte: when it cannot be written (a full or
    read-only ``cache_dir``), it is dropped with a warning and the stream goes on. The
    copy is share-locked from its creation until this stream closes, so a bounded cache
    (:mod:`shardkit.cachelimit`, in this process or another) never evicts it between the
    moment it becomes visible and the moment its reader locks it."""

    def __init__(
        self,
        raw: _ResumableReader,
        path: str,
        url: str,
        check: Callable[[BinaryIO], bool] | None,
        limit: int | None = None,
    ) -> None:
        self._raw = raw
        self._path = path
        self._url = url
        self._check = check
        self._limit = limit
        self._written = 0
        self._tmp = ""
        self._out: BinaryIO | None = None  # the copy being written
        self._held: BinaryIO | None = None  # the copy written: its lock held until close
        folder = os.path.dirname(path)
        try:
            if folder:
                os.makedirs(folder, exist_ok=True)
            # Random and created exclusively: a copy never writes into another reader's
            # copy in progress, nor through a link planted in the folder.
            fd, self._tmp = create_temporary(path)
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._out = open(fd, "wb")  # noqa: SIM115
        except OSError as exc:
            logger.warning("%s: not cached: cannot write in %s: %s", url, folder or ".", exc)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer) or 0
        if self._out is not None:
            if n:
                try:
                    self._out.write(memoryview(buffer)[:n])
                    self._written += n
                except OSError as exc:
                    self._drop(f"cannot write the copy: {exc}")
            else:
                self._commit()
        return n

    def _drop(self, problem: str) -> None:
        """Give up the copy (the stream itself goes on)."""
        out, self._out = self._out, None
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            if problem:
                logger.warning("%s: not cached: %s", self._url, problem)

    def _commit(self) -> None:
        out = self._out
        if out is None:
            return
        try:
            out.flush()  # what was buffered is written now: a full disk fails here
        except OSError as exc:
            self._drop(f"cannot write the copy: {exc}")
            return
        if not self._complete():
            self._drop("")
            return
        try:
            os.replace(self._tmp, self._path)
        except OSError as exc:
            self._drop(f"cannot commit the copy: {exc}")
            return
        self._out, self._held = None, out
        if self._limit is not None:
            enforce_limit(os.path.dirname(self._path) or ".", self._limit)

    def _complete(self) -> bool:
        """Whether the copy provably holds the whole object (see :func:`open_read`)."""
        size = self._raw.size
        if size is not None and size != self._written:
            problem = f"{self._written} bytes arrived, the server announced {size}"
        elif self._check is None:
            return size is not None
        else:
            try:
                with open(self._tmp, "rb") as copy:
                    if self._check(copy):
                        return True
                problem = "the stream ended cleanly but before the end of the shard"
            except OSError as exc:
                problem = f"cannot check the copy: {exc}"
        logger.warning("%s: not cached: %s", self._url, problem)
        return False

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._out is not None:
                self._drain()
        finally:
            self._drop("")
            held, self._held = self._held, None
            if held is not None:
                with contextlib.suppress(OSError):
                    held.close()
            self._raw.close()
            super().close()

    def _drain(self) -> None:
        """Read what little is left (a tar's last zero block) so the copy can commit."""
        buffer = bytearray(1 << 20)
        left = _DRAIN_LIMIT
        with contextlib.suppress(Exception):
            while left > 0 and self._out is not None:
                left -= self.readinto(buffer)
