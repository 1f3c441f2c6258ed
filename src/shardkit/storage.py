"""Open any shard URL for reading or writing: local paths, ``file:``, ``-`` (stdin/stdout),
``pipe:CMD``, and every fsspec protocol (``http(s)://``, ``s3://``, ``gs://``, ...).

Writing is atomic, through one object (:class:`AtomicFile`): a local file is written under
a hidden temporary name in the same folder and renamed when complete; an object store (s3,
gs) only makes an object visible when its upload completes, and an upload that fails is
discarded. No partial file ever carries a final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any, BinaryIO, NoReturn, cast

from . import config
from .digest import format_digest, new_hasher
from .errors import ConfigError, StorageError

__all__ = [
    "AtomicFile",
    "Tally",
    "atomic_write",
    "basename",
    "cache_path",
    "expand_urls",
    "filesystem",
    "is_local",
    "is_transient",
    "join",
    "local_path",
    "open_atomic",
    "open_read",
    "url_exists",
]

logger = logging.getLogger(__name__)

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}")


# --------------------------------------------------------------------------- URLs


def expand_urls(spec: str | Sequence[str]) -> list[str]:
    """Brace-expand one URL spec (``a-{000..009}.tar``, ``{a,b}.tar``) or a list of them."""
    if not isinstance(spec, str):
        return [url for item in spec for url in expand_urls(item)]
    if spec.startswith("pipe:"):
        return [spec]  # a shell command: braces are the shell's business
    start = spec.find("{")
    if start < 0:
        return [spec]
    depth, end = 0, -1
    for i in range(start, len(spec)):
        if spec[i] == "{":
            depth += 1
        elif spec[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end < 0:
        raise ConfigError(f"unbalanced '{{' in URL pattern {spec!r}")
    head, body, tail = spec[:start], spec[start + 1 : end], spec[end + 1 :]
    match = _RANGE.fullmatch("{" + body + "}")
    if match:
        lo_text, hi_text = match.group(1), match.group(2)
        width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
        lo, hi = int(lo_text), int(hi_text)
        step = 1 if hi >= lo else -1
        choices = [str(i).zfill(width) for i in range(lo, hi + step, step)]
    else:
        choices = _split_top_level(body)
    return [url for choice in choices for url in expand_urls(head + choice + tail)]


def _split_top_level(body: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[last:i])
            last = i + 1
    parts.append(body[last:])
    return parts


def is_local(url: str) -> bool:
    """True for plain paths and ``file:`` URLs."""
    return (
        not _SCHEME.match(url) and not url.startswith("pipe:") and url != "-"
    ) or url.startswith("file://")


def local_path(url: str) -> str:
    """The filesystem path of a local URL."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if url.startswith("file:"):
        return url[len("file:") :]
    return url


def join(base: str, name: str) -> str:
    """Join a folder URL and a name with exactly one '/'."""
    if is_local(base):
        return os.path.join(local_path(base), name)
    return base.rstrip("/") + "/" + name


