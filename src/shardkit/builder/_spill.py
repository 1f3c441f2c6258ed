"""Bounded memory for the driver: spill files on local disk, sorted runs, hash buckets.

A listing or an order that holds more than :data:`ORDER_BUDGET` records at once goes
through a :class:`Spill`: a private temporary folder (``mkdtemp``, mode 0700, under the
driver's temporary directory, ``TMPDIR``; never the output) that is removed when the
build ends, whether it succeeded or failed. The build holds an exclusive ``flock`` on a
lock file inside it for as long as the folder exists; the kernel drops it when the build
dies, however it dies. So a folder a killed build left behind is removed by the next
build that spills into the same ``TMPDIR``, and a live build's folder never is, even seen
from another container sharing ``TMPDIR`` but not the process ids (the pid in the name
is only for people). Records are tuples of strings and integers
(and a list's rows: dicts of JSON values), written in length-prefixed ``marshal``
batches and read back only by the process that wrote them.

* :class:`Sorter` sorts any number of records: runs of ``ORDER_BUDGET`` sorted in memory
  and spilled, then a k-way merge, in rounds of at most 64 runs (nothing spills when
  everything fits one run).
* :func:`bucketed` partitions records into hash buckets of at most about half the budget
  each, so one bucket at a time is held.
"""

from __future__ import annotations

import heapq
import marshal
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._flock import lock_exclusive
from ..errors import BuildError

__all__ = [
    "ORDER_BUDGET",
    "RecordFile",
    "Sorter",
    "Spill",
    "bucket_count",
    "bucketed",
    "held",
    "remove_stale",
]

ORDER_BUDGET = 1 << 18
"""Most records (listed items, listing entries) the driver holds in memory at once while
listing and ordering. A build of at most this many items is ordered in memory, exactly
as before spilling existed; a larger one is ordered through spill files. Part of the
shuffle order: changing it changes the order of builds larger than it."""

_PREFIX = "shardkit-spill-"  # then the driver's pid: shardkit-spill-1234-xxxxxx
_LOCK = "lock"  # in a spill folder: its build holds an exclusive flock on it
_ATTEMPTS = 8  # new folders tried, each taken by another build's cleanup before it was locked
_BATCH = 4096  # records per marshal batch
_FAN_IN = 64  # sorted runs merged at once (each holds one open file and one batch)
_FLUSH = 1 << 17  # records buffered across all open record files before they are written


