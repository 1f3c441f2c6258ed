"""``Dataset(...).pack(seq_len)``: documents packed into fixed-length token items.

An epoch's documents, shuffled by ``(seed, epoch)`` (or in their order with
``shuffle=False``), are laid back to back into one token stream of T tokens, cut every
``seq_len`` tokens: item i holds tokens ``[i * seq_len, (i + 1) * seq_len)``, and
``position_ids`` gives each token's position in its own document (0 at a document's
start, continuing into the next item). So an epoch is a sequence of
``ceil(T / seq_len)`` items (``floor`` with ``drop_last``: the one short item dropped),
fixed whatever the topology, and the sample reader's machinery splits, counts and
resumes it like any sequence of samples (:mod:`.epochs`'s ``"exact"`` mode: each rank
takes a balanced contiguous slice, ``floor(N / world)`` items or one more, nothing
repeated or left out). A position is the number of items handed out; elastic resume
merges those as it merges samples, so every token is read exactly once per epoch.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ._chain import Reading, Recipe
from ._context import Context
from ._epochs import SplitMode, drop_front, stream_ranges
from ._tokentable import TokenSource, TokenTable
from ._urls import ShardList

if TYPE_CHECKING:
    from ._dataset import Dataset

__all__ = ["CHUNK", "PackRecipe", "Packer", "packed"]

#: items made by one gather (each item a view of it)
CHUNK = 64


class Packer:
    """The items of a table's epochs (one epoch's order cached at a time)."""

    def __init__(self, table: TokenTable, seq_len: int, shuffle: bool) -> None:
        self.table = table
        self.seq_len = seq_len
        self.shuffle = shuffle
        self._epoch: tuple[int, int] | None = None
        self._order = np.arange(table.documents, dtype=np.int64)
        self._bounds = np.zeros(1, dtype=np.int64)
        self.dtype = id_dtype(table)
        longest = int(table.length.max()) if table.documents else 0
        self.positions = np.int32 if longest < 2**31 else np.int64
        self._count = np.arange(CHUNK * seq_len, dtype=self.positions)
        # byte views of the pools: slicing one and joining the slices is the fast gather
        self._source = np.dtype(table.pools[0].dtype) if table.pools else np.dtype("<u2")
        self._views = [pool.data.cast("B") for pool in table.pools]

    def epoch(self, seed: int, epoch: int) -> None:
        """Lay out the documents of ``epoch`` (seeded by ``seed``)."""
        if self._epoch == (seed, epoch):
            return
        table = self.table
        if self.shuffle:
            rng = np.random.default_rng([seed & (2**63 - 1), epoch, 0x7061636B])
            self._order = rng.permutation(table.documents).astype(np.int64)
        bounds = np.zeros(table.documents + 1, dtype=np.int64)
        np.cumsum(table.length[self._order], out=bounds[1:])
        self._bounds = bounds
        self._epoch = (seed, epoch)

    def items(self, first: int, stop: int) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
        """Items ``[first, stop)`` of the epoch laid out last, made :data:`CHUNK` at a time
        (one gather each; the items are views of it)."""
        n = self.seq_len
        for at in range(first, stop, CHUNK):
            upto = min(stop, at + CHUNK)
            ids, positions = self._tokens(at * n, min(upto * n, int(self._bounds[-1])))
            for k in range(upto - at):
                window = slice(k * n, (k + 1) * n)
                yield {"input_ids": ids[window], "position_ids": positions[window]}

    def _tokens(self, a: int, b: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Tokens ``[a, b)`` of the epoch's stream and each one's position in its document."""
        bounds, table = self._bounds, self.table
        first = int(np.searchsorted(bounds, a, side="right")) - 1
        last = int(np.searchsorted(bounds, b, side="left"))
        span = np.arange(first, max(last, first + 1))
        docs = self._order[span]
        lo = np.maximum(bounds[span], a) - bounds[span]
        hi = np.minimum(bounds[span + 1], b) - bounds[span]
        size = self._source.itemsize
        first_byte = ((table.start[docs] + lo) * size).tolist()
        last_byte = ((table.start[docs] + hi) * size).tolist()
        views = self._views
        data = b"".join(
            [
                views[p][x:y]
                for p, x, y in zip(table.pool[docs].tolist(), first_byte, last_byte, strict=True)
            ]
        )
        ids = np.frombuffer(data, dtype=self._source).astype(self.dtype)
        lengths = hi - lo
        offsets = np.cumsum(lengths) - lengths
        positions = np.repeat((lo - offsets).astype(self.positions), lengths)
        positions += self._count[: b - a]
        return ids, positions


