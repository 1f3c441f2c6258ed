"""Remote reads that resume: a transient failure reopens the object at the offset
reached (a Range request); an HTTP stream that stalls is reopened too."""

from __future__ import annotations

import contextlib
import io
import logging
import time
from typing import Any

from .._optional import require
from ..errors import StorageError
from ._filesystems import protocol

__all__ = ["READ_RETRIES", "is_transient", "read_failure", "wait_to_retry"]

logger = logging.getLogger(__name__)

_BLOCK_SIZE = 8 << 20  # ranged reads of seekable object stores (s3, gs)
_STREAM_BUFFER = 1 << 20  # the buffer of a pipe or remote stream
# An HTTP stream silent this long (no header or body byte) is reopened where it stopped:
# a stalled connection otherwise waits for aiohttp's 5-minute total timeout, or forever.
_HTTP_STALL_S = 60.0
_HTTP_CONNECT_S = 30.0
_BACKOFF_S = 0.2
_BACKOFF_MAX_S = 5.0

READ_RETRIES = 5
"""How many times a transient failure of a remote read is retried: streams and ranged
reads alike, each retry after :func:`wait_to_retry`."""
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def is_transient(exc: BaseException) -> bool:
    """Whether a read error is worth retrying: resets, timeouts, 5xx (not 404 or 403)."""
    if isinstance(exc, _PERMANENT):
        return False
    status = getattr(exc, "status", None)
    if status is None:
        status = getattr(exc, "code", None)  # gcsfs's HttpError
    if isinstance(status, int):
        return status >= 500 or status in (408, 429)
    if type(exc) is OSError and exc.errno is None and str(exc).startswith("Forbidden"):
        return False  # gcsfs reports a 403 as a bare OSError("Forbidden: <path> ...")
    if isinstance(exc, (OSError, TimeoutError, EOFError)):
        return True
    if any(
        klass.__module__ == "botocore.exceptions" and klass.__name__ in _BOTOCORE_SETUP_ERRORS
        for klass in type(exc).__mro__
    ):
        return False
    roots = {klass.__module__.partition(".")[0] for klass in type(exc).__mro__}
    return bool(roots & {"aiohttp", "botocore", "urllib3", "requests"})


# botocore's errors in the client's own setup (a profile, credentials, a region, an
# endpoint, parameters): no retry mends them.
_BOTOCORE_SETUP_ERRORS = {
    "ProfileNotFound",
    "NoCredentialsError",
    "PartialCredentialsError",
    "NoRegionError",
    "EndpointResolutionError",
    "InvalidEndpointConfigurationError",
    "ParamValidationError",
    "UnknownServiceError",
    "InvalidConfigError",
}


def wait_to_retry(url: str, exc: BaseException, offset: int, attempt: int, retries: int) -> None:
    """Say that retry ``attempt`` (from 1) of ``retries`` follows ``exc`` at byte ``offset``
    of ``url``, then wait its backoff (0.2 s, doubling, at most 5 s)."""
    delay = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))
    logger.warning(
        "%s: %s at byte %d; retry %d of %d in %.1f s",
        url,
        type(exc).__name__,
        offset,
        attempt,
        retries,
        delay,
    )
    time.sleep(delay)


def read_failure(exc: BaseException, url: str, offset: int, retries: int = 0) -> StorageError:
    """The StorageError of a remote read that failed with ``exc`` (after ``retries``)."""
    if isinstance(exc, FileNotFoundError):
        return StorageError("no such file", url=url)
    tried = f" (gave up after {retries} retries)" if retries else ""
    return StorageError(f"read failed: {type(exc).__name__}: {exc}{tried}", url=url, offset=offset)


def _http_timeout() -> Any:
    aiohttp = require("aiohttp", "http:// URLs")

    return aiohttp.ClientTimeout(total=None, sock_connect=_HTTP_CONNECT_S, sock_read=_HTTP_STALL_S)


class _ResumableReader(io.RawIOBase):
    """A remote object read front to back; transient failures reopen it at the offset reached.

    HTTP(S) is one streaming GET (a Range request when resuming), so the first bytes come
    before the rest have been sent; other fsspec protocols read ranged blocks.
    """

    @property
    def size(self) -> int | None:
        """The object's length in bytes, where the server said it."""
        return self._end

    def __init__(self, fs: Any, path: str, url: str, *, retries: int) -> None:
        self._fs, self._path, self._url, self._retries = fs, path, url, retries
        self._pos = 0
        self._end: int | None = None
        self._http = protocol(fs) in ("http", "https")
        self._stream: Any = None
        self._with_retries(None)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset``; the next read reopens the object there (a Range request)."""
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            if self._end is None:
                raise io.UnsupportedOperation("the size of this object is unknown")
            offset += self._end
        elif whence != io.SEEK_SET:
            raise ValueError(f"bad whence {whence}")
        if offset < 0:
            raise ValueError(f"negative seek position {offset}")
        if offset != self._pos:
            self._close_stream()
            self._pos = offset
        return offset

    def readinto(self, buffer: Any) -> int:
        if self._end is not None and self._pos >= self._end:
            return 0
        data = self._with_retries(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._pos += n
        return n

    def _with_retries(self, size: int | None) -> bytes:
        """Read up to ``size`` bytes (None: only open), reopening after transient errors."""
        attempt = 0
        while True:
            try:
                if self._stream is None:
                    self._reopen()
                return b"" if size is None else self._read(size)
            except Exception as exc:
                self._close_stream()
                if not is_transient(exc) or attempt >= self._retries:
                    raise read_failure(exc, self._url, self._pos, attempt) from exc
                attempt += 1
                wait_to_retry(self._url, exc, self._pos, attempt, self._retries)

    def _read(self, size: int) -> bytes:
        data = bytes(self._stream.read(size))
        if not data and self._end is not None and self._pos < self._end:
            raise ConnectionResetError(f"the body ended at byte {self._pos} of {self._end}")
        return data

    def _reopen(self) -> None:
        self._close_stream()
        if self._http:
            self._stream = self._open_http(self._pos)
        else:
            stream = self._fs.open(self._path, "rb", block_size=_BLOCK_SIZE, cache_type="readahead")
            self._stream = stream
            if self._pos:
                stream.seek(self._pos)
            self._end = getattr(stream, "size", None)

    def _open_http(self, offset: int) -> Any:
        headers = dict(getattr(self._fs, "kwargs", {}).get("headers") or {})
        if offset:
            headers["Range"] = f"bytes={offset}-"
        # A stream needs no size; giving one skips fsspec's HEAD request, a round trip per
        # shard whose failures (a 503 included) fsspec reports as FileNotFoundError.
        extra: dict[str, Any] = {}
        if "timeout" not in (getattr(self._fs, "client_kwargs", None) or {}):
            extra["timeout"] = _http_timeout()  # unless the caller set their own
        stream = self._fs.open(self._path, "rb", block_size=0, size=1, headers=headers, **extra)
        response = getattr(stream, "r", None)
        length = getattr(response, "content_length", None)
        if offset and getattr(response, "status", 206) == 200:
            # The server ignored the Range header: read up to the offset again.
            left = offset
            while left > 0:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionResetError("the body ended before the resume offset")
                left -= len(chunk)
            self._end = length
        else:
            self._end = None if length is None else offset + length
        return stream

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def close(self) -> None:
        self._close_stream()
        super().close()
