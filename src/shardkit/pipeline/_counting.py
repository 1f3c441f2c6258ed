"""Stages that count what passes through them: ``with_epoch`` (:class:`Take`) and
``slice`` (:class:`Slice`), plus :class:`Unbatched`.

A counting stage's position is part of a saved state (see
:mod:`shardkit.pipeline._state`): when it sits after the resume point, restoring gives
it back the count it had, so the epoch still ends where it would have. Before the
resume point it is simply replayed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import DataError
from ..handlers import Handler, reraise
from ._context import Context
from ._epochs import split_counts
from ._stages import Stage, report_bad_data

__all__ = ["Counting", "Slice", "Take", "Tally", "Unbatched"]


class Tally:
    """How many items a counting stage has pulled in this epoch (its resumable state)."""

    __slots__ = ("count",)

    def __init__(self, count: int = 0) -> None:
        self.count = count


class Counting(Stage):
    """A stage whose position is a count of the items it has pulled."""

    counts: ClassVar[bool] = True

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        return self.run(items, ctx, Tally())

    def run(self, items: Iterator[Any], ctx: Context, tally: Tally) -> Iterator[Any]:
        raise NotImplementedError


@dataclass(eq=False)
class Take(Counting):
    """``with_epoch(n)``: end the epoch after ``n`` items at this position, per rank.

    The rank's workers split ``n`` by :func:`~shardkit.pipeline._epochs.split_counts`, in
    whole units of ``granularity`` (the batch size of a later ``.batched()``), so a rank's
    total never depends on the number of workers. The stream above it never ends on its
    own (the shards are read pass after pass).
    """

    n: int
    granularity: int = 1

    def share(self, ctx: Context) -> int:
        return split_counts(self.n, ctx.workers, self.granularity)[ctx.worker]

    def run(self, items: Iterator[Any], ctx: Context, tally: Tally) -> Iterator[Any]:
        share = self.share(ctx)
        while tally.count < share:
            item = next(items, _END)
            if item is _END:
                return
            tally.count += 1
            yield item


@dataclass(eq=False)
class Slice(Counting):
    """``itertools.islice`` of each stream (each DataLoader worker's, as in webdataset)."""

    start: int
    stop: int | None
    step: int = 1

    def run(self, items: Iterator[Any], ctx: Context, tally: Tally) -> Iterator[Any]:
        start, stop, step = self.start, self.stop, self.step
        while stop is None or tally.count < stop:
            item = next(items, _END)
            if item is _END:
                return
            index = tally.count
            tally.count += 1
            if index >= start and (index - start) % step == 0:
                yield item


_END = object()


@dataclass(eq=False)
class Unbatched(Stage):
    """Batches back into items: a list (``collate=None``) gives its items, a tuple of
    columns gives tuples, a dict of columns gives dicts.

    It holds the rest of a batch back, so the resume point sits after it (a restore
    replays the stages before it)."""

    handler: Handler = reraise
    reorders: ClassVar[bool] = True

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        for batch in items:
            if isinstance(batch, list):
                yield from batch
                continue
            try:
                rows = _rows(batch)
            except DataError as exc:
                report_bad_data(self.handler, exc, batch)
                continue
            yield from rows


def _rows(batch: Any) -> list[Any]:
    if isinstance(batch, tuple):
        sizes = {len(column) for column in batch}
        if len(sizes) != 1:
            raise DataError(f"unbatched(): columns of different lengths {sorted(sizes)}")
        return [tuple(column[i] for column in batch) for i in range(sizes.pop())]
    if isinstance(batch, Mapping):
        sizes = {len(column) for column in batch.values()}
        if len(sizes) != 1:
            raise DataError(f"unbatched(): fields of different lengths {sorted(sizes)}")
        return [{k: v[i] for k, v in batch.items()} for i in range(sizes.pop())]
    raise TypeError(
        f"unbatched() takes batches (a list, a tuple of columns or a dict of columns), "
        f"not {type(batch).__name__}"
    )
