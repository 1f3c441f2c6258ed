"""Writing: one atomic file for everything shardkit writes, and its byte tally."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TypeVar

from .._temporary import create_temporary, temporary_name
from ..digest import format_digest, new_hasher
from ..errors import StorageError
from ._access import LOCAL, Access
from ._filesystems import _fs, protocol
from ._urls import is_local, local_path

__all__ = ["AtomicFile", "CommitOrDiscard", "Tally", "open_atomic"]

_Self = TypeVar("_Self", bound="CommitOrDiscard")


class CommitOrDiscard:
    """``with`` over something written atomically: :meth:`commit` on a clean exit,
    :meth:`discard` on an exception (a file, a shard, a rotation of shards, a tool's
    output): the one exit rule, so nothing half-written ever keeps its name."""

    def commit(self) -> object:
        raise NotImplementedError

    def discard(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


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

    def update_all(self, chunks: Sequence[bytes | memoryview], size: int) -> None:
        """:meth:`update` with each of ``chunks``, which total ``size`` bytes."""
        if self._hash is not None:
            update = self._hash.update
            for chunk in chunks:
                update(chunk)
        self.size += size

    def hexdigest(self) -> str:
        """The hex digest of what passed (``""`` when not hashing)."""
        return self._hash.hexdigest() if self._hash is not None else ""

    @property
    def digest(self) -> str:
        """``ALGO:HEX`` of what passed (``""`` when not hashing)."""
        return format_digest(self.hash, self.hexdigest())


class AtomicFile(CommitOrDiscard):
    """A file being written that appears under its name only on :meth:`commit`.

    A local file is written under a hidden temporary name in the same folder
    (``.NAME.tmp-RANDOM``, created exclusively, never through a link: see
    :mod:`shardkit._temporary`; the folder is created if need be) and renamed by
    :meth:`commit`, so two AtomicFile for one name never share a temporary;
    an object store (s3, gs) makes an upload visible only when it completes; other fsspec
    protocols write a temporary object and move it. :meth:`discard` drops what was
    written (also on an exception inside ``with``). ``-`` is stdout, committed by a flush.
    :attr:`tally` counts (and, with ``hash``, hashes) every byte written. An
    OSError while writing or committing (a full disk) is raised as a
    :class:`~shardkit.errors.StorageError` naming ``url``.
    ``buffering=0`` writes a local file unbuffered (for :meth:`writev`).
    ``hash`` names the digest algorithm (:mod:`shardkit.digest`); ``sha256=True`` is the
    older spelling of ``hash="sha256"``.
    """

    def __init__(
        self,
        url: str,
        *,
        access: Access = LOCAL,
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
            self._open_remote(url, access)

    def _open_local(self, path: str, buffering: int) -> None:
        self._path = path
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # a fresh OUT
            fd, self._tmp = create_temporary(os.path.abspath(path))
            self.stream = open(fd, "wb", buffering=buffering)  # noqa: SIM115
        except OSError as exc:
            self._raise(exc)
        if buffering == 0:
            self._fd = self.stream.fileno()

    def _open_remote(self, url: str, access: Access) -> None:
        self._fs, self._path = _fs(url, access)
        if protocol(self._fs) not in ("s3", "s3a", "gs", "gcs", "memory"):  # no atomic upload
            self._tmp = temporary_name(self._path, hidden=False)
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

    def writev(self, chunks: Sequence[bytes | memoryview], size: int = -1) -> None:
        """Write ``chunks`` in order: one ``os.writev`` for an unbuffered local file.
        ``size`` is their total, when the caller knows it."""
        if self._fd < 0:
            for chunk in chunks:
                self.write(chunk)
            return
        if size < 0:
            size = sum(map(len, chunks))
        self.tally.update_all(chunks, size)
        try:
            written = os.writev(self._fd, chunks)
            if written != size:  # a short write (a signal, a nearly full disk)
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
        except BaseException as exc:  # a signal too: the temporary file never stays
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            if isinstance(exc, OSError):
                self._raise(exc)
            raise

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


#: How shardkit writes a file that is read after it (shards, indexes, manifests, the
#: cache): ``open_atomic(url, ...)`` is an :class:`AtomicFile` (one signature, not a copy
#: of it); ``tests/project/test_folds.py`` lists the few files written otherwise.
open_atomic = AtomicFile


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
