"""``shardkit.from_iterable``: the pipeline's stages over any iterable, such as a
DataLoader, in the process that iterates it.

>>> loader = DataLoader(ds.batched(16), batch_size=None, num_workers=8)
>>> for images, labels in from_iterable(loader).unbatched().shuffle(2000).batched(64):
...     ...

Workers make small batches (cheap to pass between processes); the main process takes them
apart, shuffles across workers' output and batches again: webdataset's
``WebLoader(...).unbatched().shuffle(n).batched(b)``. The result is a
:class:`~shardkit.pipeline.dataset.Dataset`, so every stage and its seeding from
``(seed, epoch, rank)`` apply; each iteration iterates ``iterable`` once more and starts
the next epoch. ``len()`` is unknown unless ``.with_epoch(n)`` fixes the epoch (n items
per iteration, iterating ``iterable`` again as often as needed). ``state_dict()`` counts
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
from .urls import ShardList

__all__ = ["FromIterable", "from_iterable"]


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
        if self.epoch_size is None:
            raise TypeError("len() of from_iterable() is unknown without .with_epoch(n)")
        return self.epoch_size

    def samples(self, shards: ShardList, ctx: Context, skip: int) -> Iterator[Any]:
        if self.epoch_size is None:
            return itertools.islice(iter(self.iterable), skip, None)
        # with_epoch(n): n items, iterating the iterable again as often as needed
        again = itertools.chain.from_iterable(iter(self.iterable) for _ in itertools.count())
        return itertools.islice(again, skip, self.epoch_size)


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
