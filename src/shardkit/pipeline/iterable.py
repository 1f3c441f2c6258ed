"""``shardkit.from_iterable``: the pipeline's stages over any iterable, such as a
DataLoader, in the process that iterates it.

>>> loader = DataLoader(ds.batched(16), batch_size=None, num_workers=8, collate_fn=as_is)
>>> for images, labels in from_iterable(loader).unbatched().shuffle(2000).batched(64):
...     ...

Workers make small batches (cheap to pass between processes); the main process takes them
apart, shuffles across workers' output and batches again: webdataset's
``WebLoader(...).unbatched().shuffle(n).batched(b)``. The result is a
:class:`~shardkit.pipeline.dataset.Dataset`, so every stage and its seeding from
``(seed, epoch, rank)`` apply; each iteration iterates ``iterable`` once more and starts
the next epoch. ``collate_fn=as_is`` keeps each batch as the workers made it: by default a
DataLoader turns a batch's tuple of columns into a list, which ``.unbatched()`` would take
for a list of items. ``len()`` is unknown unless ``.with_epoch(n)`` fixes the epoch (n items
at its position, iterating ``iterable`` again as often as needed). ``state_dict()`` counts
items as for a dataset, but resuming replays ``iterable`` from its start: only an
iterable that repeats itself (a DataLoader over a seeded dataset at the same epoch)
resumes exactly.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from .chain import Recipe
from .context import Context
from .dataset import Dataset
from .stages import Stage
from .urls import ShardList

__all__ = ["FromIterable", "as_is", "from_iterable"]


def as_is(item: Any) -> Any:
    """``item`` unchanged: a DataLoader ``collate_fn`` that keeps batches as they are."""
    return item


def from_iterable(iterable: Iterable[Any], *, seed: int = 0) -> FromIterable:
    """A dataset whose items are those of ``iterable`` (see the module docs)."""
    if not isinstance(iterable, Iterable) or isinstance(iterable, (str, bytes)):
        raise TypeError(f"from_iterable() takes an iterable, not {type(iterable).__name__}")
    return FromIterable(iterable, seed=seed)


@dataclasses.dataclass(frozen=True)
class IterableRecipe(Recipe):
    """A recipe whose raw items come from an iterable instead of shards."""

    iterable: Any = None

    def rank_samples(self, shards: ShardList, world: int) -> int:
        raise TypeError("len() of from_iterable() is unknown: add .with_epoch(n)")

    def samples(
        self, shards: ShardList, ctx: Context, skip: int, stages: tuple[Stage, ...]
    ) -> Iterator[Any]:
        # The iterable once per pass; endlessly under .with_epoch(n) or .repeat().
        endless = self.take is not None or self.passes is None
        passes = itertools.count() if endless else range(self.passes or 0)
        items = itertools.chain.from_iterable(iter(self.iterable) for _ in passes)
        return itertools.islice(items, skip, None)


class FromIterable(Dataset):
    """The dataset :func:`from_iterable` returns."""

    def __init__(self, iterable: Iterable[Any], *, seed: int = 0) -> None:
        super().__init__("iterable:", seed=seed)
        self._recipe = IterableRecipe(self._recipe.read, iterable=iterable)

    @property
    def shards(self) -> ShardList:
        """No shards: a stand-in list naming the iterable."""
        return ShardList((repr(self._iterable),))

    @property
    def _iterable(self) -> Any:
        recipe = self._recipe
        return recipe.iterable if isinstance(recipe, IterableRecipe) else None

    def __repr__(self) -> str:
        stages = "".join(f".{type(s).__name__.lower()}()" for s in self._recipe.stages)
        return f"from_iterable({self._iterable!r}, seed={self._seed}){stages}"
