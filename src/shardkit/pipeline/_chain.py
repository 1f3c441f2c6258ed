"""A pipeline's recipe, and building its chain of iterators for one stream and epoch.

The chain is ``epoch plan -> raw samples -> stages``, with the resume point (see
:mod:`shardkit.pipeline._state`) after the last stage that holds items back.

``with_epoch(n)`` is a :class:`~shardkit.pipeline._counting.Take` stage where it was
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
from ..handlers import reraise
from . import _elastic as elastic
from . import _epochs as epochs
from ._context import Context
from ._counting import Counting, Slice, Take, Unbatched
from ._decode import Decode
from ._idxfiles import IndexCache
from ._source import ReadOptions, stream_samples
from ._stages import Batched, FieldStage, Select, Shuffle, Stage, Withheld
from ._state import Progress, ReadsAhead, counted, finished
from ._urls import ShardList

__all__ = ["Equalize", "Recipe", "stage_shape"]

logger = logging.getLogger(__name__)

Equalize = Literal["pad", "drop"]

# Stages after which the number of items is unknown in advance.
_UNCOUNTABLE = (Select, Slice, Unbatched)
# Stages after which a sample still has the fields the reader gave it.
_KEEPS_FIELDS = (Decode, Select, Shuffle, Slice, Take)


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

    def index_caches(self) -> list[IndexCache]:
        """The index caches the reading uses (a mix: its sources'), in a fixed order: a
        Loader's worker and its parent find the same one at the same place."""
        return [self.read.indexes]

    @property
    def take(self) -> Take | None:
        return next((s for s in self.stages if isinstance(s, Take)), None)

    def mode(self, shards: ShardList) -> epochs.SplitMode:
        endless = self.take is not None or self.passes is None
        return epochs.split_mode(shards, self.equalize, 1 if endless else None)

    def length(self, shards: ShardList, world: int, rank: int = 0) -> int:
        """Items rank ``rank`` yields per epoch, over all its workers (see
        ``Dataset.__len__``)."""
        if self.length_override is not None:
            return self.length_override
        take = self.take
        if take is not None:
            count = take.n
            after = self.stages[self.stages.index(take) + 1 :]
        elif self.passes is None:
            raise TypeError("len() is unknown for an endless stream: add .with_epoch(n)")
        else:
            count = self.rank_count(shards, rank, world)
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

    def rank_count(self, shards: ShardList, rank: int, world: int) -> int:
        """Samples rank ``rank`` reads per epoch (all passes), before any stage; the same
        on every rank but in the ``"exact"`` mode (packed items)."""
        return self.rank_samples(shards, world)

    def rank_samples(self, shards: ShardList, world: int) -> int:
        """Samples a rank reads per epoch (all passes), before any stage; TypeError if
        unknown."""
        mode = self.mode(shards)
        if mode == "shards":
            raise TypeError(
                "len() is unknown without per-shard sample counts: read a manifest.json "
                "(or a folder holding one), fix the epoch size with .with_epoch(n), "
                "or state it with .with_length(n)"
            )
        return epochs.rank_samples(shards.total or 0, world, mode) * (self.passes or 0)

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

    def identity(self, shards: ShardList) -> list[Any]:
        """What a resume state of this pipeline names (hashed by
        :func:`~shardkit.pipeline._state.fingerprint`): the shard names and counts, the
        split options and the shape of the stages. The seed is not in it: a state carries
        its seed and is refused for another one with its own message."""
        names = [url.rstrip("/").rsplit("/", 1)[-1] for url in shards.urls]
        return [
            "dataset",
            names,
            None if shards.counts is None else list(shards.counts),
            self.equalize,
            self.shuffle_shards,
            self.passes,
            [stage_shape(stage) for stage in self.stages],
        ]

    def stream_bound(
        self, shards: ShardList, ctx: Context, space: epochs.Intervals | None
    ) -> int | None:
        """The most items stream ``ctx`` can pass its resume point in an epoch (None: not
        known in advance), to refuse a state that says it consumed more."""
        if self.mode(shards) not in ("pad", "drop") or self.passes is None:
            return None
        if self._grows_before_cut():
            return None
        target = self.plan(shards, ctx, self.stages, 0, space).target
        return None if target is None else target * self.passes

    def _grows_before_cut(self) -> bool:
        """Whether a stage before the resume point may turn one item into several."""
        return any(isinstance(s, Unbatched) for s in self.stages[: self.cut(self.stages)])

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

    def plan(
        self,
        shards: ShardList,
        ctx: Context,
        stages: tuple[Stage, ...],
        pass_index: int = 0,
        space: epochs.Intervals | None = None,
    ) -> epochs.EpochPlan:
        """What stream ``ctx`` reads in pass ``pass_index`` of its epoch (``space``: the
        rest of an elastically resumed epoch, see :mod:`shardkit.pipeline._elastic`)."""
        shuffle = self.shuffle_shards
        if shuffle is None:
            shuffle = any(isinstance(stage, Shuffle) for stage in stages)
        return epochs.plan_stream(
            shards,
            ctx,
            mode=self.mode(shards),
            shuffle=bool(shuffle),
            granularity=self.granularity(stages),
            pass_index=pass_index,
            space=space,
        )

    def samples(self, shards: ShardList, ctx: Context, want: Reading) -> Iterator[Any]:
        """The raw items of stream ``ctx`` (before ``want.stages``), less the first
        ``want.skip``; ``want.withheld`` wraps the read handler (see :meth:`build`)."""
        stages, progress, withheld = want.stages, want.progress, want.withheld
        if self.mode(shards) == "shards" and ctx.world > 1:
            logger.warning(
                "no per-shard sample counts: ranks may get different numbers of samples and "
                "DDP can hang at the end of an epoch; read a manifest, or use .with_epoch(n)"
            )

        def plan_for(pass_index: int) -> epochs.EpochPlan:
            space = progress.space if pass_index == 0 else None
            return self.plan(shards, ctx, stages, pass_index, space)

        read = self.read if withheld is None else dataclasses.replace(self.read, handler=withheld)
        return stream_samples(shards, plan_for, read, want.skip, self.passes, want.watch)

    def build(
        self,
        shards: ShardList,
        ctx: Context,
        progress: Progress,
        tallies: tuple[int, ...] | None = (),
    ) -> Iterator[Any]:
        """The items of stream ``ctx``, less the ``progress.consumed`` already handed out;
        ``tallies``: the saved counts of the counting stages after the resume point.

        Under a handler that does not raise, the samples the reader withholds (cut inside
        one of their own members) are recorded (:class:`~.stages.Withheld`) for the
        ``to_tuple`` / ``rename`` stages that no renaming stage precedes: their check of
        fields no sample has counts those samples' whole fields (see
        :mod:`shardkit.pipeline._stages`)."""
        stages = self._stages_for_build()
        cut = self.cut(stages)
        skip = progress.consumed
        watch = None
        if self.take is not None and self.mode(shards) == "cycle":
            watch = _Watch(stages)
        withheld = None if self.read.handler is reraise else Withheld(self.read.handler)
        direct = _direct_field_stages(stages) if withheld is not None else set()
        want = Reading(0 if cut else skip, stages, progress, watch, withheld)
        items = self.samples(shards, ctx, want)
        if self.empty_check and not skip:
            items = _check_not_empty(items, ctx)
        for index, stage in enumerate(stages[:cut]):
            items = items if watch is None else watch.feed(stage, items)
            items = _apply(stage, items, ctx, withheld if index in direct else None)
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
        for index, stage in enumerate(stages[cut:], cut):
            if watch is not None:
                items = watch.feed(stage, items)
            if isinstance(stage, Counting):
                items = stage.run(items, ctx, progress.tally(next(saved, 0)))
            else:
                items = _apply(stage, items, ctx, withheld if index in direct else None)
            if isinstance(items, ReadsAhead):
                progress.lookahead.append(items.lookahead)
        return finished(items, progress)


def _apply(stage: Stage, items: Iterator[Any], ctx: Context, withheld: Withheld | None) -> Any:
    """``stage`` over ``items``; a field stage given ``withheld`` counts those samples."""
    if withheld is not None and isinstance(stage, FieldStage):
        return stage.run(items, ctx, withheld)
    return stage(items, ctx)


def _direct_field_stages(stages: tuple[Stage, ...]) -> set[int]:
    """The positions of the ``to_tuple`` / ``rename`` stages whose samples have the
    fields the reader gave them (only stages that keep fields come before them)."""
    direct = set()
    for index, stage in enumerate(stages):
        if isinstance(stage, FieldStage):
            direct.add(index)
        if not isinstance(stage, _KEEPS_FIELDS):
            break
    return direct


def stage_shape(stage: Stage) -> list[Any]:
    """A stage's class and the plain parameters that decide which items pass where
    (buffer sizes, counts, salts), not functions, handlers or thread counts."""
    shape: list[Any] = [type(stage).__name__]
    if dataclasses.is_dataclass(stage):
        for f in dataclasses.fields(stage):
            value = getattr(stage, f.name)
            if f.name not in ("threads", "granularity") and (
                value is None or isinstance(value, (bool, int, str))
            ):
                shape.append([f.name, value])
    return shape


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


@dataclass(frozen=True)
class Reading:
    """What :meth:`Recipe.samples` is asked for, by :meth:`Recipe.build`: a stream's raw
    items past the first ``skip``, read for ``stages`` under ``progress``; ``watch``
    follows a cycling epoch's stages, ``withheld`` wraps the read handler."""

    skip: int
    stages: tuple[Stage, ...]
    progress: Progress
    watch: _Watch | None = None
    withheld: Withheld | None = None


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
