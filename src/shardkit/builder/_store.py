"""Where a build writes: a local folder or an object-store prefix, behind one small interface.

The driver and the workers reach the output only through a :class:`Store`:

- :class:`LocalStore` (a folder): a new file is written under a hidden temporary name and
  renamed when complete (:class:`shardkit.storage.AtomicFile`, as every file shardkit
  writes); rename is ``os.replace``; a recorded file is checked by size and digest
  (with the algorithm the digest names; by size alone when built with ``hash="none"``).
- :class:`ObjectStore` (``s3://``, ``gs://``, any fsspec URL): a new object is one upload
  (:class:`shardkit.storage.AtomicFile`: it appears under its name only once complete; a
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
import errno
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, Protocol

from .. import config, storage
from ..budget import limit
from ..digest import DEFAULT_HASH, digest_name
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
]

Matcher = Callable[[str, int, str], bool]  # (name, size, digest) -> present and complete


Pending = storage.AtomicFile
"""An object being written (:class:`shardkit.storage.AtomicFile`): invisible under its
name until ``commit()``; it counts and hashes (with the store's ``hash``) what it writes."""


def _document_end() -> int:
    """Where a ranged read of a small object stops: one byte past the budget's
    ``document`` limit, which its parse refuses (one GET, never the whole of a huge one)."""
    return limit("document") + 1


def _cat_document(fs: Any, path: str) -> bytes:
    """An object read up to :func:`_document_end`, in one ranged GET. S3 refuses a range
    of an empty object as not satisfiable (EINVAL): that one is read unranged."""
    try:
        data: bytes = fs.cat_file(path, start=0, end=_document_end())
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        data = fs.cat_file(path)
    return data


class Store(Protocol):
    """The operations a build needs on its output (names are relative to the root), and
    what differs between a local folder and an object store, so no caller asks which it
    is."""

    url: str
    #: Commits in flight at once: 0 renames in the driver (a local rename is instant),
    #: more on an object store (each "rename" is a copy).
    commit_threads: int
    #: Whether a worker that died mid-write can leave a temporary file behind (a local
    #: folder; an object store's uploads are atomic).
    leaves_temporaries: bool

    @property
    def access(self) -> storage.Access:
        """How a file written under it is reached (fsspec's options; none: a local path)."""
        ...

    @property
    def object_store(self) -> ObjectStore | None:
        """The object store, for what only it has (a lease, a journal of objects);
        None for a local folder (locked with ``flock``, journaled in one file)."""
        ...

    def portable(self) -> Store:
        """This store as a worker on another machine (or in another folder) opens it."""
        ...

    @property
    def options(self) -> dict[str, Any] | None:
        """The storage options of its files (None: a local folder)."""

    def join(self, name: str) -> str: ...

    def sizes(self, folder: str = "") -> dict[str, int]: ...

    def create(self, name: str) -> Pending: ...

    def rename(self, src: str, dst: str) -> None: ...

    def remove(self, names: Iterable[str]) -> None: ...

    def open_read(self, name: str) -> BinaryIO: ...

    def read_bytes(self, name: str) -> bytes | None:
        """The document ``name`` (a manifest, a part's index, the journal header), or None
        when there is none: at most one byte past the budget's ``document`` limit, which
        its parse then refuses, so a huge file planted there is never read whole."""
        ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def write_bytes(self, name: str, data: bytes) -> None: ...

    def matcher(self) -> Matcher: ...


def endpoint_options(url: str, s3_endpoint: str | None) -> dict[str, Any]:
    """fsspec options that point workers at the S3 server the driver found in its
    environment (``AWS_ENDPOINT_URL``): a cluster worker, or a worker process started
    before that variable was set, may not have it. Never credentials."""
    if s3_endpoint and storage.url_scheme(url) in ("s3", "s3a"):
        return {"endpoint_url": s3_endpoint}
    return {}


def file_matches(path: str, size: int, digest: str) -> bool:
    """Whether ``path`` exists with exactly this size and digest (``ALGO:HEX``, hashed
    with that algorithm; ``""``: the size alone)."""
    try:
        if os.path.getsize(path) != size:
            return False
        if not digest:
            return True
        tally = storage.Tally(digest_name(digest))
        with storage.open_regular(path, buffering=0) as f:
            while chunk := f.read(1 << 22):
                tally.update(chunk)
    except OSError:
        return False
    return tally.digest == digest


# --------------------------------------------------------------------------- local


class LocalStore:
    """A local output folder."""

    commit_threads = 0
    leaves_temporaries = True
    access = storage.LOCAL
    object_store = None

    def __init__(self, root: str, *, hash: str = DEFAULT_HASH) -> None:
        self.options: dict[str, Any] | None = None
        self.root = root
        self.url = root
        self.hash = hash

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def portable(self) -> LocalStore:
        """By its absolute path: cluster workers have their own working folder."""
        return LocalStore(os.path.abspath(self.root), hash=self.hash)

    def join(self, name: str) -> str:
        return os.path.join(self.root, name)

    def sizes(self, folder: str = "") -> dict[str, int]:
        try:
            with os.scandir(self.join(folder) if folder else self.root) as scan:
                return {e.name: e.stat().st_size for e in scan if e.is_file()}
        except FileNotFoundError:
            return {}

    def create(self, name: str) -> Pending:
        """A new file, unbuffered (parts go out with one ``writev`` per sample)."""
        return storage.open_atomic(self.join(name), hash=self.hash, buffering=0)

    def rename(self, src: str, dst: str) -> None:
        os.replace(self.join(src), self.join(dst))

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.join(name))

    def open_read(self, name: str) -> BinaryIO:
        return storage.open_regular(self.join(name))

    def read_bytes(self, name: str) -> bytes | None:
        try:
            with storage.open_regular(self.join(name)) as f:  # a FIFO planted there: refused
                # read(n) reserves n bytes up front: no more than the file holds
                return f.read(min(os.fstat(f.fileno()).st_size + 1, _document_end()))
        except FileNotFoundError:
            return None

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        with storage.open_regular(self.join(name)) as f:
            f.seek(offset)
            return f.read(length)

    def write_bytes(self, name: str, data: bytes) -> None:
        with storage.atomic_write(self.join(name)) as stream:
            stream.write(data)

    def matcher(self) -> Matcher:
        return lambda name, size, digest: file_matches(self.join(name), size, digest)


