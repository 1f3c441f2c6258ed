"""Turning finished tasks into final shards, in plan order, when sizes are known up front.

:class:`Renamer` (pass-through of listed files): each task already wrote whole shards (its
parts, cut by the plan and the part writer with the one cut rule); committing renames them
to ``{prefix}-{index:06d}`` in order. No byte is copied. It is fed task results strictly in
plan order by the driver, and picks up after a crash from what the journal recorded. It
works through the output's :class:`~.store.Store`: in an object store a rename is a
server-side copy and a delete.

In an object store each commit is round trips (the task's journal record: one PUT; per
part: a COPY and a DELETE), so they go through a bounded :class:`CommitPool` of threads:
a task's journal record is written before any of its parts is renamed (a rename waits
for it), final names are still given in plan order, and the manifest waits until every
commit is done (:meth:`Renamer.finish`). A local folder commits inline (a rename is a
system call).

Where sizes are not known up front (resized images, Python samples, URLs), tasks are
chunks and the workers assemble the shards (:mod:`.assembly`), into a local folder or an
object store alike; their journal records and part deletions go through the same pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .. import storage
from ..formats.index import ShardIndex, index_url, renamed_index
from ..formats.record import ShardRecord
from ._journal import Journal
from ._store import Store
from ._worker import TaskResult

__all__ = ["COMMIT_THREADS", "CommitPool", "Namer", "Renamer"]

Namer = Callable[[int], str]

COMMIT_THREADS = storage.REQUESTS_IN_FLIGHT  # commits in flight to an object store


class CommitPool:
    """At most ``threads`` commit jobs in flight; the first failure is raised by the next
    :meth:`submit`, :meth:`check` or :meth:`drain`, and nothing new starts after it."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="shardkit-commit")
        self._jobs: deque[Future[Any]] = deque()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        self.check()
        while len(self._jobs) >= 4 * self.threads:  # bounded: wait for the oldest
            self._jobs.popleft().result()
        future = self._pool.submit(fn, *args)
        self._jobs.append(future)
        return future

    def check(self) -> None:
        """Raise the error of a finished job, if any (finished jobs are forgotten)."""
        while self._jobs and self._jobs[0].done():
            self._jobs.popleft().result()
        for job in self._jobs:
            if job.done() and job.exception() is not None:
                job.result()

    def drain(self) -> None:
        """Wait for every job; raises the first error."""
        while self._jobs:
            self._jobs.popleft().result()

    def close(self) -> None:
        """Stop: jobs not started are dropped, running ones are waited for."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._jobs.clear()


class Renamer:
    """Commit tasks whose parts are already whole shards, by renaming them in order."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        final_name: Namer,
        *,
        threads: int = 0,
        index: bool = False,
    ) -> None:
        self.store = store
        self.index = index
        self.journal = journal
        self.final_name = final_name
        self.shards: list[ShardRecord] = []
        self.cut: list[int] = []  # samples of each shard, in order
        self.start = 0
        self.pool = CommitPool(threads) if threads > 1 else None
        self._recorded: dict[int, Future[Any]] = {}  # task -> its journal write
        self._renamed = 0
        self._lock = threading.Lock()

    @property
    def finished(self) -> int:
        """Shards under their final names so far (what progress reports)."""
        return self._renamed

    def record(self, result: TaskResult) -> None:
        """Journal a finished task (through the pool: its renames wait for it)."""
        if self.pool is None:
            self.journal.record(result)
            return
        self.journal.done[result.index] = result  # here: the driver commits in this order
        self._recorded[result.index] = self.pool.submit(self.journal.write, result)

    def resume(self) -> Iterator[int]:
        """Check recorded tasks' files (part or final name), reading them back in plan
        order; yields the tasks to run again."""
        matches = self.store.matcher()
        index, contiguous, expected = 0, True, 0
        for result in self.journal.read_back():
            if result.index != expected:
                contiguous = False
            expected = result.index + 1
            ok = True
            for part in result.parts:
                where = [part.name]
                if contiguous:  # final indices are known only after an unbroken prefix
                    where.append(self.final_name(index))
                ok = ok and any(matches(name, part.bytes, part.digest) for name in where)
                index += 1
            if not ok:
                yield result.index

    def add(self, result: TaskResult) -> None:
        recorded = self._recorded.pop(result.index, None)
        for part in result.parts:
            final = self.final_name(len(self.shards))
            if self.pool is None:
                self._rename(part.name, final, None)
            else:
                self.pool.submit(self._rename, part.name, final, recorded)
            self.shards.append(ShardRecord(final, part.samples, part.bytes, part.digest))
            self.cut.append(part.samples)

    def _rename(self, part: str, final: str, recorded: Future[Any] | None) -> None:
        if recorded is not None:
            recorded.result()  # journaled first (a failed record raises: no rename)
        if self.index:
            self._name_index(part, final)
        # A missing part was renamed before an interruption (resume verified it).
        with contextlib.suppress(FileNotFoundError):
            self.store.rename(part, final)
        if self.index:
            self.store.remove([index_url(part)])
        with self._lock:
            self._renamed += 1

    def _name_index(self, part: str, final: str) -> None:
        """Write the ``.idx`` of shard ``final`` from its part's (the same bytes under
        another name: only the shard name it states changes, spliced in without a parse),
        before the shard is renamed. None left: it was written before an interruption.
        A part's index that does not start as shardkit writes one is parsed and written
        again (its checks apply)."""
        data = self.store.read_bytes(index_url(part))
        if data is None:
            return
        named = renamed_index(data, storage.basename(part), final)  # as the writer names it
        if named is None:
            index = ShardIndex.from_json(data, url=self.store.join(index_url(part)))
            named = dataclasses.replace(index, shard=final).to_json()
        self.store.write_bytes(index_url(final), named)

    def finish(self) -> None:
        """Wait until every shard is renamed (the manifest comes after)."""
        self.drain()

    def drain(self) -> None:
        """Wait until every journal record and rename is done."""
        if self.pool is not None:
            self.pool.drain()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
