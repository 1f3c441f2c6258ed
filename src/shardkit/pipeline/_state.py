"""Mid-epoch resume: the position of an iteration, and how to return to it.

The item stream of one (seed, epoch, rank, worker) is deterministic, so a position is
just ``(epoch, consumed)``: how many items have passed the *resume point*, which sits
right after the last stage that holds items back (the last ``.shuffle()``; the source if
there is none). Every stage after it pulls exactly the items it needs for its next
output, so when an output has been handed out nothing is in flight below that point.

Restoring replays the stream up to the resume point and drops ``consumed`` items there,
before any later stage (decode, map, batching) sees them. With no shuffle buffer before
the point the source drops them itself, skipping whole shards when the counts are known.

A counting stage after the resume point (``with_epoch``, ``slice``: see
:mod:`shardkit.pipeline._counting`) saves its own count too (``tallies``), so a restored
epoch ends exactly where the uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import StateError
from ._context import Context
from ._counting import Tally
from ._epochs import Intervals

__all__ = [
    "STATE_VERSION",
    "Position",
    "Progress",
    "ReadsAhead",
    "check_loader_states",
    "check_state",
    "check_states",
    "counted",
    "fingerprint",
    "finished",
]

STATE_VERSION = 1


class ReadsAhead:
    """A stage's iterator that pulls items before it hands them on (parallel decoding).

    Its ``lookahead`` says how many it holds; the resume position discounts them
    (:meth:`Progress.position`). The counter lives apart from the iterator, so the
    pipeline's progress holds no reference to it: dropping the iterator stops its threads.
    """

    lookahead: Callable[[], int]


@dataclass
class Progress:
    """The live position of one iteration, updated as items pass the resume point.

    A stage after that point whose iterator is a :class:`ReadsAhead` registers its
    ``lookahead()``: items it has pulled but not yet handed on are not consumed.
    """

    epoch: int
    consumed: int
    done: bool = False
    space: Intervals | None = None  # the positions an elastic resume left to this epoch
    lookahead: list[Callable[[], int]] = field(default_factory=list)
    tallies: list[tuple[Tally, int]] = field(default_factory=list)

    def position(self) -> int:
        """Items handed on (or dropped) past the resume point."""
        return self.consumed - sum(ahead() for ahead in self.lookahead)

    def tally(self, start: int) -> Tally:
        """A counter for the next counting stage, starting at ``start``."""
        tally = Tally(start)
        self.tallies.append((tally, len(self.lookahead)))
        return tally

    def tally_positions(self) -> tuple[int, ...]:
        """Each counting stage's count, less the items a later stage holds ahead."""
        return tuple(
            tally.count - sum(ahead() for ahead in self.lookahead[first:])
            for tally, first in self.tallies
        )


