"""A pipeline's recipe, and building its chain of iterators for one stream and epoch.

The chain is ``epoch plan -> raw samples -> stages``, with the resume point (see
:mod:`shardkit.pipeline.state`) after the last stage that holds items back.

``with_epoch(n)`` is a :class:`~shardkit.pipeline.counting.Take` stage where it was
called: the source then reads the shards pass after pass (each pass reshuffled) and the
epoch ends after n items *at that position* (samples before ``.batched()``, batches
after), as in webdataset. ``repeat(k)`` reads the shards k times per epoch.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError
from . import elastic, epochs
from .context import Context
from .counting import Counting, Slice, Take, Unbatched
from .source import ReadOptions, stream_samples
from .stages import Batched, Select, Shuffle, Stage
from .state import Progress, counted, finished
from .urls import ShardList

__all__ = ["Equalize", "Recipe"]

logger = logging.getLogger(__name__)

Equalize = Literal["pad", "drop"]

# Stages after which the number of items is unknown in advance.
_UNCOUNTABLE = (Select, Slice, Unbatched)


@dataclass(frozen=True)
class Recipe:
    """What every iteration of a dataset is made of (all of it picklable).

    ``passes``: how often the source reads the shards per epoch (None: endlessly, as
    ``resampled=True``); ``length``: a ``with_length(n)`` override of ``len()``;
    ``empty_check``: a stream that yields no sample is an error (webdataset's check).
    """

    read: ReadOptions
    equalize: Equalize | None = None
    shuffle_shards: bool | None = None
    stages: tuple[Stage, ...] = ()
    passes: int | None = 1
    length_override: int | None = None
    empty_check: bool = False

    @property
    def take(self) -> Take | None:
        return next((s for s in self.stages if isinstance(s, Take)), None)

    def mode(self, shards: ShardList) -> epochs.SplitMode:
        endless = self.take is not None or self.passes is None
        return epochs.split_mode(shards, self.equalize, 1 if endless else None)

    def length(self, shards: ShardList, world: int) -> int:
        """Items a rank yields per epoch, over all its workers (see ``Dataset.__len__``)."""
        if self.length_override is not None:
            return self.length_override
        take = self.take
        if take is not None:
            count = take.n
            after = self.stages[self.stages.index(take) + 1 :]
        elif self.passes is None:
            raise TypeError("len() is unknown for an endless stream: add .with_epoch(n)")
        elif self.mode(shards) == "shards":
            raise TypeError(
                "len() is unknown without per-shard sample counts: read a manifest.json "
                "(or a folder holding one), fix the epoch size with .with_epoch(n), "
                "or state it with .with_length(n)"
            )
        else:
            mode = self.mode(shards)
            count = epochs.rank_samples(shards.total or 0, world, mode) * self.passes
            after = self.stages
        batched = False
        for stage in after:
            if isinstance(stage, _UNCOUNTABLE):
                name = type(stage).__name__.lower()
                raise TypeError(
                    f"len() is unknown after .{name}(): it changes the number of items "
                    "by an unknown amount (state it with .with_length(n))"
                )
            if isinstance(stage, Batched):
                if batched:
                    raise TypeError("len() is unknown with more than one .batched() stage")
                batched = True
                count = -(-count // stage.size) if stage.partial else count // stage.size
        return count

    def granularity(self, stages: tuple[Stage, ...]) -> int:
        """The first batch size in ``stages``, if nothing before it changes the number of
        items: workers then split epochs in whole batches, so a rank's batch count does
        not depend on workers."""
        for stage in stages:
            if isinstance(stage, (*_UNCOUNTABLE, Take)):
                return 1
            if isinstance(stage, Batched):
                return stage.size
        return 1

    def cut(self, stages: tuple[Stage, ...]) -> int:
        """The index of the resume point: after the last stage that holds items back."""
        return max((i + 1 for i, s in enumerate(stages) if s.reorders), default=0)

    def elastic_refusal(self, shards: ShardList) -> str:
        """Why a state of this pipeline cannot resume on another topology ('' if it can)."""
        stages = self.stages
        cut = self.cut(stages)
        counting = any(isinstance(s, Counting) for s in stages[cut:])
        return elastic.refusal(self.mode(shards), self.passes, cut, counting, self.read.handler)

    def _stages_for_build(self) -> tuple[Stage, ...]:
        stages = list(self.stages)
        for i, stage in enumerate(stages):
            if isinstance(stage, Take):
                granularity = self.granularity(self.stages[i + 1 :])
                stages[i] = dataclasses.replace(stage, granularity=granularity)
        return tuple(stages)

    def build(
        self,
        shards: ShardList,
        ctx: Context,
        progress: Progress,
        tallies: tuple[int, ...] | None = (),
    ) -> Iterator[Any]:
        """The items of stream ``ctx``, less the ``progress.consumed`` already handed out;
        ``tallies``: the saved counts of the counting stages after the resume point."""
        mode = self.mode(shards)
        stages = self._stages_for_build()
        shuffle = self.shuffle_shards
        if shuffle is None:
            shuffle = any(isinstance(stage, Shuffle) for stage in stages)
        if mode == "shards" and ctx.world > 1:
            logger.warning(
                "no per-shard sample counts: ranks may get different numbers of samples and "
                "DDP can hang at the end of an epoch; read a manifest, or use .with_epoch(n)"
            )
        granularity = self.granularity(stages)

        def plan_for(pass_index: int) -> epochs.EpochPlan:
            return epochs.plan_stream(
                shards,
                ctx,
                mode=mode,
                shuffle=bool(shuffle),
                granularity=granularity,
                pass_index=pass_index,
                space=progress.space if pass_index == 0 else None,
            )

        cut = self.cut(stages)
        skip = progress.consumed
        watch = _Watch(stages) if mode == "cycle" and self.take is not None else None
        items: Iterator[Any] = stream_samples(
            shards, plan_for, self.read, 0 if cut else skip, self.passes, watch
        )
        if self.empty_check and not skip:
            items = _check_not_empty(items, ctx)
        for stage in stages[:cut]:
            items = stage(items if watch is None else watch.feed(stage, items), ctx)
        if cut and skip:
            items = (
                itertools.islice(items, skip, None) if watch is None else watch.skip(items, skip)
            )
        items = counted(items, progress)
        later = [s for s in stages[cut:] if isinstance(s, Counting)]
        if tallies is None and later and skip:
            raise ConfigError(
                "cannot resume: the state has no stage counts (saved by an older shardkit) "
                "and this pipeline counts items after its last shuffle (with_epoch, slice)"
            )
        if tallies and len(tallies) != len(later):
            raise ConfigError(
                f"cannot resume: the state holds {len(tallies)} stage counts, this pipeline "
                f"has {len(later)} counting stages (with_epoch, slice) after its last shuffle"
            )
        saved = iter(tallies or ())
        for stage in stages[cut:]:
            if watch is not None:
                items = watch.feed(stage, items)
            if isinstance(stage, Counting):
                items = stage.run(items, ctx, progress.tally(next(saved, 0)))
            else:
                items = stage(items, ctx)
            lookahead = getattr(items, "lookahead", None)
            if lookahead is not None:
                progress.lookahead.append(lookahead)
        return finished(items, progress)


def _check_not_empty(items: Iterator[Any], ctx: Context) -> Iterator[Any]:
    count = 0
    for item in items:
        count += 1
        yield item
    if not count:
        raise ConfigError(
            f"no samples in the stream of rank {ctx.rank} worker {ctx.worker} "
            f"({ctx.workers} workers): fewer shards than streams? "
            "(empty_check=False turns this check off)"
        )


class _Watch:
    """Ends a ``with_epoch`` stream that cannot fill its epoch: a whole pass over the
    shards in which no item reached the ``with_epoch`` stage (``.select()`` dropping
    everything, a handler skipping every sample), once more items were read than the
    buffers before it can hold, means no pass ever will. The source asks
    :meth:`stalled` at the end of each pass."""

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        before = stages[: next(i for i, s in enumerate(stages) if isinstance(s, Take))]
        self.capacity = sum(s.size for s in before if isinstance(s, (Shuffle, Batched)))
        self.arrived = 0
        self.read = 0  # samples read in the passes since the last one with an arrival
        self._mark = 0

    def feed(self, stage: Stage, items: Iterator[Any]) -> Iterator[Any]:
        """``items`` on their way into ``stage``, counted if it is the ``with_epoch`` one."""
        return self._arrivals(items) if isinstance(stage, Take) else items

    def skip(self, items: Iterator[Any], n: int) -> Iterator[Any]:
        """Drop the first ``n`` items (a resumed epoch), counting them as arrivals: they
        reached the ``with_epoch`` stage before the state was saved."""
        for item in items:
            if n:
                n -= 1
                self.arrived += 1
                continue
            yield item

    def _arrivals(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self.arrived += 1
            yield item

    def stalled(self, produced: int) -> bool:
        """Whether to end the epoch after a whole pass that yielded ``produced`` samples."""
        self.read = self.read + produced if self.arrived == self._mark else produced
        stalled = self.arrived == self._mark and self.read > self.capacity
        self._mark = self.arrived
        if stalled:
            logger.warning(
                "with_epoch(): a whole pass over the shards brought no item to the "
                "with_epoch stage (does .select() or the handler drop everything?): the "
                "epoch ends early"
            )
        return stalled
