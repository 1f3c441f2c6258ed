"""Shards assembled by the workers from chunk parts (no shard byte through the driver).

This is how every build whose output sizes are not known up front (resized images, Python
samples, URLs, existing shards) makes its shards, into a local folder or an object store.
The driver still decides every cut, from the chunk results in plan order (it knows each
sample's size): a :class:`Cutter` turns them into :class:`ShardPlan` s, each a list of
byte ranges of chunk parts plus the trailer, cut exactly where the one cut rule
(:class:`shardkit.formats.cut.Cut`) says. As soon as a shard's chunks are done, the
driver submits :func:`assemble_shard` to the same executor as the chunk tasks: the worker
reads the ranges from the store (ranged reads), writes the shard under its final name
(atomically) and returns its size and digest.

Shards therefore commit out of order. :class:`WorkerAssembler` (driver side) journals
each one with its index and cut position, and deletes a part only once every shard that
uses it is journaled. A resume re-derives the same cuts from the journaled chunk results,
keeps the journaled shards it finds intact, and reruns only chunks whose part is gone
while a shard still missing needs it.

In an object store these commits are round trips (a PUT per chunk record and per shard
record, a DELETE per used part), so they go through a bounded
:class:`~.commit.CommitPool`, as a pass-through build's renames do: a part is deleted
only after its chunk's record and the records of every shard that read it are written,
and the manifest waits for every commit (:meth:`WorkerAssembler.drain`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from ..errors import StorageError
from ..formats.record import ShardRecord
from ..formats.tar import TarScanner
from ..writer import Rotation, copy_samples
from ._commit import CommitPool, Namer
from ._journal import AssembledShard, Journal
from ._store import Store
from ._worker import TaskResult, current_run
from .options import BuildOptions

__all__ = ["Cutter", "ShardPlan", "WorkerAssembler", "assemble_shard"]

FINAL = (1 << 62, 0)  # the cut position recorded for the last shard
_BLOCK = 8 << 20  # bytes per ranged read


@dataclass(frozen=True)
class ShardPlan:
    """Shard ``index``: its name, the part byte ranges it is made of, then the trailer."""

    index: int
    name: str
    ranges: tuple[tuple[str, int, int], ...]  # (part name, offset, length)
    samples: int
    size: int  # bytes, trailer included
    trailer: bytes
    end: tuple[int, int]  # (chunk, sample) where the next shard starts
    chunks: tuple[int, ...] = field(default=(), compare=False)  # chunks it reads from
    closes: tuple[int, ...] = field(default=(), compare=False)  # chunks it reads last


class Cutter:
    """Cut chunk results, fed in plan order, into shard plans (pure: no I/O)."""

    def __init__(self, options: BuildOptions, final_name: Namer) -> None:
        self.final_name = final_name
        self.cut = options.cut
        self.trailer = options.trailer
        self.index = 0  # of the shard being filled
        self._ranges: list[list[Any]] = []
        self._chunks: list[int] = []
        self._count = self._size = 0

    def add(self, result: TaskResult) -> Iterator[ShardPlan]:
        if not result.parts:
            return
        name, offset = result.parts[0].name, 0
        full = self.cut.full
        for sample, size in enumerate(result.sizes):
            if full(self._count, self._size, size):
                yield self._cut((result.index, sample))
            if self._ranges and self._ranges[-1][0] == name:
                self._ranges[-1][2] += size
            else:
                self._ranges.append([name, offset, size])
                self._chunks.append(result.index)
            self._count += 1
            self._size += size
            offset += size

    def finish(self) -> Iterator[ShardPlan]:
        if self._count:
            yield self._cut(FINAL)

    def _cut(self, end: tuple[int, int]) -> ShardPlan:
        chunks = tuple(self._chunks)
        # A cut inside a chunk (not at its first sample) leaves that chunk to the next shard.
        goes_on = end != FINAL and end[1] > 0
        plan = ShardPlan(
            index=self.index,
            name=self.final_name(self.index),
            ranges=tuple((str(n), int(o), int(s)) for n, o, s in self._ranges),
            samples=self._count,
            size=self._size + len(self.trailer),
            trailer=self.trailer,
            end=end,
            chunks=chunks,
            closes=chunks[:-1] if goes_on else chunks,
        )
        self.index += 1
        self._ranges, self._chunks = [], []
        self._count = self._size = 0
        return plan

    def open_chunks(self) -> tuple[int, ...]:
        """Chunks of the shard being filled (not cut yet)."""
        return tuple(self._chunks)


def assemble_shard(plan: ShardPlan) -> ShardRecord:
    """Worker side: copy ``plan``'s ranges into shard ``plan.name``; returns its record.
    With ``index`` (a tar build's default), the shard goes through a
    :class:`~shardkit.writer.Rotation` that writes its ``.idx`` file: its samples are found
    by the reader's scanner as they are copied (the same bytes)."""
    context = current_run().context
    store = context.store
    if context.options.index and context.options.format == "tar":
        return _assemble_indexed(store, plan)
    with store.create(plan.name) as pending:  # a failure (a full disk) leaves nothing behind
        for part, offset, length in plan.ranges:
            for block in _read_range(store, part, offset, length):
                pending.write(block)
        pending.write(plan.trailer)
    return ShardRecord(plan.name, plan.samples, pending.size, pending.digest)


def _assemble_indexed(store: Store, plan: ShardPlan) -> ShardRecord:
    shard = Rotation(lambda _: store.create(plan.name), index=True, access=store.access)
    members = TarScanner(cast(BinaryIO, _Ranges(store, plan)), url=store.join(plan.name))
    shard.before_commit = members.flush_copy
    try:
        copy_samples(members, shard)
        [info] = shard.commit()
    except BaseException:
        shard.discard()
        raise
    return ShardRecord(plan.name, info.samples, info.bytes, info.digest)


class _Ranges:
    """A readable stream of ``plan``'s ranges, then its trailer."""

    def __init__(self, store: Store, plan: ShardPlan) -> None:
        blocks = (
            block
            for part, offset, length in plan.ranges
            for block in _read_range(store, part, offset, length)
        )
        self._blocks = itertools.chain(blocks, [plan.trailer])
        self._held = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            return bytes(self._held) + b"".join(self._blocks)
        while not self._held:
            block = next(self._blocks, None)
            if block is None:
                return b""
            self._held = memoryview(block)
        data, self._held = self._held[:size], self._held[size:]
        return bytes(data)


def _read_range(store: Store, part: str, offset: int, length: int) -> Iterator[bytes]:
    end = offset + length
    while offset < end:
        size = min(_BLOCK, end - offset)
        data = store.read_range(part, offset, size)
        if len(data) != size:
            raise StorageError(
                f"part ended early: {len(data)} of {size} bytes at offset {offset}",
                url=store.join(part),
            )
        yield data
        offset += size


class WorkerAssembler:
    """Driver side: cut shards, hand out plans, journal what comes back, delete used parts."""

    def __init__(
        self,
        store: Store,
        journal: Journal,
        final_name: Namer,
        options: BuildOptions,
        *,
        threads: int = 0,
    ) -> None:
        self.store = store
        self.journal = journal
        self.options = options
        self.pool = CommitPool(threads) if threads > 1 else None
        # With a pool: chunk -> the journal writes its part's deletion waits for, and how
        # many shard records are still to be written (those shards are not finished yet).
        self._writes: dict[int, list[Future[Any]]] = {}
        self._unwritten = 0
        self._lock = threading.Lock()
        self.cutter = Cutter(options, final_name)
        self.start = 0  # every chunk result feeds the cutter, from the first
        self.committed: dict[int, ShardRecord] = {}
        self.ready: list[ShardPlan] = []  # plans to submit
        self.cut: list[int] = []  # samples of each shard cut so far, in order
        self._recorded: dict[int, tuple[ShardRecord, tuple[int, int]]] = {}
        self._uses: dict[int, int] = {}  # chunk -> plans not yet committed that read it
        self._closed: set[int] = set()  # chunks no later shard reads
        self._parts: dict[int, str] = {}  # chunk -> its part name

    @property
    def complete(self) -> bool:
        """Whether every shard cut so far is committed (and nothing waits to be)."""
        return not self.ready and len(self.committed) == self.cutter.index

    @property
    def finished(self) -> int:
        """Shards assembled and journaled so far (what progress reports)."""
        return len(self.committed) - self._unwritten

    @property
    def shards(self) -> list[ShardRecord]:
        return [self.committed[i] for i in sorted(self.committed)]

    def resume(self) -> Iterator[int]:
        """Keep the journaled shards found intact; yields chunks to run again (chunk
        results are read back from the journal in plan order, twice: none is held)."""
        matches = self.store.matcher()
        for recorded in self.journal.shards:  # a damaged record was dropped: made again
            shard = recorded.shard
            if matches(shard.name, shard.bytes, shard.digest):
                self._recorded[recorded.index] = (shard, recorded.end)
        needed = _Spans()  # chunks a shard still to be made reads
        dry = Cutter(self.options, self.cutter.final_name)
        task = 0  # the unbroken prefix of chunks the cut goes through
        for result in self.journal.read_back():
            if result.index != task:
                break
            for plan in dry.add(result):
                if not self._is_recorded(plan):
                    needed.add(plan.chunks)
            task += 1
        last = self._recorded.get(dry.index)
        if last is None or last[1] != FINAL:
            needed.add(dry.open_chunks())
        for result in self.journal.read_back():
            t = result.index
            if (t >= task or t in needed) and not all(
                matches(p.name, p.bytes, p.digest) for p in result.parts
            ):
                yield t

    def record(self, result: TaskResult) -> None:
        """Journal a finished chunk (through the pool: its part's deletion waits for it)."""
        if self.pool is None:
            self.journal.record(result)
            return
        self.journal.done[result.index] = result  # here: the driver cuts in this order
        write = self.pool.submit(self.journal.write, dataclasses.replace(result))
        self._writes[result.index] = [write]

    def drain(self) -> None:
        """Wait until every journal record and part deletion is done (the manifest comes
        after)."""
        if self.pool is not None:
            self.pool.drain()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def add(self, result: TaskResult) -> None:
        if result.parts:
            self._parts[result.index] = result.parts[0].name
        else:  # no shard reads it: the pool still waits for its record before the manifest
            self._writes.pop(result.index, None)
        self._take(self.cutter.add(result))
        result.sizes = []  # journaled, and cut: the driver holds no per-sample figure

    def finish(self) -> None:
        """Cut the last shard (its plan joins :attr:`ready`)."""
        self._take(self.cutter.finish())

    def _take(self, plans: Iterator[ShardPlan]) -> None:
        for plan in plans:
            self.cut.append(plan.samples)
            for chunk in plan.chunks:
                self._uses[chunk] = self._uses.get(chunk, 0) + 1
            self._closed.update(plan.closes)
            if self._is_recorded(plan):  # journaled and intact: not again
                self._committed(plan, self._recorded.pop(plan.index)[0])
            else:
                self.ready.append(plan)

    def _is_recorded(self, plan: ShardPlan) -> bool:
        recorded = self._recorded.get(plan.index)
        return recorded is not None and (recorded[0].name, recorded[1]) == (plan.name, plan.end)

    def done(self, plan: ShardPlan, shard: ShardRecord) -> None:
        """A worker assembled ``plan``: check, journal, delete parts no shard needs now."""
        if (shard.name, shard.samples, shard.bytes) != (plan.name, plan.samples, plan.size):
            raise StorageError(
                f"assembled {shard.bytes} bytes, {shard.samples} samples; "
                f"planned {plan.size}, {plan.samples}",
                url=self.store.join(plan.name),
            )
        record = AssembledShard(shard, plan.index, plan.end)
        if self.pool is None:
            self.journal.record_shard(record)
        else:
            with self._lock:
                self._unwritten += 1
            write = self.pool.submit(self._record_shard, record)
            for chunk in plan.chunks:
                self._writes.setdefault(chunk, []).append(write)
        self._committed(plan, shard)

    def _record_shard(self, record: AssembledShard) -> None:
        self.journal.record_shard(record)
        with self._lock:
            self._unwritten -= 1

    def _committed(self, plan: ShardPlan, shard: ShardRecord) -> None:
        self.committed[plan.index] = shard
        unused, writes = [], []
        for chunk in plan.chunks:
            self._uses[chunk] -= 1
            if not self._uses[chunk] and chunk in self._closed:  # no shard reads it now
                del self._uses[chunk]  # (nothing is kept per chunk once it is used up)
                self._closed.discard(chunk)
                if chunk in self._parts:
                    unused.append(self._parts.pop(chunk))
                    writes += self._writes.pop(chunk, [])
        if self.pool is None:
            self.store.remove(unused)
        elif unused:
            self.pool.submit(_remove_after, self.store, unused, writes)


class _Spans:
    """A set of chunks, as spans: shards read consecutive chunks and are cut in plan
    order, so this grows with the shards still to be made, not with the chunks."""

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._lasts: list[int] = []

    def add(self, chunks: tuple[int, ...]) -> None:
        if not chunks:
            return
        first, last = min(chunks), max(chunks)
        if self._lasts and first <= self._lasts[-1] + 1:
            self._lasts[-1] = max(self._lasts[-1], last)
        else:
            self._firsts.append(first)
            self._lasts.append(last)

    def __contains__(self, chunk: int) -> bool:
        at = bisect.bisect_right(self._firsts, chunk) - 1
        return at >= 0 and chunk <= self._lasts[at]


def _remove_after(store: Store, names: list[str], writes: list[Future[Any]]) -> None:
    """Remove ``names`` once ``writes`` (journal records submitted earlier) are done; a
    failed record raises instead (the parts stay for the resume)."""
    for write in writes:
        write.result()
    store.remove(names)
