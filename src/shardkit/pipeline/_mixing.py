"""``shardkit.mix``: several datasets read as one, drawn in proportion to weights.

>>> train = shardkit.mix([web, books, code], weights=[5, 3, 2], seed=0)
>>> train = train.shuffle(1000).decode("rgb8").to_tuple("jpg", "cls")

The mix is a :class:`~shardkit.pipeline._dataset.Dataset`: the same stages, splitting,
``len()``, ``set_epoch`` and ``state_dict()``. What an epoch is:

* Each rank yields exactly ``n`` items per epoch: the largest ``n`` for which no source is
  read more than once in expectation: ``floor(min(len_i / p_i))`` with ``len_i`` the
  source's samples per rank and ``p_i`` its share of the weights (times ``k`` after
  ``.repeat(k)``). So ``len()`` is exact, and every source needs per-shard counts (a
  manifest or ``.idx`` files), unless ``.with_epoch(n)`` ends the epoch instead: the mix
  above it is then endless, its first round of draws that epoch (exact proportions), then
  rounds of 1,000 (where stages before ``with_epoch`` change the number of items).
* The rank's ``n`` is split over its workers as a plain dataset's is; each stream takes
  exactly ``round(p_i * its share)`` items from source i (largest remainders), in a random
  order drawn from ``(seed, epoch, rank, worker)``. So the proportions hold exactly per
  epoch, and the order is a seeded shuffle of them.
* Each source is read as itself (its own seed, split and stages) for the epoch; a source
  that runs out before its quota (rounding, or ``with_epoch`` asking for more) is read
  again, in a new shard order, as often as needed.

The draws do not depend on the data, so a resumed epoch recomputes how many items each
source had given and resumes each source there, without reading what was skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

from ..errors import ConfigError
from ..handlers import Handler, HandlerName
from ._chain import Reading, Recipe, stage_shape
from ._context import Context
from ._counting import Counting, Take, Unbatched
from ._dataset import Dataset
from ._epochs import split_counts
from ._idxfiles import IndexCache
from ._stages import Batched, Select
from ._state import Progress
from ._urls import ShardList

__all__ = ["MixedDataset", "apportion", "mix"]

logger = logging.getLogger(__name__)

_END = object()
_ROUND = 1000  # draws per round of an endless mix (exact proportions per round)
_CHANGES_COUNT = (Batched, Select, Counting, Unbatched)


def mix(
    datasets: Sequence[Dataset],
    weights: Sequence[float] | None = None,
    *,
    seed: int = 0,
    node: tuple[int, int] | None = None,
    handler: HandlerName | Handler = "raise",
) -> MixedDataset:
    """One dataset drawing from ``datasets`` in proportion to ``weights`` (default:
    equal); see the module docs for what an epoch is. ``seed`` drives the draws (each
    source keeps its own seed); ``node`` and ``handler`` are as for ``Dataset``."""
    sources = tuple(datasets) if isinstance(datasets, Sequence) else ()
    if not sources or not all(isinstance(d, Dataset) for d in sources):
        raise TypeError(f"mix() takes a non-empty list of shardkit.Dataset, not {datasets!r}")
    if weights is None:
        weights = [1] * len(sources)
    if isinstance(weights, (str, bytes)) or len(weights) != len(sources):
        raise ConfigError(f"mix() needs one weight per dataset ({len(sources)}), not {weights!r}")
    for weight in weights:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigError(f"mix() weights are numbers, not {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise ConfigError(f"mix() weights must be finite and > 0, not {weight!r}")
    for source in sources:
        for stage in source._recipe.stages:
            if isinstance(stage, _CHANGES_COUNT):
                name = "with_epoch" if type(stage).__name__ == "Take" else type(stage).__name__
                raise ConfigError(
                    f"a mixed dataset may not .{name.lower()}() on its own: apply it to the mix"
                )
        if source._recipe.passes != 1:
            raise ConfigError("a mixed dataset may not .repeat() on its own: apply it to the mix")
    return MixedDataset(sources, tuple(Fraction(w) for w in weights), seed, node, handler)


def apportion(total: int, weights: Sequence[Fraction]) -> list[int]:
    """Split ``total`` in proportion to ``weights``, largest remainders first (ties: the
    first source), so the parts sum to ``total``."""
    whole = sum(weights)
    shares = [total * w / whole for w in weights]
    parts = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(shares[i] - parts[i]), i))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


@dataclasses.dataclass(frozen=True)
class MixRecipe(Recipe):
    """A recipe whose raw items are drawn from other datasets instead of read."""

    sources: tuple[Dataset, ...] = ()
    weights: tuple[Fraction, ...] = ()

    def rank_samples(self, shards: ShardList, world: int) -> int:
        whole = sum(self.weights)
        lengths = []
        for source in self.sources:
            try:
                lengths.append(source._recipe.rank_samples(source.shards, world))
            except TypeError:
                raise TypeError(
                    f"the epoch of a mix is unknown: {source!r} has no per-shard sample "
                    "counts (a manifest or .idx files); or end it with .with_epoch(n)"
                ) from None
        n = min(math.floor(n * whole / w) for n, w in zip(lengths, self.weights, strict=True))
        return n * (self.passes or 0)

    def index_caches(self) -> list[IndexCache]:
        return [cache for source in self.sources for cache in source._recipe.index_caches()]

    def identity(self, shards: ShardList) -> list[Any]:
        """A mix's state names its sources (each with its seed) and weights."""
        sources = [[s._recipe.identity(s.shards), s._seed] for s in self.sources]
        shapes = [stage_shape(stage) for stage in self.stages]
        return ["mix", [str(w) for w in self.weights], sources, self.passes, shapes]

    def stream_bound(self, shards: ShardList, ctx: Context, space: Any) -> int | None:
        if self.take is not None or self.passes is None or self._grows_before_cut():
            return None
        try:
            rank_total = self.rank_samples(shards, ctx.world)
        except TypeError:
            return None
        return split_counts(rank_total, ctx.workers, self.granularity(self.stages))[ctx.worker]

    def elastic_refusal(self, shards: ShardList) -> str:
        return "a mix resumes only on the ranks and workers it was saved with"

    def samples(self, shards: ShardList, ctx: Context, want: Reading) -> Iterator[Any]:
        # want.withheld: each source's own chain records what its reader withheld
        stages, skip = want.stages, want.skip
        rng = ctx.rng("mix")
        if self.take is not None or self.passes is None:
            first = _ROUND
            take = next((s for s in stages if isinstance(s, Take)), None)
            before = stages[: stages.index(take)] if take is not None else ()
            if take is not None and not any(isinstance(s, _CHANGES_COUNT) for s in before):
                first = take.share(ctx)  # the epoch is one round: exact proportions
            sizes = itertools.chain((first,), itertools.repeat(_ROUND))
            rounds = (_draws(apportion(size, self.weights), rng) for size in sizes)
            draws: Iterator[int] = itertools.chain.from_iterable(rounds)
        else:
            try:
                rank_total = self.rank_samples(shards, ctx.world)
            except TypeError as exc:
                raise ConfigError(str(exc)) from None
            target = split_counts(rank_total, ctx.workers, self.granularity(stages))[ctx.worker]
            draws = _draws(apportion(target, self.weights), rng)
        given = [0] * len(self.sources)
        for index in itertools.islice(draws, skip):
            given[index] += 1
        streams = [
            _source_items(source, ctx, done)
            for source, done in zip(self.sources, given, strict=True)
        ]
        for index in draws:
            item = next(streams[index], _END)
            if item is _END:
                logger.warning("%r has no samples for this stream: the epoch ends early", index)
                return
            yield item


