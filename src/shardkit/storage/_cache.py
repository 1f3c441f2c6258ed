"""``cache_dir``: a local copy of a remote object, final only once complete."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import secrets
from collections.abc import Callable
from typing import Any, BinaryIO

from ..formats.names import TEMPORARY_MARK
from ._remote import _ResumableReader
from ._urls import basename

__all__ = ["cache_path"]

logger = logging.getLogger(__name__)

_DRAIN_LIMIT = 16 << 20  # bytes read on close to complete a cached copy


def cache_path(url: str, cache_dir: str) -> str:
    """Where ``open_read(url, cache_dir=...)`` keeps its copy of ``url``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", basename(url))[-80:]
    return os.path.join(cache_dir, f"{digest}-{name}")


class _CachingReader(io.RawIOBase):
    """Pass a stream through while copying it to ``path``, committed only when complete
    (see :func:`open_read`)."""

    def __init__(
        self,
        raw: _ResumableReader,
        path: str,
        url: str,
        check: Callable[[BinaryIO], bool] | None,
        limit: int | None = None,
    ) -> None:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._raw = raw
        self._path = path
        self._url = url
        self._check = check
        self._limit = limit
        self._written = 0
        # Unique across processes that share the folder, in containers too (where two
        # processes can have the same pid), and created exclusively: a copy never writes
        # into another reader's copy in progress.
        self._tmp = f"{path}{TEMPORARY_MARK}{os.getpid()}-{secrets.token_hex(8)}"
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        self._out: BinaryIO | None = open(fd, "wb")  # noqa: SIM115

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer) or 0
        if self._out is not None:
            if n:
                self._out.write(memoryview(buffer)[:n])
                self._written += n
            else:
                self._commit()
        return n

    def _commit(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        out.close()
        if self._complete():
            os.replace(self._tmp, self._path)
            if self._limit is not None:
                from ..cachelimit import enforce_limit

                enforce_limit(os.path.dirname(self._path) or ".", self._limit)
            return
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)

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
            if self._out is not None:
                self._out.close()
                self._out = None
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp)
            self._raw.close()
            super().close()

    def _drain(self) -> None:
        """Read what little is left (a tar's last zero block) so the copy can commit."""
        buffer = bytearray(1 << 20)
        left = _DRAIN_LIMIT
        with contextlib.suppress(Exception):
            while left > 0 and self._out is not None:
                left -= self.readinto(buffer)
