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
import os
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from .._flock import lock_exclusive
from ..errors import BuildError
from ..formats.names import bare_name_problem
from ._journallog import JOURNAL_DIR, FileLog, Log, ObjectLog
from ._journalrecords import AssembledShard, decode_result, encode_result
from ._store import Store
from ._worker import TaskResult

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


class Journal:
    """Record of finished tasks (and assembled shards) for one build identity.

    ``done`` holds the results this run finished that wait for their turn to be committed;
    ``finished`` the tasks an earlier run journaled that are not committed yet (where
    their records are: :meth:`read_back` and :meth:`take` read them again).
    ``refuse``, given the header an earlier run wrote when it is not ``header``, may raise
    an error that says what changed (the generic refusal follows when it returns)."""

    def __init__(
        self,
        store: Store,
        header: dict[str, Any],
        refuse: Callable[[Any], None] | None = None,
    ) -> None:
        self.url = store.url
        self.header = header
        self._refuse = refuse
        self.done: dict[int, TaskResult] = {}
        self.finished = _Finished()
        self.shards: list[AssembledShard] = []  # shards assembled from chunks
        remote = store.object_store
        self._log: Log = FileLog(store.join(JOURNAL_NAME)) if remote is None else ObjectLog(remote)

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
                if self._refuse is not None:
                    self._refuse(first[0])
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
                    result = decode_result(record)
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
            result = decode_result(self._log.record_at(offset))
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
        self._log.append("task", result.index, encode_result(result))

    def record_shard(self, shard: AssembledShard) -> None:
        """Record a committed shard (shards commit in any order)."""
        self._log.append("shard", shard.index, {"shard": shard.encode()})
        self.shards.append(shard)

    def close(self) -> None:
        self._log.close()

    def remove(self) -> None:
        self._log.close()
        self._log.remove()


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
