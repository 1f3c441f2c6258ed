"""The per-sample stages: small picklable generator transforms.

A stage is called as ``stage(items, ctx)`` with an iterator and the iteration's
:class:`~shardkit.pipeline._context.Context` and returns an iterator. Stages hold only
their parameters, so a pipeline pickles cheaply (DataLoader workers under ``spawn``).

Stages pull exactly the items they need for their next output, never one more; that is
what lets :mod:`shardkit.pipeline._state` resume exactly. Only :class:`Shuffle` (and
``unbatched``, :mod:`shardkit.pipeline._counting`) holds items back (``reorders``).

Bad *data* (:class:`~shardkit.errors.DataError`: an undecodable field, a sample missing a
field :class:`ToTuple` needs) goes to the ``handler``; whatever it returns, that sample is
dropped. Other exceptions, from your functions included, propagate, unless the stage was
given its own ``handler=`` (``.map(f, handler=...)``, ``.decode(f, handler=...)``, as in
webdataset): then what ``f`` raises goes to that handler too (:func:`handles`), except a
:class:`~shardkit.errors.ConfigError` or :class:`~shardkit.errors.UnsafeDataError`.

A field name that *no* sample of a stream has (``to_tuple("foo")``, ``rename(x="foo")``,
``map_dict(foo=f)``) is a :class:`~shardkit.errors.ConfigError` at the end of the stream,
whatever the handler, naming the fields the samples have: a typo, not bad data. A
sample the reader withheld because a stream was cut inside one of its members (a handler
such as ``ignore_and_stop`` let the stream end there) counts for this check with the
fields it had whole (:class:`Withheld`): webdataset hands that partial sample on, and its
``to_tuple`` / ``rename`` then raise on the fields it lacks; shardkit never hands it out,
but ``to_tuple("foo")`` over a stream whose only sample was cut still raises. The decode
stage is in :mod:`shardkit.pipeline._decode`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import (
    ConfigError,
    DataError,
    FormatError,
    MissingFieldError,
    UnsafeDataError,
)
from ..handlers import Handler, reraise
from ._collate import Collate, collate_batch
from ._context import Context

__all__ = [
    "Batched",
    "FieldStage",
    "Map",
    "MapDict",
    "MapTuple",
    "Rename",
    "Select",
    "Shuffle",
    "Stage",
    "ToTuple",
    "Withheld",
    "handles",
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


def handles(exc: Exception, catch_all: bool) -> bool:
    """Whether a stage's handler takes ``exc``: bad data always; with the stage's own
    ``handler=`` (``catch_all``) whatever the user's function raised, except errors that
    are never about data (a bad option, an unsafe unpickle)."""
    if isinstance(exc, DataError):
        return True
    return catch_all and not isinstance(exc, (ConfigError, UnsafeDataError))


def report_error(handler: Handler, exc: Exception, item: Any) -> None:
    """Pass an error :func:`handles` took to ``handler`` (bad data with its location)."""
    if isinstance(exc, DataError):
        report_bad_data(handler, exc, item)
    else:
        handler(exc)


def guarded(
    items: Iterable[Any], fn: Callable[[Any], Any], handler: Handler, catch_all: bool
) -> Iterator[Any]:
    """``fn(item)`` for each item; an error of ``fn`` that :func:`handles` takes goes to
    ``handler`` (:func:`report_error`) and the item is dropped: the one loop of every
    stage that applies a function to each item (map, map_dict, map_tuple, decode)."""
    for item in items:
        try:
            out = fn(item)
        except Exception as exc:
            if not handles(exc, catch_all):
                raise
            report_error(handler, exc, item)
            continue
        yield out


def _seen(items: Iterable[Any], fields: _Fields) -> Iterator[Any]:
    """``items``, each counted by ``fields`` on its way (before a stage applies to it)."""
    for item in items:
        fields.see(item)
        yield item


class Withheld:
    """A stream's read handler that also records the fields of the samples the reader
    withheld (left partial by a cut or bad data inside one of their own members:
    :attr:`~shardkit.errors.FormatError.withheld`) when ``handler`` did not raise; at
    most :attr:`LIMIT` names are kept."""

    LIMIT = 256

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.fields: dict[str, None] = {}  # ordered, as the sample had them

    def __call__(self, exc: Exception) -> bool:
        result = self.handler(exc)
        if isinstance(exc, FormatError):
            for name in exc.withheld:
                if len(self.fields) >= self.LIMIT:
                    break
                self.fields.setdefault(name)
        return result


class _Fields:
    """Which of a stage's wanted fields some sample of the stream had; at its end, one
    that none had is a :class:`ConfigError` (see the module docs)."""

    def __init__(self, wanted: tuple[tuple[str, ...], ...]) -> None:
        self.wanted = wanted
        self.unseen = list(range(len(wanted)))
        self.example: Any = None
        self.cut = False  # the example is the fields of a withheld sample

    def see_withheld(self, withheld: Withheld | None) -> None:
        """Count the fields of the samples the reader withheld (see the module docs)."""
        if withheld is not None and withheld.fields:
            self.cut = self.example is None
            self.see(dict(withheld.fields))

    def see(self, sample: Any) -> None:
        if self.example is None:
            self.example = sample
        if self.unseen and isinstance(sample, Mapping):
            self.unseen = [i for i in self.unseen if not any(n in sample for n in self.wanted[i])]

    def check(self, method: str) -> None:
        if self.unseen and isinstance(self.example, Mapping):
            name = ";".join(self.wanted[self.unseen[0]])
            have = [k for k in self.example if not k.startswith("__")][:32]
            cut = (
                " (a sample cut short where the stream stopped on an error, not handed out)"
                if self.cut
                else ""
            )
            raise ConfigError(
                f"{method}(): no sample has a field {name!r}; the samples have the fields "
                f"{', '.join(have) or '(none)'}{cut}"
            )


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
    catch_all: bool = False  # the stage's own handler= takes what fn raises

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        return guarded(items, self.fn, self.handler, self.catch_all)


@dataclass(eq=False)
class MapDict(Stage):
    """Apply ``fns[field]`` to those fields of each dict sample; a sample without one of
    them is bad data (:class:`~shardkit.errors.MissingFieldError`, a ``KeyError``)."""

    fns: Mapping[str, Callable[[Any], Any]]
    handler: Handler = reraise
    catch_all: bool = False
    check_fields: bool = True  # a field no sample of the stream has is a ConfigError

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fns = self.fns
        fields = _Fields(tuple((name,) for name in fns) if self.check_fields else ())

        def apply(sample: Any) -> Any:
            out = dict(sample)
            for name, fn in fns.items():
                if name not in out:
                    raise missing_field((name,), sample)
                out[name] = fn(out[name])
            return out

        yield from guarded(_seen(items, fields), apply, self.handler, self.catch_all)
        fields.check("map_dict")


@dataclass(eq=False)
class MapTuple(Stage):
    """Apply ``fns[i]`` to position i of each tuple (None leaves it as it is)."""

    fns: tuple[Callable[[Any], Any] | None, ...]
    handler: Handler = reraise
    catch_all: bool = False

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        fns = self.fns

        def apply(item: Any) -> tuple[Any, ...]:
            out = tuple(v if f is None else f(v) for f, v in zip(fns, item, strict=False))
            return out + tuple(item[len(fns) :])

        return guarded(items, apply, self.handler, self.catch_all)


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


class FieldStage(Stage):
    """A stage that takes fields by name: a wanted field that no sample of the stream had
    is a :class:`ConfigError` at its end (``method`` names the stage in it), the samples
    the reader withheld counted too where :meth:`run` is given them (see the module docs)."""

    method: ClassVar[str]

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        return self.run(items, ctx)

    def run(
        self, items: Iterator[Any], ctx: Context, withheld: Withheld | None = None
    ) -> Iterator[Any]:
        """The stage over ``items``; ``withheld``: the samples the reader withheld, when
        no stage before this one renames fields."""
        seen = _Fields(self.wanted())
        yield from self.apply(_seen(items, seen))
        seen.see_withheld(withheld)
        seen.check(self.method)

    def wanted(self) -> tuple[tuple[str, ...], ...]:
        """The fields some sample must have (each with its alternatives)."""
        raise NotImplementedError

    def apply(self, samples: Iterator[Any]) -> Iterator[Any]:
        """The stage's output for ``samples``."""
        raise NotImplementedError