class Spill:
    """A private temporary folder for one build, made on first use, removed by close()."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._lock: int | None = None  # holds the folder's lock while it exists
        self._files = 0

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> str | None:
        """The folder, once something was spilled (None before)."""
        return self._path

    def new_file(self, batch: int = _BATCH) -> RecordFile:
        if self._path is None:
            remove_stale()
            self._path, self._lock = _locked_folder()
        self._files += 1
        return RecordFile(os.path.join(self._path, f"{self._files:06d}.bin"), batch)

    def close(self) -> None:
        path, self._path = self._path, None
        lock, self._lock = self._lock, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)  # still locked: nobody else removes it
        if lock is not None:
            os.close(lock)


def _locked_folder() -> tuple[str, int]:
    """A new spill folder, and the descriptor holding the lock on its lock file."""
    for _ in range(_ATTEMPTS):
        try:
            path = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
        except OSError as exc:
            raise _spill_error(exc, tempfile.gettempdir()) from exc
        try:
            lock = lock_exclusive(os.path.join(path, _LOCK), create=True)
        except (BlockingIOError, FileNotFoundError):
            lock = None  # another build's cleanup took the folder while it had no lock yet
        if lock is not None:
            return path, lock
    raise BuildError(
        f"cannot make a spill folder: other builds' cleanup removed {_ATTEMPTS} new ones in a row",
        url=tempfile.gettempdir(),
    )


def remove_stale(folder: str | None = None) -> list[str]:
    """Remove the spill folders that builds killed before their cleanup left in ``folder``
    (default: the temporary directory): those whose lock nobody holds.

    Each is removed while holding its lock, so its build cannot be alive. A folder with no
    lock file is one being made at this instant (its build takes the lock next) or one
    whose build died before that: it is removed only while it is still empty, so never
    once its build has locked it (the build then makes another)."""
    folder = folder or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(_PREFIX):
            continue
        path = os.path.join(folder, name)
        try:
            lock = lock_exclusive(os.path.join(path, _LOCK))
        except OSError:  # held by a live build; or another user's folder (mode 0700)
            continue
        if lock is None:
            try:
                os.rmdir(path)  # only while empty
            except OSError:
                continue
        else:
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                os.close(lock)
        removed.append(name)
    return removed


class RecordFile:
    """Records appended in batches (the file is opened only to write a batch), read back
    in order, as often as needed."""

    def __init__(self, path: str, batch: int = _BATCH) -> None:
        self.path = path
        self.count = 0
        self._batch = max(1, batch)
        self._buffer: list[Any] = []

    def __len__(self) -> int:
        return self.count

    def append(self, record: Any) -> None:
        self._buffer.append(record)
        self.count += 1
        if len(self._buffer) >= self._batch:
            self.flush()

    def extend(self, records: Iterable[Any]) -> None:
        for record in records:
            self.append(record)

    def flush(self) -> None:
        if self._buffer:
            data = marshal.dumps(self._buffer)
            try:
                with open(self.path, "ab") as f:
                    f.write(len(data).to_bytes(8, "little") + data)
            except OSError as exc:  # a full TMPDIR: one line, not a traceback
                raise _spill_error(exc, os.path.dirname(self.path)) from exc
            self._buffer = []

    def __iter__(self) -> Iterator[Any]:
        self.flush()
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            while size := int.from_bytes(f.read(8), "little"):
                yield from marshal.loads(f.read(size))

    def remove(self) -> None:
        self._buffer = []
        if os.path.exists(self.path):
            os.unlink(self.path)


def _spill_error(exc: OSError, folder: str) -> BuildError:
    return BuildError(
        f"cannot spill the listing to the temporary folder: {exc.strerror or exc} "
        "(free space there, or point TMPDIR at a larger disk)",
        url=folder,
    )


class Sorter:
    """Sort records (tuples, compared as they are) in runs of at most ``budget``."""

    def __init__(self, spill: Spill, budget: int | None = None) -> None:
        self.spill = spill
        self.budget = ORDER_BUDGET if budget is None else budget
        self.count = 0
        self._run: list[Any] = []
        self._runs: list[RecordFile] = []

    @property
    def spilled(self) -> bool:
        return bool(self._runs)

    def add(self, record: Any) -> None:
        self._run.append(record)
        self.count += 1
        if len(self._run) >= self.budget:
            self._spill_run()

    def extend(self, records: list[Any]) -> None:
        """:meth:`add` each of ``records`` (the same runs, at a list's speed)."""
        room = self.budget - len(self._run)
        while len(records) >= room:
            self._run.extend(records[:room])
            self.count += room
            records = records[room:]
            self._spill_run()
            room = self.budget
        self._run.extend(records)
        self.count += len(records)

    def _spill_run(self) -> None:
        self._run.sort()
        self._runs.append(self._write(self._run))
        self._run = []

    def _write(self, records: Iterable[Any]) -> RecordFile:
        run = self.spill.new_file(max(64, min(_BATCH, self.budget // _FAN_IN)))
        run.extend(records)
        run.flush()
        return run

    def sorted(self) -> Iterator[Any]:
        """Every record added, in order (one pass; spilled runs are merged from disk)."""
        if not self._runs:
            self._run.sort()
            held, self._run = self._run, []
            return iter(held)
        if self._run:
            self._spill_run()
        runs = self._runs
        while len(runs) > _FAN_IN:  # merge in rounds: open files and batches stay bounded
            merged = self._write(heapq.merge(*runs[:_FAN_IN]))
            for run in runs[:_FAN_IN]:
                run.remove()
            runs = [*runs[_FAN_IN:], merged]
        self._runs = []
        return _merged(runs)


def _merged(runs: list[RecordFile]) -> Iterator[Any]:
    """The runs merged; each file goes once read through."""
    yield from heapq.merge(*runs)
    for run in runs:
        run.remove()


def bucket_count(count: int) -> int:
    """Hash buckets for ``count`` records: 1 within the budget, else about half the budget
    each."""
    return 1 if count <= ORDER_BUDGET else max(2, -(-2 * count // ORDER_BUDGET))


def held(records: Iterable[Any], spill: Spill) -> list[Any] | RecordFile:
    """``records`` kept for more passes: in a list up to a quarter of the budget (a list's
    rows are dicts, heavier than items), else in a spill file."""
    kept: list[Any] = []
    for record in records:
        kept.append(record)
        if len(kept) > ORDER_BUDGET // 4:
            file = spill.new_file()
            file.extend(kept)
            kept = []
            file.extend(records)
            return file
    return kept


def bucketed(
    records: Iterable[Any], buckets: int, bucket_of: Callable[[Any], int], spill: Spill
) -> Iterator[list[Any]]:
    """The records of each bucket in turn, in the order they came (``bucket_of(record)``
    in ``range(buckets)``); one bucket is held at a time and each file goes once read.
    One bucket is all the records, in memory."""
    if buckets == 1:
        yield list(records)
        return
    # what all buffers hold together stays within the budget
    batch = max(64, min(_FLUSH, ORDER_BUDGET) // buckets)
    files = [spill.new_file(batch) for _ in range(buckets)]
    for record in records:
        files[bucket_of(record)].append(record)
    for file in files:
        records_of = list(file)
        file.remove()
        yield records_of
