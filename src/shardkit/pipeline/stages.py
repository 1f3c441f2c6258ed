"""The per-sample stages: small picklable generator transforms.

A stage is called as ``stage(items, ctx)`` with an iterator and the iteration's
:class:`~shardkit.pipeline.context.Context` and returns an iterator. Stages hold only
their parameters, so a pipeline pickles cheaply (DataLoader workers under ``spawn``).

Stages pull exactly the items they need for their next output, never one more; that is
what lets :mod:`shardkit.pipeline.state` resume exactly. Only :class:`Shuffle` (and
``unbatched``, :mod:`shardkit.pipeline.counting`) holds items back (``reorders``).

Bad *data* (:class:`~shardkit.errors.DataError`: an undecodable field, a sample missing a
field :class:`ToTuple` needs) goes to the ``handler``; whatever it returns, that sample is
dropped. Other exceptions, from your functions included, propagate. The decode stage is in
:mod:`shardkit.pipeline.decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import DataError, MissingFieldError
from ..handlers import Handler, reraise
from .collate import Collate, collate_batch
from .context import Context

__all__ = [
    "Batched",
    "Map",
    "MapDict",
    "MapTuple",
    "Rename",
    "Select",
    "Shuffle",
    "Stage",
    "ToTuple",
    "missing_field",
    "parse_fields",
    "report_bad_data",
]


class Stage:
    """Base of the stages; ``reorders`` marks one that holds items back (a buffer)."""

    reorders: ClassVar[bool] = False

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        raise NotImplementedError


def report_bad_data(handler: Handler, exc: DataError, item: Any) -> None:
    """Pass ``exc`` to ``handler``, filling in the sample's URL, key and byte offset."""
    if isinstance(item, Mapping) and exc.offset is None:
        located = type(exc)(
            exc.message,
            url=exc.url or item.get("__url__"),
            key=exc.key or item.get("__key__"),
            offset=item.get("__offset__"),
        )
        located.__cause__ = exc
        exc = located
    handler(exc)


def missing_field(alternatives: tuple[str, ...], sample: Mapping[str, Any]) -> MissingFieldError:
    """The error for a sample that has none of ``alternatives``."""
    fields = ", ".join(k for k in sample if not k.startswith("__"))
    return MissingFieldError(f"no field {';'.join(alternatives)!r} (fields: {fields})")


@dataclass(eq=False)
class Shuffle(Stage):
    """A shuffle buffer of ``size`` items, seeded from (seed, epoch, rank, worker);
    it starts yielding once it holds ``initial`` items (None: ``size``)."""

    size: int
    salt: int | str = 0
    initial: int | None = None
    reorders: ClassVar[bool] = True

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        rng = ctx.rng(f"samples{self.salt}")
        size = self.size
        initial = size if self.initial is None else self.initial
        buffer: list[Any] = []
        turn = False
        for item in items:
            if len(buffer) < size:
                buffer.append(item)
                if initial <= len(buffer) < size:  # still filling: one out per two in
                    turn = not turn
                    if turn:
                        index = rng.randrange(len(buffer))
                        buffer[index], buffer[-1] = buffer[-1], buffer[index]
                        yield buffer.pop()
                continue
            index = rng.randrange(size)
            out, buffer[index] = buffer[index], item
            yield out
        rng.shuffle(buffer)
        yield from buffer


@dataclass(eq=False)
class Map(Stage):
    """``fn(item)`` for each item."""

    fn: Callable[[Any], Any]
    handler: Handler = reraise

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fn, handler = self.fn, self.handler
        for item in items:
            try:
                out = fn(item)
            except DataError as exc:
                report_bad_data(handler, exc, item)
                continue
            yield out