def basename(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _fs(url: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a required dependency
        raise StorageError("fsspec is required for remote URLs", url=url) from exc
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    return fs, path


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of a remote URL and the path inside it."""
    return _fs(url, storage_options)


def url_exists(url: str, storage_options: dict[str, Any] | None = None) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = _fs(url, storage_options)
    return bool(fs.exists(path))


# --------------------------------------------------------------------------- reading


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
    storage_options: dict[str, Any] | None = None,
    buffer_size: int = 1 << 20,
    cache_dir: str | None = None,
    retries: int = 5,
) -> BinaryIO:
    """Open a URL for streaming reads; the caller closes the stream.

    Remote URLs stream: the first bytes arrive before the whole object has been read.
    A transient failure (connection reset, timeout, HTTP 5xx) is retried up to
    ``retries`` times with backoff, resuming at the byte offset reached (a Range request).
    With ``cache_dir``, a remote object is read from its cached copy when there is one;
    otherwise it streams as usual while a copy is written beside it, which takes its
    final name only once the whole object has been read (so it is never partial).
    ``buffer_size=0`` opens a local file unbuffered (for readers that seek over data);
    a pipe or a remote stream keeps a buffer of the default size.
    """
    stream_buffer = buffer_size or _STREAM_BUFFER  # io.BufferedReader needs one
    try:
        if url == "-":
            return cast(BinaryIO, sys.stdin.buffer)
        if url.startswith("pipe:"):
            if not config.allow_pipe_urls():
                raise StorageError("pipe: URLs are disabled (SHARDKIT_ALLOW_PIPE=0)", url=url)
            return io.BufferedReader(_PipeReader(url[5:]), stream_buffer)
        if is_local(url):
            return open(local_path(url), "rb", buffering=buffer_size)
        if cache_dir is not None:
            cached = cache_path(url, cache_dir)
            if os.path.exists(cached):
                return open(cached, "rb", buffering=buffer_size)
        fs, path = _fs(url, storage_options)
        raw: io.RawIOBase = _ResumableReader(fs, path, url, retries=retries)
        if cache_dir is not None:
            raw = _CachingReader(raw, cache_path(url, cache_dir))
        return io.BufferedReader(raw, stream_buffer)
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageError("no such file", url=url) from exc
    except OSError as exc:
        raise StorageError(f"cannot open for reading: {exc.strerror or exc}", url=url) from exc


def cache_path(url: str, cache_dir: str) -> str:
    """Where ``open_read(url, cache_dir=...)`` keeps its copy of ``url``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", basename(url))[-80:]
    return os.path.join(cache_dir, f"{digest}-{name}")


# --------------------------------------------------------------------------- remote reads

_BLOCK_SIZE = 8 << 20  # ranged reads of seekable object stores (s3, gs)
_STREAM_BUFFER = 1 << 20  # the buffer of a pipe or remote stream
# An HTTP stream silent this long (no header or body byte) is reopened where it stopped:
# a stalled connection otherwise waits for aiohttp's 5-minute total timeout, or forever.
_HTTP_STALL_S = 60.0
_HTTP_CONNECT_S = 30.0
_BACKOFF_S = 0.2
_BACKOFF_MAX_S = 5.0
_DRAIN_LIMIT = 16 << 20  # bytes read on close to complete a cached copy
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
    roots = {klass.__module__.partition(".")[0] for klass in type(exc).__mro__}
    return bool(roots & {"aiohttp", "botocore", "urllib3", "requests"})


def _http_timeout() -> Any:
    import aiohttp

    return aiohttp.ClientTimeout(total=None, sock_connect=_HTTP_CONNECT_S, sock_read=_HTTP_STALL_S)


class _ResumableReader(io.RawIOBase):
    """A remote object read front to back; transient failures reopen it at the offset reached.

    HTTP(S) is one streaming GET (a Range request when resuming), so the first bytes come
    before the rest have been sent; other fsspec protocols read ranged blocks.
    """

    def __init__(self, fs: Any, path: str, url: str, *, retries: int) -> None:
        self._fs, self._path, self._url, self._retries = fs, path, url, retries
        self._pos = 0
        self._end: int | None = None
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self._http = protocol in ("http", "https")
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
                    raise self._error(exc, attempt) from exc
                attempt += 1
                delay = min(_BACKOFF_MAX_S, _BACKOFF_S * 2 ** (attempt - 1))
                logger.warning(
                    "%s: %s at byte %d; retry %d of %d in %.1f s",
                    self._url,
                    type(exc).__name__,
                    self._pos,
                    attempt,
                    self._retries,
                    delay,
                )
                time.sleep(delay)

    def _error(self, exc: Exception, attempts: int) -> StorageError:
        if isinstance(exc, FileNotFoundError):
            return StorageError("no such file", url=self._url)
        tried = f" (gave up after {attempts} retries)" if attempts else ""
        return StorageError(
            f"read failed: {type(exc).__name__}: {exc}{tried}", url=self._url, offset=self._pos
        )

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


# --------------------------------------------------------------------------- writing


class Tally:
    """Counts bytes as they pass, and hashes them with ``hash`` (a name from
    :mod:`shardkit.digest`; ``"none"`` only counts)."""

    __slots__ = ("_hash", "hash", "size")

    def __init__(self, hash: str = "sha256") -> None:
        self.hash = hash
        self._hash = new_hasher(hash)
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        if self._hash is not None:
            self._hash.update(data)
        self.size += len(data)

    def hexdigest(self) -> str:
        """The hex digest of what passed (``""`` when not hashing)."""
        return self._hash.hexdigest() if self._hash is not None else ""

    @property
    def digest(self) -> str:
        """``ALGO:HEX`` of what passed (``""`` when not hashing)."""
        return format_digest(self.hash, self.hexdigest())


class AtomicFile:
    """A file being written that appears under its name only on :meth:`commit`.

    A local file is written under a hidden temporary name in the same folder
    (``.NAME.tmp-PID``) and renamed by :meth:`commit`; an object store (s3, gs) makes an
    upload visible only when it completes; other fsspec protocols write a temporary object
    and move it. :meth:`discard` drops what was written (also on an exception inside
    ``with``). ``-`` is stdout, committed by a flush. :attr:`tally` counts (and, with
    ``hash``, hashes) every byte written. An OSError while writing or committing
    (a full disk) is raised as a :class:`~shardkit.errors.StorageError` naming ``url``.
    ``buffering=0`` writes a local file unbuffered (for :meth:`writev`).
    ``hash`` names the digest algorithm (:mod:`shardkit.digest`); ``sha256=True`` is the
    older spelling of ``hash="sha256"``.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_options: dict[str, Any] | None = None,
        hash: str = "none",
        sha256: bool = False,
        fsync: bool = False,
        buffering: int = 1 << 20,
    ) -> None:
        self.url = url
        self.tally = Tally("sha256" if sha256 else hash)
        self._fsync = fsync
        self._fd = -1  # an unbuffered local file's descriptor (writev)
        self._fs: Any = None
        self._tmp = ""  # local: the temporary path; remote: the path written, "" if direct
        self._path = ""
        self._open = True
        if url == "-":
            self.stream: Any = sys.stdout.buffer
        elif is_local(url):
            self._open_local(local_path(url), buffering)
        else:
            self._open_remote(url, storage_options)

    def _open_local(self, path: str, buffering: int) -> None:
        folder, name = os.path.split(os.path.abspath(path))
        self._path, self._tmp = path, os.path.join(folder, f".{name}.tmp-{os.getpid()}")
        try:
            self.stream = open(self._tmp, "wb", buffering=buffering)  # noqa: SIM115
        except OSError as exc:
            self._raise(exc)
        if buffering == 0:
            self._fd = self.stream.fileno()

    def _open_remote(self, url: str, storage_options: dict[str, Any] | None) -> None:
        self._fs, self._path = _fs(url, storage_options)
        protocol = self._fs.protocol if isinstance(self._fs.protocol, str) else self._fs.protocol[0]
        if protocol not in ("s3", "s3a", "gs", "gcs", "memory"):  # no atomic upload
            self._tmp = f"{self._path}.tmp-{os.getpid()}"
        try:
            self.stream = self._fs.open(self._tmp or self._path, "wb")
        except OSError as exc:
            raise StorageError(f"cannot write: {exc}", url=url) from exc

    @property
    def closed(self) -> bool:
        """Whether it was committed or discarded."""
        return not self._open

    @property
    def digest(self) -> str:
        """``ALGO:HEX`` of every byte written (``""`` with ``hash="none"``)."""
        return self.tally.digest

    @property
    def sha256(self) -> str:
        """The hex sha256 of every byte written, when hashing with sha256 (else ``""``)."""
        return self.tally.hexdigest() if self.tally.hash == "sha256" else ""

    @property
    def size(self) -> int:
        return self.tally.size

    def fileno(self) -> int:
        """The descriptor of a local file (of its temporary name until committed)."""
        if self.url == "-" or not is_local(self.url):
            raise io.UnsupportedOperation(f"{self.url} is not a local file")
        return int(self.stream.fileno())

    def writable(self) -> bool:
        return self._open

    def write(self, data: bytes | memoryview) -> int:
        if self._fd >= 0:
            self.writev([data])
            return len(data)
        try:
            self.stream.write(data)
        except OSError as exc:
            self._raise(exc)
        self.tally.update(data)
        return len(data)

    def writev(self, chunks: Sequence[bytes | memoryview]) -> None:
        """Write ``chunks`` in order: one ``os.writev`` for an unbuffered local file."""
        if self._fd < 0:
            for chunk in chunks:
                self.write(chunk)
            return
        update = self.tally.update
        for chunk in chunks:
            update(chunk)
        try:
            written = os.writev(self._fd, chunks)
            total = sum(len(c) for c in chunks)
            if written != total:  # a short write (a signal, a nearly full disk)
                data = b"".join(chunks)[written:]
                while data:
                    data = data[os.write(self._fd, data) :]
        except OSError as exc:
            self._raise(exc)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self._raise(exc)

    def commit(self) -> None:
        """Make the file visible under its name (nothing happens once closed)."""
        if not self._open:
            return
        self._open = False
        if self.url == "-":
            self.stream.flush()
        elif self._fs is None:
            self._commit_local()
        else:
            self._commit_remote()

    def _commit_local(self) -> None:
        try:
            with self.stream:
                self.stream.flush()
                if self._fsync:
                    os.fsync(self.stream.fileno())
            os.replace(self._tmp, self._path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            self._raise(exc)

    def _commit_remote(self) -> None:
        try:
            self.stream.close()
            if self._tmp:
                self._fs.mv(self._tmp, self._path)
        except Exception as exc:  # OSError, or a client's own (gcsfs HttpError)
            if self._tmp:
                with contextlib.suppress(Exception):
                    self._fs.rm(self._tmp)
            raise StorageError(f"upload failed: {type(exc).__name__}: {exc}", url=self.url) from exc

    def discard(self) -> None:
        """Drop what was written: nothing appears under the name (nothing happens once
        closed)."""
        if not self._open:
            return
        self._open = False
        if self.url == "-":
            return
        if self._fs is None:
            with contextlib.suppress(OSError):  # what it could not flush is dropped anyway
                self.stream.close()
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            return
        _abandon(self.stream)
        if self._tmp:
            with contextlib.suppress(Exception):
                self._fs.rm(self._tmp)

    def _raise(self, exc: OSError) -> NoReturn:
        """Raise ``exc`` as a StorageError naming the file (a reader that closed stdout
        early is not an error: its BrokenPipeError goes on as it is)."""
        if isinstance(exc, (StorageError, BrokenPipeError)):
            raise exc
        raise StorageError(f"cannot write: {exc.strerror or exc}", url=self.url) from exc

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def open_atomic(
    url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    hash: str = "none",
    sha256: bool = False,
    fsync: bool = False,
    buffering: int = 1 << 20,
) -> AtomicFile:
    """An :class:`AtomicFile` for ``url`` (the one way shardkit writes a file)."""
    return AtomicFile(
        url,
        storage_options=storage_options,
        hash=hash,
        sha256=sha256,
        fsync=fsync,
        buffering=buffering,
    )


@contextlib.contextmanager
def atomic_write(
    url: str, *, storage_options: dict[str, Any] | None = None, fsync: bool = False
) -> Iterator[BinaryIO]:
    """Open ``url`` for writing; it appears under its name only if the block succeeds."""
    with open_atomic(url, storage_options=storage_options, fsync=fsync) as file:
        yield cast(BinaryIO, file.stream)


def _abandon(stream: Any) -> None:
    """Give up an unfinished upload without completing it.

    ``discard()`` aborts an upload already under way (an S3 multipart upload, a GCS
    resumable session). One that has not started yet (less than a block written) would
    start and complete on ``close()``: gcsfs's ``discard()`` does nothing then, and
    ``close()`` would publish the partial object under its final name. So the file is
    marked closed instead, as fsspec files mark themselves once discarded.
    """
    discard = getattr(stream, "discard", None)
    if callable(discard):
        with contextlib.suppress(Exception):
            discard()
    try:
        stream.closed = True  # fsspec's buffered files: close() and __del__ do nothing
    except AttributeError:  # a file whose close() has nothing to publish (io.BytesIO)
        with contextlib.suppress(Exception):
            stream.close()
