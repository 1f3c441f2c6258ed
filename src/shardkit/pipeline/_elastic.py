"""Elastic resume: a state saved on N ranks x W workers, continued on N' x W'.

In the ``pad`` / ``drop`` modes (a manifest gives every shard's count) the epoch is one
sequence of samples, fixed by ``(seed, epoch)`` whatever the topology, and each stream
reads ranges of positions in it (:func:`~shardkit.pipeline._epochs.stream_ranges`). With
no shuffle buffer before the resume point, a stream that handed out ``consumed`` items
has read exactly the first ``consumed`` positions of its ranges. So the states of *all*
the saved streams say which positions of the epoch were seen; the rest (the *space*) is
split over the new streams the way a whole epoch is split (balanced per rank, ``pad`` or
``drop``, workers in whole batches), and the epoch continues with every remaining sample
exactly once overall (plus ``pad``'s usual repeats of at most one sample per rank).

Pipelines whose per-stream position does not name the samples seen cannot be resumed
elsewhere: :func:`refusal` says why, in one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import StateError
from ..handlers import reraise
from ._epochs import Intervals, SplitMode, stream_ranges, through_space
from ._state import Position, check_states

__all__ = ["merge", "refusal"]


def refusal(mode: SplitMode, passes: int | None, cut: int, counting: bool, handler: object) -> str:
    """Why a pipeline cannot resume on another topology ('' if it can)."""
    if mode not in ("pad", "drop", "exact"):
        why = "with_epoch()/resampled streams" if mode == "cycle" else "shards without counts"
        return f"{why} have no global sample order (read a manifest, without with_epoch)"
    if passes != 1:
        return "repeat() reads several passes per epoch"
    if cut:
        return (
            "a .shuffle() buffer (or .unbatched()) holds items whose order depends on the topology"
        )
    if counting:
        return ".slice() counts per worker stream"
    if handler is not reraise:
        return "a handler other than 'raise' may drop samples, so counts do not name positions"
    return ""


def merge(saved: Sequence[Position], total: int, mode: SplitMode, granularity: int) -> Intervals:
    """The positions of the epoch's sequence that no saved stream has handed out yet.

    ``saved``: the states of every stream of the saved run, ``total``: the samples in the
    epoch's whole sequence."""
    saved = check_states([p.as_dict() for p in saved])  # whole, one run, each stream once
    first = saved[0]
    world, workers = first.world, first.workers
    # check_states: each stream once, each within the topology; so all are there iff
    # there are world x workers of them (no set of a tampered world's size is built).
    if len(saved) != world * workers:
        have = {(p.rank, p.worker) for p in saved}
        missing = [
            (r, w)
            for r in range(min(world, 8))
            for w in range(min(workers, 8))
            if (r, w) not in have
        ]
        raise StateError(
            f"cannot resume on another topology: it needs the states of all {world} ranks x "
            f"{workers} workers of the saved run, each once (got {len(saved)}; missing "
            f"(rank, worker) such as {missing[:8]}); gather every rank's loader.state_dict() "
            "into one list"
        )
    size = total if first.space is None else sum(b - a for a, b in first.space)
    epoch: list[tuple[int, int]] = []
    seen: list[tuple[int, int]] = []
    for p in saved:
        ranges = stream_ranges(size, mode, p.rank or 0, world, p.worker or 0, workers, granularity)
        epoch += ranges
        length = sum(b - a for a, b in ranges)
        p.check_consumed(length)
        left = length if p.done else p.consumed
        for a, b in ranges:
            take = min(left, b - a)
            if take:
                seen.append((a, a + take))
            left -= take
    rest = _subtract(_union(epoch), _union(seen))
    if first.space is not None:
        rest = [g for a, b in rest for g in through_space(first.space, a, b)]
    return tuple(_union(rest))


def _union(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(ranges: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted disjoint ``ranges`` less sorted disjoint ``holes``."""
    out = []
    for a, b in ranges:
        for c, d in holes:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
        if a < b:
            out.append((a, b))
    return out
