"""Open any shard URL for reading or writing: local paths, ``file:``, ``-`` (stdin/stdout),
``pipe:CMD``, and every fsspec protocol (``http(s)://``, ``s3://``, ``gs://``, ...).

Writing is atomic: a local file is written under a hidden temporary name in the same folder
and renamed when complete; an object store (s3, gs) only makes an object visible when its
upload completes, and an upload that fails is discarded. No partial file ever carries a
final name.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any, BinaryIO, cast

from . import config
from .errors import ConfigError, StorageError

__all__ = [
    "atomic_write",
    "basename",
    "expand_urls",
    "is_local",
    "join",
    "local_path",
    "open_read",
    "url_exists",
]

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
    url: str, *, storage_options: dict[str, Any] | None = None, buffer_size: int = 1 << 20
) -> BinaryIO:
    """Open a URL for streaming reads; the caller closes the stream."""
    try:
        if url == "-":
            return cast(BinaryIO, sys.stdin.buffer)
        if url.startswith("pipe:"):
            if not config.allow_pipe_urls():
                raise StorageError("pipe: URLs are disabled (SHARDKIT_ALLOW_PIPE=0)", url=url)
            return io.BufferedReader(_PipeReader(url[5:]), buffer_size)
        if is_local(url):
            return open(local_path(url), "rb", buffering=buffer_size)
        fs, path = _fs(url, storage_options)
        return cast(BinaryIO, fs.open(path, "rb"))
    except StorageError:
        raise
    except FileNotFoundError as exc:
        raise StorageError("no such file", url=url) from exc
    except OSError as exc:
        raise StorageError(f"cannot open for reading: {exc.strerror or exc}", url=url) from exc


# --------------------------------------------------------------------------- writing


@contextlib.contextmanager
def atomic_write(
    url: str, *, storage_options: dict[str, Any] | None = None, fsync: bool = False
) -> Iterator[BinaryIO]:
    """Open ``url`` for writing; it appears under its name only if the block succeeds."""
    if url == "-":
        yield cast(BinaryIO, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    if is_local(url):
        with _atomic_local(local_path(url), fsync) as stream:
            yield stream
        return
    fs, path = _fs(url, storage_options)
    with _atomic_remote(fs, path, url) as stream:
        yield stream


@contextlib.contextmanager
def _atomic_local(path: str, fsync: bool) -> Iterator[BinaryIO]:
    folder, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
    try:
        stream = open(tmp, "wb", buffering=1 << 20)  # noqa: SIM115
    except OSError as exc:
        raise StorageError(f"cannot write: {exc.strerror or exc}", url=path) from exc
    try:
        with stream:
            yield stream
            stream.flush()
            if fsync:
                os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _atomic_remote(fs: Any, path: str, url: str) -> Iterator[BinaryIO]:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    direct = protocol in ("s3", "s3a", "gs", "gcs", "memory")
    target = path if direct else f"{path}.tmp-{os.getpid()}"
    try:
        stream = fs.open(target, "wb")
    except OSError as exc:
        raise StorageError(f"cannot write: {exc}", url=url) from exc
    try:
        yield cast(BinaryIO, stream)
    except BaseException:
        discard = getattr(stream, "discard", None)
        if callable(discard):
            discard()  # abort the upload: nothing becomes visible
        with contextlib.suppress(Exception):
            stream.close()
        if not direct:
            with contextlib.suppress(Exception):
                fs.rm(target)
        raise
    try:
        stream.close()
        if not direct:
            fs.mv(target, path)
    except OSError as exc:
        raise StorageError(f"upload failed: {exc}", url=url) from exc
