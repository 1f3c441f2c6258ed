"""A pipeline's recipe, and building its chain of iterators for one stream and epoch.

The chain is ``epoch plan -> raw samples -> stages``, with the resume point (see
:mod:`shardkit.pipeline.state`) after the last stage that holds items back.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from . import epochs
from .context import Context
from .source import ReadOptions, stream_samples
from .stages import Batched, Select, Shuffle, Stage, Unbatched
from .state import Progress, counted, finished
from .urls import ShardList

__all__ = ["Equalize", "Recipe"]

logger = logging.getLogger(__name__)

Equalize = Literal["pad", "drop"]


@dataclass(frozen=True)
class Recipe:
    """What every iteration of a dataset is made of (all of it picklable)."""

    read: ReadOptions
    equalize: Equalize | None = None
    shuffle_shards: bool | None = None
    epoch_size: int | None = None
    stages: tuple[Stage, ...] = ()

    def mode(self, shards: ShardList) -> epochs.SplitMode:
        return epochs.split_mode(shards, self.equalize, self.epoch_size)

    def length(self, shards: ShardList, world: int) -> int:
        """Items a rank yields per epoch, over all its workers (see ``Dataset.__len__``)."""
        count = self.rank_samples(shards, world)
        batched = False
        for stage in self.stages:
            if isinstance(stage, Select):
                raise TypeError("len() is unknown after .select(): it drops an unknown number")
            if isinstance(stage, Unbatched):
                raise TypeError("len() is unknown after .unbatched()")
            if isinstance(stage, Batched):
                if batched:
                    raise TypeError("len() is unknown with more than one .batched() stage")
                batched = True
                count = -(-count // stage.size) if stage.partial else count // stage.size
        return count

    def rank_samples(self, shards: ShardList, world: int) -> int:
        """Samples (before the stages) a rank reads per epoch; TypeError if unknown."""
        mode = self.mode(shards)
        if mode == "shards":
            raise TypeError(
                "len() is unknown without per-shard sample counts: read a manifest.json "
                "(or a folder holding one), or fix the epoch size with .with_epoch(n)"
            )
        return self.epoch_size or epochs.rank_samples(shards.total or 0, world, mode)

    def granularity(self) -> int:
        """The first batch size, if nothing before it drops items: workers then split
        epochs in whole batches, so a rank's batch count does not depend on workers."""
        for stage in self.stages:
            if isinstance(stage, (Select, Unbatched)):
                return 1
            if isinstance(stage, Batched):
                return stage.size
        return 1

    def shuffles_shards(self) -> bool:
        """Whether the shard order is reshuffled each epoch."""
        if self.shuffle_shards is None:
            return any(isinstance(stage, Shuffle) for stage in self.stages)
        return self.shuffle_shards

    def plan(self, shards: ShardList, ctx: Context, pass_index: int = 0) -> epochs.EpochPlan:
        """What stream ``ctx`` reads in its epoch (or pass, for ``with_epoch``)."""
        return epochs.plan_stream(
            shards,
            ctx,
            mode=self.mode(shards),
            shuffle=self.shuffles_shards(),
            granularity=self.granularity(),
            epoch_size=self.epoch_size,
            pass_index=pass_index,
        )

    def samples(self, shards: ShardList, ctx: Context, skip: int) -> Iterator[Any]:
        """The raw samples of stream ``ctx``, less the first ``skip``."""
        if self.mode(shards) == "shards" and ctx.world > 1:
            logger.warning(
                "no per-shard sample counts: ranks may get different numbers of samples and "
                "DDP can hang at the end of an epoch; read a manifest, or use .with_epoch(n)"
            )
        return stream_samples(
            shards, lambda pass_index: self.plan(shards, ctx, pass_index), self.read, skip
        )

    def build(self, shards: ShardList, ctx: Context, progress: Progress) -> Iterator[Any]:
        """The items of stream ``ctx``, less the ``progress.consumed`` already handed out."""
        cut = max((i + 1 for i, s in enumerate(self.stages) if s.reorders), default=0)
        skip = progress.consumed
        items: Iterator[Any] = self.samples(shards, ctx, 0 if cut else skip)
        for stage in self.stages[:cut]:
            items = stage(items, ctx)
        if cut and skip:
            items = itertools.islice(items, skip, None)
        items = counted(items, progress)
        for stage in self.stages[cut:]:
            items = stage(items, ctx)
            lookahead = getattr(items, "lookahead", None)
            if lookahead is not None:
                progress.lookahead.append(lookahead)
        return finished(items, progress)