@dataclass(eq=False)
class ToTuple(FieldStage):
    """A tuple of fields; each field is the first of its alternatives the sample has.

    A missing field is bad data, or None with ``missing_is_error=False``; with
    ``none_is_error`` a None value is bad data too."""

    fields: tuple[tuple[str, ...], ...]
    handler: Handler = reraise
    missing_is_error: bool = True
    none_is_error: bool = False
    check_fields: bool = True
    method: ClassVar[str] = "to_tuple"

    def wanted(self) -> tuple[tuple[str, ...], ...]:
        return self.fields if self.missing_is_error and self.check_fields else ()

    def apply(self, samples: Iterator[Any]) -> Iterator[Any]:
        fields, handler = self.fields, self.handler
        for sample in samples:
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
class Rename(FieldStage):
    """Rename fields: ``names[new]`` lists the old names to try (``"jpg;png"``); fields
    not renamed are kept unless ``keep`` is false (dunder keys always are)."""

    names: tuple[tuple[str, tuple[str, ...]], ...]
    keep: bool = True
    handler: Handler = reraise
    check_fields: bool = True
    method: ClassVar[str] = "rename"

    def wanted(self) -> tuple[tuple[str, ...], ...]:
        return tuple(old for _, old in self.names) if self.check_fields else ()

    def apply(self, samples: Iterator[Any]) -> Iterator[Any]:
        for sample in samples:
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
    """Lists of ``size`` items, collated (see :mod:`shardkit.pipeline._collate`)."""

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