@dataclass(eq=False)
class MapDict(Stage):
    """Apply ``fns[field]`` to those fields of each dict sample; a sample without one of
    them is bad data (:class:`~shardkit.errors.MissingFieldError`, a ``KeyError``)."""

    fns: Mapping[str, Callable[[Any], Any]]
    handler: Handler = reraise

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fns, handler = self.fns, self.handler
        for sample in items:
            try:
                out = dict(sample)
                for name, fn in fns.items():
                    if name not in out:
                        raise missing_field((name,), sample)
                    out[name] = fn(out[name])
            except DataError as exc:
                report_bad_data(handler, exc, sample)
                continue
            yield out


@dataclass(eq=False)
class MapTuple(Stage):
    """Apply ``fns[i]`` to position i of each tuple (None leaves it as it is)."""

    fns: tuple[Callable[[Any], Any] | None, ...]
    handler: Handler = reraise

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fns, handler = self.fns, self.handler
        for item in items:
            try:
                out = tuple(v if f is None else f(v) for f, v in zip(fns, item, strict=False))
                out += tuple(item[len(fns) :])
            except DataError as exc:
                report_bad_data(handler, exc, item)
                continue
            yield out


@dataclass(eq=False)
class Select(Stage):
    """Keep the items for which ``predicate(item)`` is true."""

    predicate: Callable[[Any], bool]

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        return filter(self.predicate, items)


def parse_fields(fields: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``("jpg;png", "cls")`` -> ``(("jpg", "png"), ("cls",))``; one string may hold
    space-separated fields, as in webdataset."""
    if len(fields) == 1 and " " in fields[0]:
        fields = tuple(fields[0].split())
    if not fields or not all(isinstance(f, str) and f for f in fields):
        raise TypeError(f"to_tuple() takes field names such as 'jpg;png', not {fields!r}")
    return tuple(tuple(f.split(";")) for f in fields)


@dataclass(eq=False)
class ToTuple(Stage):
    """A tuple of fields; each field is the first of its alternatives the sample has.

    A missing field is bad data, or None with ``missing_is_error=False``; with
    ``none_is_error`` a None value is bad data too."""

    fields: tuple[tuple[str, ...], ...]
    handler: Handler = reraise
    missing_is_error: bool = True
    none_is_error: bool = False

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fields, handler = self.fields, self.handler
        for sample in items:
            out = []
            for alternatives in fields:
                name = next((name for name in alternatives if name in sample), None)
                value = None if name is None else sample[name]
                if name is None and self.missing_is_error:
                    report_bad_data(handler, missing_field(alternatives, sample), sample)
                    break
                if value is None and self.none_is_error:
                    what = repr(name) if name else f"{';'.join(alternatives)!r} (missing)"
                    report_bad_data(handler, DataError(f"to_tuple(): field {what} is None"), sample)
                    break
                out.append(value)
            else:
                yield tuple(out)


@dataclass(eq=False)
class Rename(Stage):
    """Rename fields: ``names[new]`` lists the old names to try (``"jpg;png"``); fields
    not renamed are kept unless ``keep`` is false (dunder keys always are)."""

    names: tuple[tuple[str, tuple[str, ...]], ...]
    keep: bool = True
    handler: Handler = reraise

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        for sample in items:
            out = {k: v for k, v in sample.items() if self.keep or k.startswith("__")}
            for new, alternatives in self.names:
                old = next((name for name in alternatives if name in sample), None)
                if old is None:
                    report_bad_data(self.handler, missing_field(alternatives, sample), sample)
                    break
                out.pop(old, None)
                out[new] = sample[old]
            else:
                yield out


@dataclass(eq=False)
class Batched(Stage):
    """Lists of ``size`` items, collated (see :mod:`shardkit.pipeline.collate`)."""

    size: int
    collate: Collate = "auto"
    partial: bool = True

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        size, collate = self.size, self.collate
        batch: list[Any] = []
        for item in items:
            batch.append(item)
            if len(batch) == size:
                yield collate_batch(batch, collate)
                batch = []
        if batch and self.partial:
            yield collate_batch(batch, collate)