def _draws(quotas: list[int], rng: Any) -> Iterator[int]:
    """Source indices: each ``i`` exactly ``quotas[i]`` times, in a uniformly random order."""
    left = list(quotas)
    total = sum(left)
    while total:
        pick = rng.randrange(total)
        index = 0
        while pick >= left[index]:
            pick -= left[index]
            index += 1
        left[index] -= 1
        total -= 1
        yield index


def _pass_seed(seed: int, pass_index: int) -> int:
    if not pass_index:
        return seed
    digest = hashlib.sha256(f"shardkit-mix-pass:{seed}:{pass_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _source_items(source: Dataset, ctx: Context, skip: int) -> Iterator[Any]:
    """Source ``source``'s items for stream ``ctx``, pass after pass, less the first
    ``skip``. Whole passes of known length are skipped without reading."""
    recipe, shards = source._recipe, source.shards
    for pass_index in itertools.count():
        pass_ctx = dataclasses.replace(ctx, seed=_pass_seed(source._seed, pass_index))
        length = None
        if recipe.mode(shards) != "shards":
            length = recipe.plan(shards, pass_ctx, recipe.stages).target
        if length is not None and skip >= length > 0:
            skip -= length
            continue
        produced = 0
        progress = Progress(ctx.epoch, 0)
        if length is not None:  # the source drops them itself, reading as little as it can
            progress.consumed, skip = skip, 0
        for item in recipe.build(shards, pass_ctx, progress):
            produced += 1
            if length is None and skip:
                skip -= 1
                continue
            yield item
        if produced == 0 and progress.consumed == 0:
            return  # nothing readable in this stream's part of the source


class MixedDataset(Dataset):
    """The dataset :func:`mix` returns (a :class:`Dataset`: same stages and options)."""

    def __init__(
        self,
        sources: tuple[Dataset, ...],
        weights: tuple[Fraction, ...],
        seed: int,
        node: tuple[int, int] | None,
        handler: HandlerName | Handler,
    ) -> None:
        super().__init__("mix:", seed=seed, node=node, handler=handler)
        self._recipe = MixRecipe(self._recipe.read, sources=sources, weights=weights)

    @property
    def shards(self) -> ShardList:
        """The shards of every source, in order."""
        if self._shards is None:
            lists = [source.shards for source in self._mix.sources]
            urls = tuple(url for shards in lists for url in shards.urls)
            counts = None
            if all(shards.counts is not None for shards in lists):
                counts = tuple(c for shards in lists for c in shards.counts or ())
            self._shards = ShardList(urls, counts)
        return self._shards

    @property
    def _mix(self) -> MixRecipe:
        recipe = self._recipe
        if not isinstance(recipe, MixRecipe):
            raise TypeError("not a mix")
        return recipe

    def __repr__(self) -> str:
        recipe = self._mix
        weights = ", ".join(str(w) for w in recipe.weights)
        stages = "".join(f".{type(s).__name__.lower()}()" for s in recipe.stages)
        return f"mix({list(recipe.sources)!r}, weights=[{weights}], seed={self._seed}){stages}"
