"""Which samples each (rank, worker) stream reads in an epoch: the epoch plan.

Every stream computes the same global picture and takes its part of it, so no process
talks to another:

1. The shard order of an epoch: the canonical order, or a shuffle of it seeded from
   ``(seed, epoch)`` with a local :class:`random.Random` (the same on every rank).
2. The split. Three modes:

   * ``"shards"`` (no sample counts): whole shards are dealt out, ``order[rank::world]``
     to each rank, then ``[worker::workers]`` to each worker. Streams differ in length.
   * ``"pad"`` / ``"drop"`` (counts known, from a manifest): the shuffled shards form one
     sequence of N samples; rank r takes a contiguous, balanced slice of it, so every
     rank yields exactly ``ceil(N / world)`` (pad: a rank one short repeats its first
     sample) or ``floor(N / world)`` (drop: at most ``world - 1`` samples are left out)
     samples. Its workers then split that slice by :func:`split_counts`, the same way on
     every rank, so worker w of every rank yields the same number of samples. Shards are
     cut at sample boundaries where slices meet.
   * ``"exact"`` (packed token items, :mod:`shardkit.pipeline._pack`): as ``"pad"``, but
     a rank takes its balanced slice as it is, ``floor(N / world)`` or one more: nothing
     repeated, nothing left out.
   * ``"cycle"`` (``with_epoch(n)``, ``resampled=True``): a worker reads its whole shards
     (as in ``"shards"``) pass after pass, each pass freshly shuffled, with no end of its
     own; ``with_epoch``'s stage ends the epoch (see :mod:`shardkit.pipeline._counting`).

A rank's count never depends on the number of DataLoader workers, so ``len()`` is exact
in the main process, where that number is unknown.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import random
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ._context import Context
from ._urls import ShardList

__all__ = [
    "EpochPlan",
    "Intervals",
    "Segment",
    "SplitMode",
    "drop_front",
    "plan_stream",
    "rank_samples",
    "shard_order",
    "split_counts",
    "split_mode",
    "stream_ranges",
    "through_space",
]

logger = logging.getLogger(__name__)

SplitMode = Literal["shards", "pad", "drop", "exact", "cycle"]
Intervals = tuple[tuple[int, int], ...]  # sorted, disjoint [start, stop) positions


@dataclass(frozen=True)
class Segment:
    """Read shard ``shard`` (an index into the shard list): skip ``skip`` samples, then
    yield ``take`` samples (None: to the end of the shard)."""

    shard: int
    skip: int = 0
    take: int | None = None


@dataclass(frozen=True)
class EpochPlan:
    """What one stream reads in one epoch (or, for ``"cycle"``, in one pass)."""

    segments: tuple[Segment, ...]
    target: int | None  # exact number of samples the stream yields, if known
    cycle: bool = False  # read further passes, endlessly


def split_mode(
    shards: ShardList, equalize: Literal["pad", "drop"] | None, epoch_size: int | None
) -> SplitMode:
    """The split mode for these options (see the module docs)."""
    if epoch_size is not None:
        return "cycle"
    if equalize is None:
        return "pad" if shards.counts is not None else "shards"
    if shards.counts is None:
        raise ConfigError(
            f"equalize={equalize!r} needs the sample count of every shard: read a "
            "manifest.json (or a folder holding one) instead of a URL list"
        )
    return equalize


def shard_order(
    count: int, *, seed: int, epoch: int, shuffle: bool, pass_index: int = 0
) -> list[int]:
    """Shard indices in reading order for an epoch (and pass); the same on every rank."""
    order = list(range(count))
    if shuffle:
        random.Random(f"shardkit-shards:{seed}:{epoch}:{pass_index}").shuffle(order)
    return order


def split_counts(total: int, parts: int, granularity: int = 1) -> list[int]:
    """Split ``total`` items into ``parts`` balanced parts, in whole units of ``granularity``.

    Full units are dealt out as evenly as possible; a last partial unit goes to the part
    next in line. So the number of units (batches) over all parts is always
    ``ceil(total / granularity)``, whatever ``parts`` is.
    """
    if parts < 1 or granularity < 1 or total < 0:
        raise ValueError(f"bad split: {total} items, {parts} parts, unit {granularity}")
    units, rest = divmod(total, granularity)
    base, extra = divmod(units, parts)
    sizes = [(base + (i < extra)) * granularity for i in range(parts)]
    sizes[extra % parts] += rest
    return sizes


def rank_samples(total: int, world: int, mode: SplitMode) -> int:
    """Samples each rank yields per epoch in the ``pad`` / ``drop`` modes."""
    return -(-total // world) if mode == "pad" else total // world


def plan_stream(
    shards: ShardList,
    ctx: Context,
    *,
    mode: SplitMode,
    shuffle: bool,
    granularity: int = 1,
    pass_index: int = 0,
    space: Intervals | None = None,
) -> EpochPlan:
    """The plan of stream (ctx.rank, ctx.worker) for ``ctx.epoch`` (see the module docs);
    ``granularity``: split workers' shares in whole batches of this size; ``space``: split
    only these positions of the epoch's sample sequence (what an elastic resume left,
    :mod:`shardkit.pipeline._elastic`), not all of it."""
    rank, world, worker, workers = ctx.rank, ctx.world, ctx.worker, ctx.workers
    if not (0 <= rank < world and 0 <= worker < workers):
        raise ConfigError(f"bad stream: rank {rank} of {world}, worker {worker} of {workers}")
    order = shard_order(
        len(shards.urls), seed=ctx.seed, epoch=ctx.epoch, shuffle=shuffle, pass_index=pass_index
    )
    if mode in ("shards", "cycle"):
        return _plan_whole_shards(order, mode, rank, world, worker, workers)
    counts = shards.counts
    if counts is None:  # split_mode() rules this out
        raise ConfigError(f"split mode {mode!r} needs sample counts")
    total = sum(counts) if space is None else sum(b - a for a, b in space)
    if total == 0 and space is None:
        raise ConfigError("the manifest says the dataset holds no samples")
    ranges = stream_ranges(total, mode, rank, world, worker, workers, granularity)
    if space is not None:
        ranges = [g for r in ranges for g in through_space(space, *r)]
    ordered = [counts[i] for i in order]
    bounds = list(itertools.accumulate(ordered, initial=0))
    empty = [k for k, count in enumerate(ordered) if count == 0]
    segments = []
    for a, b in ranges:
        segments += _segments(order, ordered, bounds, a, b)
        segments += _empty_checks(order, bounds, empty, a, b)
    return EpochPlan(tuple(segments), sum(b - a for a, b in ranges))


def _plan_whole_shards(
    order: list[int],
    mode: SplitMode,
    rank: int,
    world: int,
    worker: int,
    workers: int,
) -> EpochPlan:
    streams = world * workers
    mine = order[rank::world][worker::workers]
    if not mine and mode == "cycle":
        mine = [order[(rank * workers + worker) % len(order)]]  # share a shard, never idle
    elif len(order) < streams:
        logger.warning(
            "%d shards for %d streams (ranks x workers): some streams get no data; "
            "use more shards or a manifest with sample counts",
            len(order),
            streams,
        )
    segments = tuple(Segment(index) for index in mine)
    return EpochPlan(segments, None, cycle=mode == "cycle")


def stream_ranges(
    total: int,
    mode: SplitMode,
    rank: int,
    world: int,
    worker: int,
    workers: int,
    granularity: int = 1,
) -> list[tuple[int, int]]:
    """The positions ``[a, b)`` of a sequence of ``total`` samples that stream (rank,
    worker) reads in the ``pad`` / ``drop`` modes, in reading order (see the module docs)."""
    base, extra = divmod(total, world)
    start = rank * base + min(rank, extra)
    own = base + (rank < extra)
    count = own if mode == "exact" else rank_samples(total, world, mode)
    sizes = split_counts(count, workers, granularity)
    lo = sum(sizes[:worker])
    hi = lo + sizes[worker]
    ranges = []
    if lo < min(hi, own):
        ranges.append((start + lo, start + min(hi, own)))
    for i in range(max(lo, own), hi):  # padding: at most one sample per rank
        position = start + (i - own) % own if own else i % total
        ranges.append((position, position + 1))
    return ranges


def through_space(space: Intervals, start: int, stop: int) -> list[tuple[int, int]]:
    """Positions ``[start, stop)`` of the sequence that ``space`` lists, as positions of
    the whole sequence."""
    out = []
    offset = 0
    for a, b in space:
        lo, hi = max(start, offset), min(stop, offset + b - a)
        if lo < hi:
            out.append((a + lo - offset, a + hi - offset))
        offset += b - a
    return out


def _segments(
    order: list[int], ordered: list[int], bounds: list[int], start: int, stop: int
) -> list[Segment]:
    """Segments covering global positions [start, stop) of the ordered sample sequence."""
    out = []
    k = bisect.bisect_right(bounds, start) - 1
    while start < stop:
        while ordered[k] == 0 or bounds[k + 1] <= start:
            k += 1
        skip = start - bounds[k]
        take = min(stop, bounds[k + 1]) - start
        out.append(Segment(order[k], skip, take))
        start += take
    return out


def _empty_checks(
    order: list[int], bounds: list[int], empty: list[int], start: int, stop: int
) -> list[Segment]:
    """Zero-length segments for the shards stated empty whose place in the sequence lies
    in [start, stop) (the last ones: at its very end): reading one checks that the shard
    is empty indeed, so a wrong count of 0 is an error, never a silent skip of the shard
    (see :mod:`shardkit.pipeline._source`)."""
    total = bounds[-1]
    return [
        Segment(order[k], 0, 0)
        for k in empty
        if start <= bounds[k] < stop or bounds[k] == stop == total
    ]


def drop_front(
    segments: tuple[Segment, ...], n: int, counts: tuple[int, ...] | None
) -> tuple[tuple[Segment, ...], int]:
    """Remove the first ``n`` samples from a plan without reading, where counts allow.

    Returns the remaining segments and the number of samples still to skip by reading
    (non-zero only when a segment's length is unknown).
    """
    out = list(segments)
    while n and out:
        first = out[0]
        length = first.take
        if length is None:
            if counts is None:
                break
            length = counts[first.shard] - first.skip
        if n < length:
            out[0] = Segment(
                first.shard, first.skip + n, None if first.take is None else length - n
            )
            return tuple(out), 0
        n -= length
        out.pop(0)
    return tuple(out), n
