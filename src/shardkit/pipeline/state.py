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
:mod:`shardkit.pipeline.counting`) saves its own count too (``tallies``), so a restored
epoch ends exactly where the uninterrupted one would have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .context import Context
from .counting import Tally
from .epochs import Intervals

__all__ = ["STATE_VERSION", "Position", "Progress", "check_state", "counted", "finished"]

STATE_VERSION = 1


@dataclass
class Progress:
    """The live position of one iteration, updated as items pass the resume point.

    A stage after that point that works ahead (parallel decoding) registers a
    ``lookahead()`` callable: items it has pulled but not yet handed on are not consumed.
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


@dataclass(frozen=True)
class Position:
    """A saved position: resume epoch ``epoch`` after ``consumed`` items (``done``: the
    epoch had ended, nothing of it is left) of stream (``rank``, ``worker``); ``space``:
    the positions of the epoch's sample sequence left to it by an elastic resume (None:
    all of them, see :mod:`shardkit.pipeline.elastic`)."""

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
            raise ConfigError(
                "cannot resume: the state was saved with (seed, world size, workers) = "
                f"{saved}, this iteration has {now}; the saved position would mean other "
                f"samples{hint}"
            )


def check_state(state: Mapping[str, Any]) -> Position:
    """Validate a dict from ``state_dict()``."""
    if not isinstance(state, Mapping) or state.get("version") != STATE_VERSION:
        raise ConfigError(f"not a shardkit Dataset state (version {STATE_VERSION}): {state!r}")
    try:
        epoch, consumed, seed, world, workers = (
            int(state[k]) for k in ("epoch", "consumed", "seed", "world", "workers")
        )
        done = bool(state["done"])
        saved = state.get("tallies")
        tallies = None if saved is None else tuple(int(n) for n in saved)
        rank, worker = (None if state.get(k) is None else int(state[k]) for k in ("rank", "worker"))
        space = state.get("space")
        space = None if space is None else tuple((int(a), int(b)) for a, b in space)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"malformed Dataset state {dict(state)!r}: {exc}") from exc
    position = Position(epoch, consumed, done, seed, world, workers, tallies, rank, worker, space)
    numbers = (position.consumed, *(position.tallies or ()), *(n for p in space or () for n in p))
    bad = min(numbers) < 0 or any(a >= b for a, b in space or ())
    bad = bad or not 0 <= (rank or 0) < world or not 0 <= (worker or 0) < workers
    if bad or position.epoch < 0 or position.world < 1 or position.workers < 1:
        raise ConfigError(f"malformed Dataset state {dict(state)!r}")
    return position


def counted(items: Iterator[Any], progress: Progress) -> Iterator[Any]:
    """Pass items through, counting them into ``progress``."""
    for item in items:
        progress.consumed += 1
        yield item


def finished(items: Iterator[Any], progress: Progress) -> Iterator[Any]:
    """Pass items through and mark ``progress`` done when they run out."""
    yield from items
    progress.done = True
