"""Where a build journal's lines live: one local file of JSON lines (:class:`FileLog`),
or one object per record in an object store (:class:`ObjectLog`); each is read back as a
stream (the header, then each record with where to read it again) and written a record
at a time. :mod:`shardkit.builder._journal` is their door and describes the layout."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Generator
from typing import IO, Any, Protocol

from .. import storage
from ..budget import limit
from ..errors import BuildError, StorageError
from ..formats.jsondoc import load_json
from ._store import ObjectStore

__all__ = ["JOURNAL_DIR", "FileLog", "Log", "ObjectLog"]

JOURNAL_DIR = ".shardkit-build"
_BATCH = 1000  # journal objects per read_many on resume


def _readline(f: IO[bytes]) -> bytes:
    """The next journal line, read up to one byte past the budget's ``document`` limit in
    force (``load_json`` then refuses it in its own words, having been handed no more
    than the budget allows); the rest of a longer line is skipped, never taken for the
    next record."""
    line = f.readline(limit("document") + 1)
    if line and not line.endswith(b"\n"):
        while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass
    return line


class Log(Protocol):
    def exists(self) -> bool: ...

    def read(self) -> Generator[tuple[Any, int], None, None]:
        """The header first (nothing when there is no journal), then each record (a dict)
        with the offset :meth:`record_at` reads it back from."""
        ...

    def record_at(self, offset: int) -> Any: ...

    def start(self, fresh: bool, header: dict[str, Any]) -> None: ...

    def append(self, kind: str, index: int, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...

    def remove(self) -> None: ...


class FileLog:
    """JSON lines in one local file, appended and flushed record by record."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stream: Any = None
        self._reader: IO[bytes] | None = None  # reads records back on resume

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def read(self) -> Generator[tuple[Any, int], None, None]:
        try:
            f = storage.open_regular(self.path)
        except FileNotFoundError:
            return
        with f:
            try:
                header = load_json(_readline(f), what="the journal header")
            except ValueError:
                return  # torn before the header was complete: nothing was recorded
            yield header, 0
            while True:
                offset = f.tell()
                line = _readline(f)
                if not line:
                    return
                with contextlib.suppress(ValueError):  # a torn line (the last one's)
                    record = load_json(line, what="a journal line")
                    if isinstance(record, dict):
                        yield record, offset

    def record_at(self, offset: int) -> Any:
        if self._reader is None:
            self._reader = storage.open_regular(self.path)
        return _line_at(self._reader, offset)

    def start(self, fresh: bool, header: dict[str, Any]) -> None:
        # Never through a link planted at its name (the writing door's rule).
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        try:
            fd = os.open(self.path, flags | (os.O_TRUNC if fresh else 0), 0o644)
        except OSError as exc:
            raise StorageError(
                f"cannot write the build journal: {exc.strerror or exc}", url=self.path
            ) from exc
        self._stream = open(fd, "a", encoding="utf-8")  # noqa: SIM115
        if fresh:
            self._write(header)
        elif self._stream.tell() and not _ends_with_newline(self.path):
            self._stream.write("\n")  # end a torn line so the next record parses

    def append(self, kind: str, index: int, record: dict[str, Any]) -> None:
        self._write(record)

    def _write(self, obj: dict[str, Any]) -> None:
        try:
            self._stream.write(json.dumps(obj, separators=(",", ":")) + "\n")
            self._stream.flush()
        except OSError as exc:  # a full disk: the line may be torn, which read() ignores
            raise StorageError(
                f"cannot write the build journal: {exc.strerror or exc}", url=self.path
            ) from exc

    def close(self) -> None:
        _close(self._reader)
        self._reader = None
        if self._stream is not None:
            stream, self._stream = self._stream, None
            # Every record was flushed when written; what a failed write left in the
            # buffer must not replace that write's error (the file is closed anyway).
            with contextlib.suppress(OSError):
                stream.close()

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class ObjectLog:
    """One small object per record under ``OUT/.shardkit-build/`` (see the module doc)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._copy: IO[bytes] | None = None  # the records read on resume, one a line

    def _name(self, name: str) -> str:
        return f"{JOURNAL_DIR}/{name}"

    def exists(self) -> bool:
        return "header.json" in self.store.sizes(JOURNAL_DIR)

    def read(self) -> Generator[tuple[Any, int], None, None]:
        names = sorted(self.store.sizes(JOURNAL_DIR))
        if "header.json" not in names:
            return
        try:
            header = load_json(
                self.store.read_bytes(self._name("header.json")) or b"", what="the journal header"
            )
        except ValueError:
            return  # removed meanwhile: nothing to resume
        yield header, 0
        names.remove("header.json")
        _close(self._copy)
        self._copy = copy = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        for start in range(0, len(names), _BATCH):
            batch = [self._name(n) for n in names[start : start + _BATCH]]
            found = self.store.read_many(batch)
            for name in batch:
                with contextlib.suppress(KeyError, ValueError):
                    record = load_json(found[name], what="a journal record")
                    if isinstance(record, dict):
                        offset = copy.tell()
                        copy.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
                        yield record, offset

    def record_at(self, offset: int) -> Any:
        if self._copy is None:
            raise BuildError("no journal record was read", url=self.store.url)
        return _line_at(self._copy, offset)

    def start(self, fresh: bool, header: dict[str, Any]) -> None:
        if fresh:
            self.remove()  # records a removal left behind without their header
            self._write("header.json", header)

    def append(self, kind: str, index: int, record: dict[str, Any]) -> None:
        self._write(f"{kind}-{index:09d}.json", record)

    def _write(self, name: str, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        try:
            self.store.write_bytes(self._name(name), data)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(
                f"cannot write the build journal: {exc}", url=self.store.join(self._name(name))
            ) from exc

    def close(self) -> None:
        """Every record was uploaded when written; drop the copy read on resume."""
        _close(self._copy)
        self._copy = None

    def remove(self) -> None:
        names = self.store.sizes(JOURNAL_DIR)
        # The header last: records without a header are ignored and cleared by start().
        self.store.remove(self._name(n) for n in sorted(names) if n != "header.json")
        if names:
            self.store.remove([self._name("header.json")])
            self.store.remove_folder(JOURNAL_DIR)


def _line_at(f: IO[bytes], offset: int) -> Any:
    f.seek(offset)
    return load_json(_readline(f), what="a journal line")


def _close(f: IO[bytes] | None) -> None:
    if f is not None:
        f.close()


def _ends_with_newline(path: str) -> bool:
    with storage.open_regular(path) as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
