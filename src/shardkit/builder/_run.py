"""The driver: lock, journal, plan, run tasks, commit shards in order, write the manifest.

Commit protocol (what makes a build crash-safe and deterministic):

1. Workers write each task's parts under hidden names (``.shard-task000012-part000.tar``),
   each itself written under a temporary name and renamed when complete.
2. When a task finishes, the driver appends it to the journal, then hands finished tasks
   to the committer strictly in plan order (:mod:`.commit`): task *t* is committed only
   once tasks 0..t-1 are, so final names ``{prefix}-{index:06d}.{ext}`` are contiguous and
   do not depend on which worker finished first. A task whose items were all skipped
   contributes no shard. When shards are assembled from chunks (sizes not known up
   front), the committer only cuts them: each shard is a task the workers run
   (:mod:`.assembly`), committed (journaled) as it comes back, in any order.
3. ``manifest.json`` is written last, atomically; then the journal and lock go away.

A killed build leaves complete files (final or part names), the journal and no manifest;
rerunning verifies what the journal records and runs only the missing tasks.

The output is a :class:`~.store.Store`: a local folder (locked with ``flock``, journal in
one file) or an object-store prefix (locked with a lease object, journal as objects; see
:mod:`.lease` and :mod:`.journal`). Workers write their parts straight into either.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from .. import config
from ..engines import Executor, make_executor
from ..errors import BuildError, EmptyBuildError
from ..formats.names import MANIFEST_NAME
from ..formats.record import ShardRecord
from ._assembly import ShardPlan, WorkerAssembler, assemble_shard
from ._commit import Renamer
from ._fetchtally import FetchTally, fetched
from ._folder import OutputFolder
from ._journal import Journal
from ._keys import GivenKeys
from ._launch import cluster_executor, counted, picklable
from ._lease import store_lock
from ._manifest import make_manifest, write_manifest
from ._plan import CHUNK, Task, chunk_stream, cut_tasks, estimator, order_items
from ._results import BuildProgress, BuildResult, ProgressFn
from ._skipped import SkippedLog, write_skipped
from ._sources import Listing
from ._spill import Spill
from ._store import Store
from ._worker import (
    GIVEN_KEYS,
    WORKER_MODULE,
    TaskResult,
    WorkerContext,
    init_worker,
    run_task,
)
from .options import BuildOptions

__all__ = ["run_build"]

logger = logging.getLogger(__name__)


Committer = Renamer | WorkerAssembler


@dataclass
class _Tally:
    """What a build has packed so far: samples, input bytes, and items skipped."""

    samples: int = 0
    bytes: int = 0
    skipped: int = 0

    def add(self, samples: int, nbytes: int, skipped: int) -> None:
        self.samples += samples
        self.bytes += nbytes
        self.skipped += skipped


class _Driver:
    def __init__(
        self,
        store: Store,
        options: BuildOptions,
        listing: Listing,
        progress: ProgressFn | None,
        guard: Callable[[], None],
        spill: Spill | None = None,
    ) -> None:
        self.store = store
        self.spill = spill  # where a large listing is ordered (None: in memory)
        self.guard = guard  # raises if this build may no longer write (a lost lease)
        self.options = options
        self.listing = listing
        self.progress_fn = progress
        self.identity = {
            "options": options.output_options(),
            "source": {
                "kind": listing.kind,
                "fingerprint": listing.fingerprint,
                "items": len(listing.items) if listing.items is not None else None,
            },
        }
        self.journal = Journal(store, {"shardkit_journal": 1, **self.identity})
        self.folder = OutputFolder(store, options, self.journal)
        self.assemble = options.transforms or not listing.sizes_known
        self.chunk = min(CHUNK, options.max_count)  # items per task when assembling
        self.committer: Committer = Renamer(
            store,
            self.journal,
            self.folder.final_name,
            threads=store.commit_threads,
            index=options.index,
        )
        if self.assemble:  # workers assemble the shards the driver cuts
            self.committer = WorkerAssembler(
                store, self.journal, self.folder.final_name, options, threads=store.commit_threads
            )
        self.started = time.perf_counter()
        self.next_task = 0
        # What the listing skipped: counted now, as the log it starts takes the tasks' too.
        self.listed_skipped = len(listing.skipped)
        self.counts = _Tally(skipped=self.listed_skipped)
        self.last_report = 0.0
        self.resumed = 0
        # What the manifest needs of the tasks committed so far, folded in as each one is
        # handed to the committer (its record is dropped then: it is in the journal).
        self.packed = _Tally()  # what committed tasks packed (their skips: self.skipped)
        # Every skipped item, sorted in bounded memory (spilled beyond a budget).
        if isinstance(listing.skipped, SkippedLog):
            self.skipped = listing.skipped
        else:
            self.skipped = SkippedLog(spill)
            self.skipped.extend(listing.skipped)
        self.class_counts: dict[int, int] = {}
        self.fetch = FetchTally()
        # The keys a Python dataset gives, checked as they are written (None: the listing's
        # keys, checked when it was made).
        self.keys = GivenKeys(spill, store.url) if listing.kind in GIVEN_KEYS else None

    # -- start
    def prepare(self) -> BuildResult | None:
        """Clear, check or resume the folder; returns a result if it is already built."""
        manifest = self.folder.check(self.identity)
        if manifest is not None:
            shards, skipped = self.folder.already_built(manifest)
            count = manifest.get("skipped_count", len(skipped))
            count = count if isinstance(count, int) else len(skipped)
            return self._result(shards, (skipped, count), resumed=-1, fetch=fetched(manifest))
        resumed = self.journal.load()
        if resumed:
            for task in self.committer.resume():
                logger.warning("task %d: files missing or changed, running it again", task)
                self.journal.forget(task)
            self.resumed = len(self.journal.finished)
        self.folder.remove_strays()
        self.journal.start(fresh=not resumed)
        return None

    # -- run
    def run(self) -> BuildResult:
        if self.progress_fn is not None:  # read back one at a time: none is held
            for result in self.journal.read_back():
                self._count(result)
        self.next_task = self.committer.start
        self._commit_ready()
        self._report(force=True)
        tasks, count = self._pending_tasks()
        self._execute(tasks, count)
        self._commit_ready()
        self.committer.finish()
        self.committer.drain()  # every commit in flight is done before the manifest
        if isinstance(self.committer, WorkerAssembler) and not self.committer.complete:
            raise BuildError("shards are missing after every task finished (a shardkit bug)")
        return self._finish()

    def _pending_tasks(self) -> tuple[Iterator[Task], int | None]:
        listing, options, journal = self.listing, self.options, self.journal
        first = self.committer.start

        def wanted(task: Task) -> bool:  # tasks before next_task are committed: done
            return task.index >= max(first, self.next_task) and not journal.is_done(task.index)

        if listing.items is None:
            if listing.stream is None:
                raise BuildError("a one-pass source has no items to read")
            return filter(wanted, chunk_stream(listing.stream, self.chunk)), None
        # Ordered and cut as the tasks are submitted: nothing holds every item or task.
        ordered = order_items(listing.items, options, self.spill)
        if self.assemble:
            tasks = chunk_stream(ordered, self.chunk)
        else:
            tasks = cut_tasks(ordered, options, estimator(options, listing.classes))
        # Counted up to the pool's size: fewer tasks than workers start fewer workers; the
        # first tasks are cut before the pool starts, no more.
        return counted(filter(wanted, tasks), options.workers or config.default_workers())

    def _executor(self, pending: int | None) -> Executor:
        context = WorkerContext(
            self.store,
            self.options,
            self.listing.source,
            tuple(self.listing.classes),
            self.assemble,
        )
        if self.options.engine != "local":  # a Ray or Dask cluster (docs/scaling.md)
            return cluster_executor(self.options, self.listing, context)
        workers = self.options.workers or config.default_workers()
        if pending is not None:
            workers = min(workers, pending)
        if workers > 1 and (not self.listing.splittable or not picklable(context)):
            workers = 1  # in this process
        return make_executor(
            "local", workers=workers, init=init_worker, context=context, preload=[WORKER_MODULE]
        )

    def _execute(self, tasks: Iterator[Task], count: int | None) -> None:
        assembler = self.committer if isinstance(self.committer, WorkerAssembler) else None
        if count == 0:
            if assembler is None:
                return
            assembler.finish()  # every chunk is done: only shards may be left to assemble
            if not assembler.ready:
                return
        # Shard tasks need workers too, however few chunks are left.
        executor = self._executor(count if assembler is None or count is None else max(count, 2))
        inflight: dict[Future[Any], Task | ShardPlan] = {}
        running, more = 0, count != 0  # chunk tasks in flight; chunk tasks left to submit
        try:
            while True:
                while more and running < 2 * executor.workers:
                    task = next(tasks, None)
                    if task is None:
                        more = False
                        break
                    inflight[executor.submit(run_task, task)] = task
                    running += 1
                if assembler is not None:
                    if not more and not running and count != 0:
                        assembler.finish()  # the last shard
                        count = 0
                    for plan in assembler.ready:
                        inflight[executor.submit(assemble_shard, plan)] = plan
                    assembler.ready.clear()
                if not inflight:
                    break
                done, _ = wait(inflight, timeout=0.1, return_when=FIRST_COMPLETED)
                self._progress(executor.progress())
                for future in sorted(done, key=lambda f: _order(inflight[f])):
                    job = inflight.pop(future)
                    if isinstance(job, ShardPlan):
                        self._assembled(job, future.result())
                    else:
                        running -= 1
                        self._finished(future.result())
        except BaseException:
            executor.close(cancel=True)
            with contextlib.suppress(Exception):  # never in place of the run's own error
                self.folder.remove_temporaries()
            raise
        executor.close()

    def _finished(self, result: TaskResult) -> None:
        self.guard()
        self.committer.record(result)
        self._commit_ready()

    def _assembled(self, plan: ShardPlan, shard: ShardRecord) -> None:
        if not isinstance(self.committer, WorkerAssembler):
            raise TypeError("a shard was assembled without a WorkerAssembler")
        self.guard()
        self.committer.done(plan, shard)
        self._report(force=True)

    def _commit_ready(self) -> None:
        """Hand finished tasks to the committer in plan order (reports new shards)."""
        shards = len(self.committer.shards)
        while self.journal.is_done(self.next_task):
            # Journaled already: cut, folded into the totals and forgotten, so the driver
            # holds no record per task (per chunk of items when it assembles). A task an
            # earlier run finished is read back from the journal now, one at a time.
            result = self.journal.take(self.next_task)
            if self.keys is not None:  # before a shard holding two of them is assembled
                self.keys.add(result.keys)
            self.committer.add(result)
            self.fetch.add(result, self.committer.cut)
            self._fold(result)
            self.next_task += 1
            if len(self.committer.shards) != shards:
                shards = len(self.committer.shards)
                self._report(force=True)

    def _fold(self, result: TaskResult) -> None:
        """Add a committed task to what the manifest counts."""
        self.packed.add(sum(p.samples for p in result.parts), result.input_bytes, 0)
        self.skipped.extend(result.skipped)
        for label, n in result.class_counts.items():
            self.class_counts[label] = self.class_counts.get(label, 0) + n

    # -- progress
    def _count(self, result: TaskResult) -> None:
        """Add a resumed task (live tasks are counted through progress reports)."""
        self.counts.add(
            sum(p.samples for p in result.parts), result.input_bytes, len(result.skipped)
        )

    def _progress(self, deltas: list[tuple[int, int, int]]) -> None:
        for samples, nbytes, skipped in deltas:  # a worker's report: a tuple on the wire
            self.counts.add(samples, nbytes, skipped)
        self._report()

    def _report(self, force: bool = False) -> None:
        if self.progress_fn is None:
            return
        now = time.perf_counter()
        if not force and now - self.last_report < 0.1:
            return
        self.last_report = now
        items = self.listing.items
        total = len(items) + self.listed_skipped if items is not None else None
        self.progress_fn(
            BuildProgress(
                samples=self.counts.samples,
                skipped=self.counts.skipped,
                total=total,
                bytes=self.counts.bytes,
                shards=self.committer.finished,
                elapsed=now - self.started,
            )
        )

    # -- finish
    def _classes(self, counts: dict[int, int]) -> list[str]:
        """The listing's classes; for shards that state none, their labels counted."""
        if self.listing.classes or self.listing.kind != "shards":
            return self.listing.classes
        from ._shards import counted_classes

        return counted_classes(counts)

    def _finish(self) -> BuildResult:
        if self.journal.pending():  # every task is committed (in order) before this
            raise BuildError("tasks are left uncommitted after every task ran (a shardkit bug)")
        self.counts = _Tally(self.packed.samples, self.packed.bytes, len(self.skipped))
        self._report(force=True)
        counts = self.class_counts
        timing = {
            "seconds": round(time.perf_counter() - self.started, 3),
            "workers": self.options.workers or config.default_workers(),
            "resumed_tasks": self.resumed,
        }
        shards = self.committer.shards
        if not any(shard.samples for shard in shards):
            self._nothing_packed()
        if self.keys is not None:
            self.keys.refuse_repeats(_places(shards))
        self.guard()
        skipped, count = write_skipped(self.store, self.skipped.sorted())
        manifest = make_manifest(
            identity=self.identity,
            shards=shards,
            classes=self._classes(counts),
            class_counts=counts,
            skipped=skipped,
            skipped_count=count,
            timing=timing,
            fetch=self.fetch.by_shard(self.committer.cut),
        )
        manifest["source"] = {**manifest["source"], "path": self.listing.path}
        self.guard()
        write_manifest(self.store.join(MANIFEST_NAME), manifest, self.store.access)
        self.journal.remove()
        self.folder.remove_strays()
        return self._result(shards, (skipped, count), self.resumed, fetched(manifest))

    def _nothing_packed(self) -> None:
        """Leave OUT without a manifest, journal or parts, so a rerun starts afresh; raise
        (with the first skipped items: the message counts them all)."""
        self.journal.remove()
        self.journal.clear()
        self.folder.remove_strays()
        count = len(self.skipped)
        first = self.skipped.sorted()  # the error keeps the first few
        what = f"all {count} items were skipped" if count else "the source has no items"
        message = f"no sample was packed: {what}; nothing was written"
        raise EmptyBuildError(message, skipped=first, url=self.store.url)

    def _result(
        self,
        shards: list[ShardRecord],
        skipped: tuple[list[tuple[str, str]], int],
        resumed: int,
        fetch: dict[str, int],
    ) -> BuildResult:
        return BuildResult(
            out=self.store.url,
            manifest=self.store.join(MANIFEST_NAME),
            shards=shards,
            samples=sum(s.samples for s in shards),
            skipped=skipped[0],
            resumed_tasks=resumed,
            seconds=time.perf_counter() - self.started,
            fetch=fetch,
            skipped_count=skipped[1],
        )


