"""``cache_dir``: a local copy of a remote object, final only once complete."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
from typing import Any, BinaryIO

from ._urls import basename

__all__ = ["cache_path"]

_DRAIN_LIMIT = 16 << 20  # bytes read on close to complete a cached copy


def cache_path(url: str, cache_dir: str) -> str:
    """Where ``open_read(url, cache_dir=...)`` keeps its copy of ``url``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", basename(url))[-80:]
    return os.path.join(cache_dir, f"{digest}-{name}")


class _CachingReader(io.RawIOBase):
    """Pass a stream through while copying it to ``path``, committed only when complete."""

    def __init__(self, raw: io.RawIOBase, path: str) -> None:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        self._raw = raw
        self._path = path
        self._tmp = f"{path}.tmp-{os.getpid()}-{id(self):x}"
        self._out: BinaryIO | None = open(self._tmp, "wb")  # noqa: SIM115

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer) or 0
        if self._out is not None:
            if n:
                self._out.write(memoryview(buffer)[:n])
            else:
                self._commit()
        return n

    def _commit(self) -> None:
        out, self._out = self._out, None
        if out is not None:
            out.close()
            os.replace(self._tmp, self._path)

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
