"""Where a build writes: a local folder or an object-store prefix, behind one small interface.

The driver and the workers reach the output only through a :class:`Store`:

- :class:`LocalStore` (a folder): a new file is written under a hidden temporary name and
  renamed when complete; rename is ``os.replace``; a recorded file is checked by size and
  sha256.
- :class:`ObjectStore` (``s3://``, ``gs://``, any fsspec URL): a new object is one upload
  (:func:`shardkit.storage.atomic_write`: it appears under its name only once complete; a
  failed upload is discarded); rename is a server-side copy then a delete (S3 CopyObject is
  atomic: the copy appears whole or not at all); a recorded object is checked by size from
  one listing (an object store never shows a partial upload, and shards are deterministic,
  so a complete object with the recorded size is the recorded bytes).

A store pickles small: an :class:`ObjectStore` carries its URL and the endpoint the driver
found (``AWS_ENDPOINT_URL``), never credentials; each worker opens its own filesystem and
finds credentials in the usual places (``AWS_*``, ``~/.aws``, instance roles, ...).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, Protocol

from .. import config, storage
from ..errors import StorageError

__all__ = [
    "LocalStore",
    "Matcher",
    "ObjectStore",
    "Pending",
    "PreconditionFailed",
    "Store",
    "endpoint_options",
    "file_matches",
    "open_store",
]

Matcher = Callable[[str, int, str], bool]  # (name, size, sha256) -> present and complete


class Pending(Protocol):
    """An object being written: invisible under its name until :meth:`commit`."""

    url: str

    def write(self, data: bytes) -> int: ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...


class Store(Protocol):
    """The operations a build needs on its output (names are relative to the root)."""

    url: str

    def join(self, name: str) -> str: ...

    def sizes(self, folder: str = "") -> dict[str, int]: ...

    def create(self, name: str) -> Pending: ...

    def rename(self, src: str, dst: str) -> None: ...

    def remove(self, names: Iterable[str]) -> None: ...

    def open_read(self, name: str) -> BinaryIO: ...

    def read_bytes(self, name: str) -> bytes | None: ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def write_bytes(self, name: str, data: bytes) -> None: ...

    def matcher(self) -> Matcher: ...


def endpoint_options(url: str, s3_endpoint: str | None) -> dict[str, Any]:
    """fsspec options that point workers at the S3 server the driver found in its
    environment (``AWS_ENDPOINT_URL``): a cluster worker, or a worker process started
    before that variable was set, may not have it. Never credentials."""
    if s3_endpoint and url.split("://", 1)[0].lower() in ("s3", "s3a"):
        return {"endpoint_url": s3_endpoint}
    return {}


def open_store(out: str) -> LocalStore | ObjectStore:
    """The store of ``out``: a local path (or ``file:``) or an object-store URL."""
    if storage.is_local(out):
        return LocalStore(storage.local_path(out))
    return ObjectStore(out)


def file_matches(path: str, size: int, sha256: str) -> bool:
    """Whether ``path`` exists with exactly this size and sha256."""
    try:
        if os.path.getsize(path) != size:
            return False
        digest = hashlib.sha256()
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    except OSError:
        return False
    return digest.hexdigest() == sha256


# --------------------------------------------------------------------------- local


class _LocalPending:
    """A file written under ``.NAME.tmp-PID`` beside its final name, renamed on commit."""

    def __init__(self, path: str) -> None:
        folder, name = os.path.split(path)
        self.url = path
        self._tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
        self._stream: BinaryIO | None = open(self._tmp, "wb")  # noqa: SIM115

    def write(self, data: bytes) -> int:
        if self._stream is None:
            raise ValueError("write after commit or discard")
        return self._stream.write(data)

    def commit(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        try:
            stream.close()
            os.replace(self._tmp, self.url)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            raise

    def discard(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(OSError):  # what it could not flush is dropped anyway
                stream.close()
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)


class LocalStore:
    """A local output folder."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.url = root

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def join(self, name: str) -> str:
        return os.path.join(self.root, name)

    def sizes(self, folder: str = "") -> dict[str, int]:
        try:
            with os.scandir(self.join(folder) if folder else self.root) as scan:
                return {e.name: e.stat().st_size for e in scan if e.is_file()}
        except FileNotFoundError:
            return {}

    def create(self, name: str) -> Pending:
        return _LocalPending(self.join(name))

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.join(src), self.join(dst))

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.join(name))

    def open_read(self, name: str) -> BinaryIO:
        return open(self.join(name), "rb")

    def read_bytes(self, name: str) -> bytes | None:
        try:
            with open(self.join(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        with open(self.join(name), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def write_bytes(self, name: str, data: bytes) -> None:
        with storage.atomic_write(self.join(name)) as stream:
            stream.write(data)

    def matcher(self) -> Matcher:
        return lambda name, size, sha256: file_matches(self.join(name), size, sha256)


# --------------------------------------------------------------------------- object stores


class PreconditionFailed(Exception):
    """A conditional write lost: the object is not in the state the caller expected."""


class _StreamPending:
    """One atomic upload (:func:`shardkit.storage.atomic_write`) held open across calls."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self.url = url
        self._context = storage.atomic_write(url, storage_options=options)
        self._stream: BinaryIO | None = self._context.__enter__()

    def write(self, data: bytes) -> int:
        if self._stream is None:
            raise ValueError("write after commit or discard")
        try:
            return self._stream.write(data)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"upload failed: {exc}", url=self.url) from exc

    def commit(self) -> None:
        if self._stream is not None:
            self._stream = None
            self._context.__exit__(None, None, None)

    def discard(self) -> None:
        if self._stream is not None:
            self._stream = None
            error = _Discarded()
            with contextlib.suppress(Exception):  # the upload is aborted: nothing appears
                self._context.__exit__(_Discarded, error, None)


class _Discarded(Exception):
    """Thrown into an upload's context to make it discard what it holds."""


class ObjectStore:
    """An output prefix in an object store, through fsspec."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.protocol = self.url.split("://", 1)[0].lower()
        if options is None:
            options = endpoint_options(self.url, config.s3_endpoint())
        self.options = options
        self._fs: Any = None
        self._root = ""

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "protocol": self.protocol, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _fs=None, _root="")

    @property
    def fs(self) -> Any:
        if self._fs is None:
            import fsspec

            try:
                self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.options)
            except (ImportError, ValueError) as exc:
                raise StorageError(f"cannot open this URL scheme: {exc}", url=self.url) from exc
        return self._fs

    @property
    def conditional(self) -> bool:
        """Whether writes can be conditional (S3 ``If-None-Match``/``If-Match``)."""
        return self.protocol in ("s3", "s3a")

    def path(self, name: str) -> str:
        self.fs  # noqa: B018 - sets the root
        return f"{self._root}/{name}"

    def join(self, name: str) -> str:
        return f"{self.url}/{name}"

    @contextlib.contextmanager
    def _errors(self, name: str, doing: str) -> Iterator[None]:
        try:
            yield
        except (StorageError, FileNotFoundError):
            raise
        except OSError as exc:
            raise StorageError(f"{doing} failed: {exc}", url=self.join(name)) from exc

    def sizes(self, folder: str = "") -> dict[str, int]:
        path = self.path(folder) if folder else self.path("")[:-1]
        try:
            with self._errors(folder, "listing"):
                entries = self.fs.ls(path, detail=True, refresh=True)
        except FileNotFoundError:
            return {}
        return {
            storage.basename(e["name"]): int(e.get("size") or 0)
            for e in entries
            if e.get("type") == "file"
        }

    def create(self, name: str) -> Pending:
        return _StreamPending(self.join(name), self.options)

    def rename(self, src: str, dst: str) -> None:
        """Server-side copy, then delete (the copy appears whole or not at all)."""
        with self._errors(src, "rename"):
            self.fs.copy(self.path(src), self.path(dst))
            self.fs.rm_file(self.path(src))

    def remove(self, names: Iterable[str]) -> None:
        todo = list(names)
        if len(todo) > 1:  # one request per 1000 objects (S3 DeleteObjects)
            with contextlib.suppress(FileNotFoundError), self._errors(todo[0], "delete"):
                self.fs.rm([self.path(n) for n in todo])
                return
        for name in todo:  # one, or some were gone already
            with contextlib.suppress(FileNotFoundError), self._errors(name, "delete"):
                self.fs.rm_file(self.path(name))

    def remove_folder(self, folder: str) -> None:
        """Remove what is left of a folder (some stores, SeaweedFS, keep empty ones)."""
        with contextlib.suppress(FileNotFoundError), self._errors(folder, "delete"):
            self.fs.rm(self.path(folder), recursive=True)

    def open_read(self, name: str) -> BinaryIO:
        return storage.open_read(self.join(name), storage_options=self.options)

    def read_bytes(self, name: str) -> bytes | None:
        try:
            with self._errors(name, "read"):
                data: bytes = self.fs.cat_file(self.path(name))
        except FileNotFoundError:
            return None
        return data

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (one ranged GET; fewer at the object's end)."""
        with self._errors(name, "read"):
            data: bytes = self.fs.cat_file(self.path(name), start=offset, end=offset + length)
        return data

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        """The bytes of each object that exists (read concurrently)."""
        paths = {self.path(n): n for n in names}
        if not paths:
            return {}
        with self._errors("", "read"):
            found = self.fs.cat(list(paths), on_error="omit")
        return {paths[self.fs._strip_protocol(p)]: data for p, data in found.items()}

    def write_bytes(self, name: str, data: bytes) -> None:
        with storage.atomic_write(self.join(name), storage_options=self.options) as stream:
            stream.write(data)

    def matcher(self) -> Matcher:
        sizes = self.sizes()  # one listing; uploads are atomic, so size is enough
        return lambda name, size, sha256: sizes.get(name) == size

    # -- conditional writes (the lease)
    def stat(self, name: str) -> tuple[bytes, str] | None:
        """(content, etag) of a small object, or None when there is none."""
        try:
            with self._errors(name, "read"):
                info = self.fs.info(self.path(name), refresh=True)
                data: bytes = self.fs.cat_file(self.path(name))
        except FileNotFoundError:
            return None
        return data, str(info.get("ETag") or info.get("etag") or "")

    def put(self, name: str, data: bytes, *, match: str | None) -> str:
        """Write a small object; returns its etag. ``match``: ``"*"`` only if there is no
        object yet, an etag only if it is still that one, None unconditionally (then the
        etag is not known: ``""``). Raises :class:`PreconditionFailed` when it lost."""
        if match is None or not self.conditional:
            self.write_bytes(name, data)
            return ""
        kwargs = {"mode": "create"} if match == "*" else {"IfMatch": match}
        try:
            with self._errors(name, "write"):
                out = self.fs.pipe_file(self.path(name), data, **kwargs)
        except OSError as exc:
            if _lost_condition(exc):
                raise PreconditionFailed(name) from exc
            raise
        return str((out or {}).get("ETag", ""))


def _lost_condition(exc: BaseException) -> bool:
    """Whether an error (or its cause) is S3's 412 Precondition Failed (or 409 Conflict)."""
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = str(response.get("Error", {}).get("Code", ""))
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return True
        seen = seen.__cause__ or seen.__context__
    return False