def id_dtype(table: TokenTable) -> type[np.signedinteger[Any]]:
    """``int32`` for the ``input_ids`` of every token dtype it holds, else ``int64``."""
    small = all(np.dtype(pool.dtype).kind in "ui" for pool in table.pools) and all(
        np.can_cast(pool.dtype, np.int32) for pool in table.pools
    )
    return np.int32 if small else np.int64


@dataclass(frozen=True)
class PackRecipe(Recipe):
    """A :class:`Recipe` whose samples are the packed items (see the module docs)."""

    tokens: TokenSource | None = None
    seq_len: int = 2048
    drop_last: bool = False
    shuffle_documents: bool = True

    def mode(self, shards: ShardList) -> SplitMode:
        return "exact"

    def rank_samples(self, shards: ShardList, world: int) -> int:
        """The fewest items a rank reads per epoch (a mix's share of this source)."""
        return (shards.total or 0) // world

    def rank_count(self, shards: ShardList, rank: int, world: int) -> int:
        """Items rank ``rank`` reads per epoch: ``floor(N / world)`` or one more."""
        return sum(b - a for a, b in stream_ranges(shards.total or 0, "exact", rank, world, 0, 1))

    def identity(self, shards: ShardList) -> list[Any]:
        source = self.tokens
        return [
            *super().identity(shards),
            ["pack", self.seq_len, self.drop_last, self.shuffle_documents],
            source.names() if source else [],
        ]

    def stream_bound(self, shards: ShardList, ctx: Context, space: Any) -> int | None:
        if self._grows_before_cut():
            return None
        return self.plan(shards, ctx, self.stages, 0, space).target

    def samples(self, shards: ShardList, ctx: Context, want: Reading) -> Iterator[Any]:
        # want.withheld: packed items are not the reader's samples, no field stage sees them
        if self.take is not None or self.passes != 1:
            raise ConfigError(
                "with_epoch() and repeat() do not apply to packed items: an epoch of "
                "pack() is every token once (call set_epoch for the next)"
            )
        plan = self.plan(shards, ctx, want.stages, 0, want.progress.space)
        segments, _ = drop_front(plan.segments, want.skip, shards.counts)
        return self._items(ctx, segments)

    def _items(self, ctx: Context, segments: Any) -> Iterator[Any]:
        if self.tokens is None:
            raise ConfigError("a packed dataset needs its tokens")
        packer = Packer(self.tokens.table, self.seq_len, self.shuffle_documents)
        packer.epoch(ctx.seed, ctx.epoch)
        for segment in segments:
            yield from packer.items(segment.skip, segment.skip + (segment.take or 0))


def packed(
    base: Dataset, seq_len: int, *, drop_last: bool = False, shuffle: bool = True
) -> Dataset:
    """``base``'s documents as packed items (what :meth:`Dataset.pack` returns)."""
    from ..formats.names import is_megatron

    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ConfigError(f"pack() takes seq_len, an int >= 1, not {seq_len!r}")
    for name, value in (("drop_last", drop_last), ("shuffle", shuffle)):
        if not isinstance(value, bool):
            raise ConfigError(f"pack({name}=) takes True or False, not {value!r}")
    if base._recipe.stages or base._recipe.passes != 1 or type(base._recipe) is not Recipe:
        raise ConfigError(
            "pack() reads documents straight from the source: call it on the Dataset "
            "itself, before any other stage (add stages after it)"
        )
    source = base._source
    if is_megatron(source):
        tokens = TokenSource(megatron=str(source))
    else:
        tokens = TokenSource(urls=base.shards.urls)
    new = copy.copy(base)
    new._recipe = PackRecipe(
        **{f.name: getattr(base._recipe, f.name) for f in dataclasses.fields(Recipe)},
        tokens=tokens,
        seq_len=seq_len,
        drop_last=drop_last,
        shuffle_documents=shuffle,
    )
    total = tokens.table.tokens
    items = total // seq_len if drop_last else -(-total // seq_len)
    if items == 0:
        raise ConfigError(
            f"pack({seq_len}) of {total} tokens makes no item"
            + (" (drop_last=True drops the one short item)" if total else "")
        )
    name = f"pack-{seq_len}:" + "+".join(tokens.names()[:1])
    new._shards = ShardList((name,), (items,))
    new._live = None
    new._identity = None
    new._resume = None
    from ._handoff import Handoff

    new._handoff = Handoff()
    return new