def _places(shards: list[ShardRecord]) -> Callable[[int], str]:
    """Names the place of the ``n``-th sample written: its shard and its number there."""
    ends = list(itertools.accumulate(shard.samples for shard in shards))

    def where(n: int) -> str:
        shard = bisect.bisect_right(ends, n)
        return f"{shards[shard].name} sample {n - (ends[shard - 1] if shard else 0):,}"

    return where


def _order(job: Task | ShardPlan) -> tuple[bool, int]:
    """Chunk results first, each kind in plan order."""
    return isinstance(job, ShardPlan), job.index


def run_build(
    store: Store,
    options: BuildOptions,
    listing: Listing,
    progress: ProgressFn | None,
    spill: Spill | None = None,
) -> BuildResult:
    """Build ``listing`` into ``store`` (a folder that exists, or an object-store prefix);
    holds the output's lock (or lease) throughout. A large listing is ordered through
    ``spill`` (:mod:`.spill`), which the caller removes."""
    with store_lock(store) as guard:
        driver = _Driver(store, options, listing, progress, guard, spill)
        try:
            done = driver.prepare()
            return done if done is not None else driver.run()
        finally:
            driver.committer.close()  # commits in flight end before the lock goes
            driver.journal.close()
            driver.skipped.close()
            if driver.keys is not None:
                driver.keys.close()
