"""The output folder's lock and the build journal (what makes a build resumable).

Lock: ``OUT/.shardkit-build.lock``, held with ``flock`` for the whole build. A second
build into the same folder fails at once; the kernel drops the lock of a process that
dies, so a killed build never leaves a stale lock.

Journal: ``OUT/.shardkit-build.journal``, JSON lines. The first line identifies the build
(options that shape the output, seed, input fingerprint, number of tasks); every further
line records one finished task (its part files with size and digest, what it skipped,
per-class counts, sample sizes), appended right after the task's parts are complete and
before any of them is renamed or copied, or one shard assembled from chunks (its index
and the position in the plan where it ends, :mod:`.assembly`). A rerun of the same build
reads it back, checks every recorded file (size and digest) and only runs the tasks that
are missing. A torn last line (the process died mid-write) is ignored. The journal is read
back from the output, so it is not trusted: a record naming a file that is not a bare name
inside the output (``../victim``, an absolute path) stops the build with a BuildError.

The rerun reads the journal as a stream and keeps, per finished task, only where its record
is (8 bytes, :class:`_Finished`); a record is read again from the log when the resume
checks its files, counts it and commits it, one at a time, so a resumed driver holds no
record per finished task.

In an object store (no append) the same records are objects under
``OUT/.shardkit-build/``, written by the driver: ``header.json``, one
``task-NNNNNNNNN.json`` per finished task and one ``shard-NNNNNNNNN.json`` per shard
assembled. Each is one atomic upload, so none is ever torn; a resume lists and
reads them (from any machine: nothing is kept on the driver's disk), 1,000 records per
batch, into a temporary local copy it reads them back from. The lock of an object-store
OUT is a lease object (:mod:`.lease`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from array import array
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any, Protocol

from .. import storage
from .._flock import lock_exclusive
from ..digest import entry_digest, parse_digest
from ..errors import BuildError, StorageError
from ..formats.jsondoc import load_json
from ..formats.limits import MAX_DOCUMENT_SIZE
from ..formats.names import bare_name_problem
from ..formats.record import ShardRecord
from .store import LocalStore, ObjectStore
from .worker import TaskResult

__all__ = [
    "JOURNAL_DIR",
    "JOURNAL_NAME",
    "LOCK_NAME",
    "AssembledShard",
    "Journal",
    "output_lock",
]

LOCK_NAME = ".shardkit-build.lock"
JOURNAL_NAME = ".shardkit-build.journal"
JOURNAL_DIR = ".shardkit-build"
_BATCH = 1000  # journal objects per read_many on resume
_BLOCK = 4096  # tasks per block of :class:`_Finished`


@contextlib.contextmanager
def output_lock(out: str) -> Iterator[None]:
    """Hold the build lock of ``out``; raises BuildError at once if another build has it."""
    path = os.path.join(out, LOCK_NAME)
    fd = None
    while fd is None:  # None: the lock file was removed (by a build that finished) meanwhile
        try:
            fd = lock_exclusive(path, create=True)
        except BlockingIOError:
            raise BuildError(
                "another build is writing to this folder (it holds the lock "
                f"{LOCK_NAME}); wait for it to finish",
                url=out,
            ) from None
        except OSError as exc:
            raise BuildError(f"cannot write to the output folder: {exc.strerror}", url=out) from exc
    try:
        yield
    finally:
        # Removed while still held: a build that opened the old file finds it gone once it
        # has its lock, and retries, so two builds never both believe they hold the lock.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


@dataclass(frozen=True)
class AssembledShard:
    """A journal's record of one shard assembled from chunks: the shard, its number, and
    the position in the plan where it ends ((task, sample), :data:`.assembly.FINAL` for
    the last)."""

    shard: ShardRecord
    index: int
    end: tuple[int, int]

    def encode(self) -> dict[str, Any]:
        shard = self.shard
        return {
            "name": shard.name,
            "samples": shard.samples,
            "bytes": shard.bytes,
            "digest": shard.digest,
            "index": self.index,
            "end": list(self.end),
        }

    @classmethod
    def decode(cls, obj: Mapping[str, Any], position: int) -> AssembledShard:
        """A record read back (``position``: its place, the number of a record without
        one); ValueError, KeyError or TypeError when it is not one."""
        shard = ShardRecord(
            str(obj["name"]), int(obj["samples"]), int(obj["bytes"]), entry_digest(obj)
        )
        end = obj["end"]
        return cls(shard, int(obj.get("index", position)), (int(end[0]), int(end[1])))


class Journal:
    """Record of finished tasks (and assembled shards) for one build identity.

    ``done`` holds the results this run finished that wait for their turn to be committed;
    ``finished`` the tasks an earlier run journaled that are not committed yet (where
    their records are: :meth:`read_back` and :meth:`take` read them again)."""

    def __init__(self, store: LocalStore | ObjectStore, header: dict[str, Any]) -> None:
        self.url = store.url
        self.header = header
        self.done: dict[int, TaskResult] = {}
        self.finished = _Finished()
        self.shards: list[AssembledShard] = []  # shards assembled from chunks
        self._log: _Log = (
            _FileLog(store.join(JOURNAL_NAME))
            if isinstance(store, LocalStore)
            else _ObjectLog(store)
        )

    def exists(self) -> bool:
        return self._log.exists()

    def load(self) -> bool:
        """Read an existing journal; False when there is none. Raises if it differs."""
        records = self._log.read()
        try:
            first = next(records, None)
            if first is None:
                return False
            if first[0] != self.header:
                raise BuildError(
                    "the output holds an interrupted build with different options or "
                    "inputs; rerun with the same ones to resume, or use --overwrite",
                    url=self.url,
                )
            for record, offset in records:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    if "shard" in record:
                        self._confine(record["shard"]["name"])
                        self.shards.append(AssembledShard.decode(record["shard"], len(self.shards)))
                        continue
                    result = _decode(record)
                    for part in result.parts:
                        self._confine(part.name)
                    self.finished.put(result.index, offset)
        finally:
            records.close()
        return True

    def is_done(self, task: int) -> bool:
        """Whether ``task`` is finished (this run or an earlier one) and not committed."""
        return task in self.done or task in self.finished

    def pending(self) -> int:
        """Finished tasks not committed yet."""
        return len(self.done) + len(self.finished)

    def take(self, task: int) -> TaskResult:
        """A finished task's result, to commit (it is forgotten here)."""
        result = self.done.pop(task, None)
        return result if result is not None else self._read(task, self.finished.pop(task))

    def forget(self, task: int) -> None:
        """An earlier run's task whose files are gone: it runs again."""
        self.finished.pop(task)

    def read_back(self) -> Iterator[TaskResult]:
        """The earlier runs' finished tasks not committed yet, in plan order, each read
        back from the log (none is held)."""
        for task, offset in self.finished.items():
            yield self._read(task, offset)

    def results(self) -> Iterator[TaskResult]:
        """Every finished task not committed yet (this run's, then read back)."""
        yield from list(self.done.values())
        yield from self.read_back()

    def clear(self) -> None:
        self.done.clear()
        self.finished = _Finished()

    def _read(self, task: int, offset: int) -> TaskResult:
        try:
            result = _decode(self._log.record_at(offset))
        except (ValueError, KeyError, TypeError):
            result = None
        if result is None or result.index != task:
            raise BuildError(
                f"the build journal changed while this build ran (task {task}'s record); "
                "rerun the same command to resume",
                url=self.url,
            )
        return result

    def _confine(self, name: object) -> None:
        problem = bare_name_problem(name)
        if problem is not None:
            raise BuildError(
                f"the build journal names a file outside the output: {problem}; "
                "rerun with --overwrite to start this build again",
                url=self.url,
            )

    def start(self, fresh: bool) -> None:
        """Open for recording, writing the header first when ``fresh``."""
        self._log.start(fresh, self.header)

    def record(self, result: TaskResult) -> None:
        self.done[result.index] = result
        self.write(result)

    def write(self, result: TaskResult) -> None:
        """Write a task's record (what :meth:`record` does after noting it as done; a
        commit thread may call it for an object-store journal)."""
        self._log.append("task", result.index, _encode(result))

    def record_shard(self, shard: AssembledShard) -> None:
        """Record a committed shard (shards commit in any order)."""
        self._log.append("shard", shard.index, {"shard": shard.encode()})
        self.shards.append(shard)

    def close(self) -> None:
        self._log.close()

    def remove(self) -> None:
        self._log.close()
        self._log.remove()