@dataclass(frozen=True, kw_only=True)
class Position:
    """A saved position: resume epoch ``epoch`` after ``consumed`` items (``done``: the
    epoch had ended, nothing of it is left) of stream (``rank``, ``worker``); ``space``:
    the positions of the epoch's sample sequence left to it by an elastic resume (None:
    all of them, see :mod:`shardkit.pipeline._elastic`); ``dataset``: the fingerprint of
    the pipeline it belongs to (:func:`fingerprint`; None: a state saved before states
    named their pipeline)."""

    epoch: int
    consumed: int
    done: bool
    seed: int
    world: int
    workers: int
    tallies: tuple[int, ...] | None = ()  # None: a state from before stage counts
    rank: int | None = None  # None: a state from before elastic resume
    worker: int | None = None
    space: Intervals | None = None
    dataset: str | None = None

    @classmethod
    def of_stream(
        cls,
        ctx: Context,
        *,
        epoch: int,
        consumed: int,
        done: bool,
        tallies: tuple[int, ...] = (),
        space: Intervals | None = None,
        dataset: str | None = None,
    ) -> Position:
        """The position of stream ``ctx`` (its seed and topology) at this point."""
        return cls(
            epoch=epoch,
            consumed=consumed,
            done=done,
            seed=ctx.seed,
            world=ctx.world,
            workers=ctx.workers,
            tallies=tallies,
            rank=ctx.rank,
            worker=ctx.worker,
            space=space,
            dataset=dataset,
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "consumed": self.consumed,
            "done": self.done,
            "seed": self.seed,
            "world": self.world,
            "workers": self.workers,
            "tallies": list(self.tallies or ()),
            "rank": self.rank,
            "worker": self.worker,
        }
        if self.space is not None:
            out["space"] = [list(pair) for pair in self.space]
        if self.dataset is not None:
            out["dataset"] = self.dataset
        return out

    def check(self, ctx: Context) -> None:
        """Refuse to resume into a differently split or seeded iteration."""
        saved = (self.seed, self.world, self.workers)
        now = (ctx.seed, ctx.world, ctx.workers)
        if saved != now:
            hint = (
                "; with DataLoader workers, save and load the state of shardkit.Loader or "
                "torchdata's StatefulDataLoader (one state per worker); to resume on another "
                "topology, load the states of all saved ranks and workers as one list"
            )
            raise StateError(
                "cannot resume: the state was saved with (seed, world size, workers) = "
                f"{saved}, this iteration has {now}; the saved position would mean other "
                f"samples{hint}"
            )

    def check_belongs(self, dataset: str, total: int | None) -> None:
        """Refuse a state of another pipeline, or whose elastic space lies outside the
        ``total`` samples of this epoch's sequence (None: unknown)."""
        if self.dataset is not None and self.dataset != dataset:
            raise StateError(
                f"cannot resume: the state belongs to another dataset or pipeline "
                f"(fingerprint {self.dataset}, this one {dataset}: the shard names, their "
                "counts, the stages or a mix's sources and weights differ)"
            )
        if self.space and total is not None and self.space[-1][1] > total:
            raise StateError(
                f"cannot resume: the state's positions reach {self.space[-1][1]}, past the "
                f"{total} samples of the epoch"
            )

    def check_consumed(self, bound: int | None) -> None:
        """Refuse a position past the end of its stream (``bound`` items; None: unknown)."""
        if bound is not None and self.consumed > bound:
            raise StateError(
                f"cannot resume: the state says {self.consumed} items of stream (rank "
                f"{self.rank}, worker {self.worker}) were consumed, past the {bound} its "
                "epoch holds"
            )


# Bound of every number in a state: a position past it is tampering, not a real run.
_MAX = 2**62
_SEEDS = 2**64
_FIELDS = ("epoch", "consumed", "seed", "world", "workers")


def check_state(state: object) -> Position:
    """Validate a dict from ``state_dict()`` whole (types, ranges, internal consistency);
    :class:`StateError` in one line for anything else. What needs the data (the
    fingerprint, counts within the epoch) is checked when the state is used
    (:meth:`Position.check_belongs`, :meth:`Position.check_consumed`)."""
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        raise StateError(f"not a shardkit Dataset state (version {STATE_VERSION}): {_show(state)}")
    epoch, consumed, seed, world, workers = (
        _integer(state, key, *((-_SEEDS, _SEEDS) if key == "seed" else (0, _MAX)))
        for key in _FIELDS
    )
    done = state.get("done")
    if not isinstance(done, bool):
        raise StateError(f"malformed Dataset state: done must be true or false, not {_show(done)}")
    saved = state.get("tallies")
    tallies = None if saved is None else tuple(_integers(saved, "tallies", 0))
    rank, worker = (
        None if state.get(k) is None else _integer(state, k, 0) for k in ("rank", "worker")
    )
    space = state.get("space")
    if space is not None:
        flat = list(_integers(space, "space", 0, pairs=True))
        space = tuple(zip(flat[::2], flat[1::2], strict=True))
        ends = [n for pair in space for n in pair]
        if not space or any(b <= a for a, b in itertools.pairwise(ends)):
            raise StateError(
                "malformed Dataset state: space must be sorted, non-empty, disjoint "
                f"[start, stop) ranges, not {_show(state.get('space'))}"
            )
    dataset = state.get("dataset")
    if dataset is not None and not (isinstance(dataset, str) and 0 < len(dataset) <= 64):
        raise StateError(f"malformed Dataset state: dataset {_show(dataset)}")
    if world < 1 or workers < 1 or not 0 <= (rank or 0) < world or not 0 <= (worker or 0) < workers:
        raise StateError(
            f"malformed Dataset state: stream (rank {rank}, worker {worker}) of {world} ranks "
            f"x {workers} workers"
        )
    return Position(
        epoch=epoch,
        consumed=consumed,
        done=done,
        seed=seed,
        world=world,
        workers=workers,
        tallies=tallies,
        rank=rank,
        worker=worker,
        space=space,
        dataset=dataset,
    )