# --------------------------------------------------------------------------- object stores


class PreconditionFailed(Exception):
    """A conditional write lost: the object is not in the state the caller expected."""


class ObjectStore:
    """An output prefix in an object store, through fsspec."""

    commit_threads = storage.REQUESTS_IN_FLIGHT
    leaves_temporaries = False

    def __init__(
        self, url: str, options: dict[str, Any] | None = None, *, hash: str = DEFAULT_HASH
    ) -> None:
        self.url = url.rstrip("/")
        self.hash = hash
        self.protocol = storage.url_scheme(self.url)
        if options is None:
            options = endpoint_options(self.url, config.s3_endpoint())
        self.options = options
        self._fs: Any = None
        self._root = ""

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    @property
    def access(self) -> storage.Access:
        return storage.Access.of(self.options)

    @property
    def object_store(self) -> ObjectStore:
        return self

    def portable(self) -> ObjectStore:
        return self

    def __getstate__(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "protocol": self.protocol,
            "options": self.options,
            "hash": self.hash,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _fs=None, _root="")

    @property
    def fs(self) -> Any:
        if self._fs is None:
            self._fs, self._root = storage.filesystem(self.url, self.access)
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
        return storage.open_atomic(self.join(name), access=self.access, hash=self.hash)

    def rename(self, src: str, dst: str) -> None:
        """Server-side copy, then delete (the copy appears whole or not at all).
        ``cp_file``, not ``copy``: one object to one name, without the two listings
        ``copy`` makes to expand its arguments."""
        with self._errors(src, "rename"):
            self.fs.cp_file(self.path(src), self.path(dst))
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
        return storage.open_read(self.join(name), access=self.access)

    def read_bytes(self, name: str) -> bytes | None:
        try:
            with self._errors(name, "read"):
                data = _cat_document(self.fs, self.path(name))
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
        with storage.atomic_write(self.join(name), access=self.access) as stream:
            stream.write(data)

    def matcher(self) -> Matcher:
        sizes = self.sizes()  # one listing; uploads are atomic, so size is enough
        return lambda name, size, digest: sizes.get(name) == size

    # -- conditional writes (the lease)
    def stat(self, name: str) -> tuple[bytes, str] | None:
        """(content, etag) of a small object, or None when there is none."""
        try:
            with self._errors(name, "read"):
                info = self.fs.info(self.path(name), refresh=True)
                data = _cat_document(self.fs, self.path(name))
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