class _Log(Protocol):
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


class _FileLog:
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
                header = load_json(f.readline(MAX_DOCUMENT_SIZE), what="the journal header")
            except ValueError:
                return  # torn before the header was complete: nothing was recorded
            yield header, 0
            while True:
                offset = f.tell()
                line = f.readline(MAX_DOCUMENT_SIZE)
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


class _ObjectLog:
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


class _Finished:
    """Tasks an earlier run journaled, each with the offset of its record (8 bytes a task,
    in blocks: a journal naming task 10**12 costs one block, not terabytes)."""

    def __init__(self) -> None:
        self._blocks: dict[int, array[int]] = {}
        self._count = 0

    def put(self, task: int, offset: int) -> None:
        """Note ``task``'s record (a later record of the same task replaces it)."""
        if task < 0:
            raise ValueError(f"task {task}")
        block = self._blocks.get(task // _BLOCK)
        if block is None:
            block = self._blocks[task // _BLOCK] = array("q", [-1]) * _BLOCK
        if block[task % _BLOCK] < 0:
            self._count += 1
        block[task % _BLOCK] = offset

    def pop(self, task: int) -> int:
        """The offset of ``task``'s record, forgetting it; KeyError if it has none."""
        block = self._blocks.get(task // _BLOCK) if task >= 0 else None
        offset = -1 if block is None else block[task % _BLOCK]
        if block is None or offset < 0:
            raise KeyError(task)
        block[task % _BLOCK] = -1
        self._count -= 1
        return offset

    def __contains__(self, task: int) -> bool:
        block = self._blocks.get(task // _BLOCK) if task >= 0 else None
        return block is not None and block[task % _BLOCK] >= 0

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[int, int]]:
        """(task, offset) in task order; a task popped meanwhile is passed over."""
        for number in sorted(self._blocks):
            block = self._blocks[number]
            for slot in range(_BLOCK):
                if block[slot] >= 0:
                    yield number * _BLOCK + slot, block[slot]


def _line_at(f: IO[bytes], offset: int) -> Any:
    f.seek(offset)
    return load_json(f.readline(MAX_DOCUMENT_SIZE), what="a journal line")


def _close(f: IO[bytes] | None) -> None:
    if f is not None:
        f.close()


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _encode(result: TaskResult) -> dict[str, Any]:
    return {
        "task": result.index,
        "parts": [[p.name, p.samples, p.bytes, p.digest] for p in result.parts],
        "skipped": result.skipped,
        "classes": [[k, v] for k, v in sorted(result.class_counts.items())],
        "input_bytes": result.input_bytes,
        "sizes": result.sizes,
        "fetch": result.fetch,
    }


def _decode(obj: dict[str, Any]) -> TaskResult:
    return TaskResult(
        index=int(obj["task"]),
        parts=[ShardRecord(str(n), int(s), int(b), parse_digest(h)) for n, s, b, h in obj["parts"]],
        skipped=[(str(p), str(r)) for p, r in obj["skipped"]],
        class_counts={int(k): int(v) for k, v in obj["classes"]},
        input_bytes=int(obj["input_bytes"]),
        sizes=[int(n) for n in obj["sizes"]],
        fetch=[(int(n), str(what)) for n, what in obj.get("fetch", [])],
    )