def check_states(states: Sequence[object]) -> tuple[Position, ...]:
    """Validate the states of several streams (an elastic or multi-worker resume) as one:
    each whole, all of one run (epoch, seed, topology, pipeline, space), each stream once."""
    if not states:
        raise StateError("load_state_dict() got an empty list of states")
    if len(states) > _MAX_STREAMS:
        raise StateError(f"cannot resume: {len(states)} states, more than {_MAX_STREAMS} streams")
    positions = tuple(check_state(one) for one in states)
    runs = {(p.epoch, p.seed, p.world, p.workers, p.space, p.dataset) for p in positions}
    if len(runs) > 1:
        raise StateError(
            "cannot resume: the states come from different runs, epochs or pipelines "
            "(epoch, seed, world size, workers, elastic space or dataset differ)"
        )
    seen: set[tuple[int | None, int | None]] = set()
    for p in positions:
        stream = (p.rank, p.worker)
        if stream in seen:
            raise StateError(
                f"cannot resume: two states for one stream (rank {p.rank}, worker {p.worker})"
            )
        seen.add(stream)
    return positions


_MAX_STREAMS = 1 << 20


def check_loader_states(states: Sequence[object], version: int) -> tuple[int, list[Any]]:
    """Validate ``Loader`` states (one per rank): the envelope of each, one epoch for all;
    returns the epoch and every stream's state (checked whole by the dataset)."""
    epochs, streams = set(), []
    for one in states:
        if not isinstance(one, Mapping) or one.get("version") != version:
            raise StateError(f"not a shardkit Loader state (version {version}): {_show(one)}")
        epoch = _integer(one, "epoch", 0)
        epochs.add(epoch)
        saved = one.get("streams", [])
        if not isinstance(saved, (list, tuple)) or len(saved) > _MAX_STREAMS:
            raise StateError(f"malformed Loader state: streams {_show(saved)}")
        if any(not isinstance(p, Mapping) or p.get("epoch") != epoch for p in saved):
            raise StateError("malformed Loader state: a stream's state is of another epoch")
        streams += list(saved)
    if len(epochs) != 1:
        raise StateError(f"cannot resume: the states are of different epochs {sorted(epochs)}")
    return epochs.pop(), streams


def fingerprint(*parts: object) -> str:
    """A short digest naming what a state belongs to (see ``Recipe.identity``)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _integer(state: Mapping[str, Any], key: str, least: int, most: int = _MAX) -> int:
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value < most:
        raise StateError(
            f"malformed Dataset state: {key} must be an int in [{least}, {most}), not "
            f"{_show(value)}"
        )
    return value


def _integers(values: object, key: str, least: int, pairs: bool = False) -> Iterator[int]:
    if not isinstance(values, (list, tuple)) or len(values) > _MAX_STREAMS:
        raise StateError(f"malformed Dataset state: {key} must be a list, not {_show(values)}")
    for value in values:
        if pairs:
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise StateError(f"malformed Dataset state: {key} holds {_show(value)}")
            yield from (_integer({key: n}, key, least) for n in value)
        else:
            yield _integer({key: value}, key, least)


def _show(value: object) -> str:
    """A bounded repr for error lines."""
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def counted(items: Iterator[Any], progress: Progress) -> Iterator[Any]:
    """Pass items through, counting them into ``progress``."""
    for item in items:
        progress.consumed += 1
        yield item


def finished(items: Iterator[Any], progress: Progress) -> Iterator[Any]:
    """Pass items through and mark ``progress`` done when they run out."""
    yield from items
    progress.done = True
