"""Python sources: a map-style dataset (pickled to the workers) or a one-pass iterable.

A map-style dataset (``__len__`` and ``__getitem__``, a torchvision MNIST say) is indexed
by the workers: each worker gets the dataset and ``to_sample`` once, pickled, and calls
``to_sample(dataset[i])`` for the indices of its tasks. If either does not pickle (a
lambda, a class defined inside a function) the build runs in this process instead, with
the same output. An iterable without ``__getitem__`` (a generator) can only be read once,
in order: it is packed in this process, tasks of ``max_count`` items, not shuffled.

A Hugging Face ``datasets.Dataset`` (without ``to_sample``) is a list, the same as the
parquet file ``Dataset.to_parquet`` writes (:func:`list_hf`): its ``Image``, ``Audio`` and
``Video`` columns are read with ``decode=False`` (never decoded and re-encoded), and its
rows, read from its arrow table a batch at a time, go through :mod:`.tables` as a parquet
list's do: each bytes column a field named by its file's extension (from the cell's path,
else from the bytes), a ``ClassLabel`` column ``cls`` (its names the classes), every other
column the generated ``json``; ``fields`` names them as ``--field`` does. The workers read
a task's bytes cells from the dataset (:class:`DatasetCells`) and pack them as any sample
of several fields (:func:`.validate.check_fields` with ``validate``, ``resize``,
``max_side`` and ``encode``; :func:`.worker.sample_record`): the same rows give the same
shards, byte for byte, as a Dataset or as its parquet file. A Dataset with no file in its
rows (text and numbers only) packs each row as a ``json`` sample, with its ``cls``.

Keys are the item's position, zero-padded (``00000042``), unless ``to_sample`` returns a
``__key__``. Resuming a Dataset's build checks its listing as a list's (and the Dataset's
own fingerprint); any other dataset is trusted to yield the same items as before: there
is no way to fingerprint arbitrary Python objects cheaply (the type and length are
recorded).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ._sources import Item, Listing
from ._spill import Spill
from .options import BuildOptions

__all__ = [
    "DatasetCells",
    "DatasetSource",
    "IterableSource",
    "default_to_sample",
    "is_hf_dataset",
    "list_hf",
    "list_python",
    "value_sample",
]

logger = logging.getLogger(__name__)

ToSample = Callable[[Any], Mapping[str, Any]]


def default_to_sample(item: Any) -> Mapping[str, Any]:
    """A dict is a sample; an ``(image, label)`` pair becomes ``{"png": image, "cls": label}``."""
    if isinstance(item, Mapping):
        return item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], int):
        return {"png": item[0], "cls": item[1]}
    raise TypeError(
        f"cannot turn a {type(item).__name__} into a sample: pass to_sample=, a function "
        "that returns a dict such as {'jpg': image, 'cls': label}"
    )


def _sample(to_sample: ToSample, raw: Any) -> Mapping[str, Any]:
    sample = to_sample(raw)
    if not isinstance(sample, Mapping):
        raise TypeError(f"to_sample must return a dict, not {type(sample).__name__}")
    return sample


@dataclass(frozen=True)
class DatasetSource:
    """Items are indices into ``dataset``."""

    dataset: Any
    to_sample: ToSample = default_to_sample
    kind: str = "dataset"

    def load(self, item: Item) -> Mapping[str, Any]:
        return _sample(self.to_sample, self.dataset[item.ref])

    def describe(self, item: Item) -> str:
        return f"item {item.ref}"

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str:
        return ""


@dataclass(frozen=True)
class IterableSource:
    """Items carry the raw objects of a one-pass iterable."""

    to_sample: ToSample = default_to_sample
    kind: str = "iterable"

    def load(self, item: Item) -> Mapping[str, Any]:
        return _sample(self.to_sample, item.ref)

    def describe(self, item: Item) -> str:
        return f"item {item.key}"

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str:
        return ""


def list_python(source: Any, to_sample: ToSample | None) -> Listing:
    """List a map-style dataset or a one-pass iterable."""
    if to_sample is not None and not callable(to_sample):
        raise ConfigError(f"to_sample must be callable, not {type(to_sample).__name__}")
    convert = to_sample or default_to_sample
    if isinstance(source, (bytes, Mapping)):
        raise ConfigError(f"a {type(source).__name__} is not a dataset: pass a list or a dataset")
    name = f"{type(source).__module__}.{type(source).__qualname__}"
    classes = _classes(source)
    if hasattr(source, "__len__") and hasattr(source, "__getitem__"):
        count = len(source)
        if count == 0:
            raise ConfigError("the dataset is empty")
        return Listing(
            "dataset",
            name,
            DatasetSource(source, convert),
            _Indices(count),
            classes,
            fingerprint=f"{name}:{count}",
            sizes_known=False,
        )
    if not isinstance(source, Iterable):
        raise ConfigError(
            f"cannot build from a {type(source).__name__}: pass a folder, "
            "a .csv/.jsonl/.parquet path, shard URLs, a map-style dataset or an iterable"
        )
    return Listing(
        "iterable",
        name,
        IterableSource(convert),
        None,
        classes,
        fingerprint=f"{name}:iterable",
        stream=_stream(source),
    )


@dataclass(frozen=True)
class _Indices:
    """The items of a map-style dataset, made as they are read: its indices 0..count-1."""

    count: int

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Item]:
        width = max(8, len(str(self.count - 1)))
        return (Item(i, f"{i:0{width}d}", -1, "", 0, "") for i in range(self.count))


def _stream(source: Iterable[Any]) -> Iterator[Item]:
    for i, raw in enumerate(source):
        yield Item(raw, f"{i:010d}", -1, "", 0, "")


def is_hf_dataset(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.Dataset`` (told without importing it)."""
    return type(source).__module__.startswith("datasets.") and hasattr(source, "cast_column")


def list_hf(source: Any, options: BuildOptions, spill: Spill | None = None) -> Listing:
    """List a Hugging Face ``datasets.Dataset`` as the parquet list of its rows (the module
    docstring says how)."""
    from ._parquet import BATCH_ROWS, arrow_rows, bytes_columns, check_schema, hf_classes
    from ._tables import TableRows, list_table

    name = f"{type(source).__module__}.{type(source).__qualname__}"
    count = len(source)
    if count == 0:
        raise ConfigError("the dataset is empty")
    dataset = _undecoded(source)
    table = dataset.with_format("arrow")
    schema = table[0:1].schema
    cells = bytes_columns(schema)
    if not cells and not options.fields:  # text and numbers only: no file to pack
        return _value_rows(source, hf_classes(schema), _hf_fingerprint(source))
    check_schema(schema, name, cells)

    def read() -> Iterator[dict[str, Any]]:
        starts = range(0, count, BATCH_ROWS)
        return arrow_rows((table[i : i + BATCH_ROWS] for i in starts), cells, name)

    def cell_source(columns: tuple[str, ...], files: Any) -> DatasetCells:
        return DatasetCells(dataset.select_columns(list(columns)), columns, files)

    listing = list_table(
        name, options, spill, TableRows(read, cells, hf_classes(schema), cell_source)
    )
    listing.fingerprint += f":{name}:{count}" + _hf_fingerprint(source)
    return listing


def _value_rows(source: Any, classes: dict[str, list[str]], fingerprint: str) -> Listing:
    """A Dataset with no file in its rows (text, numbers): each row a sample of its
    ``json`` (every column but the label) and its ``cls`` (the label column, as a list's:
    ``label``, else its first ``ClassLabel``; -1 or none: no ``cls``), read by the workers
    as any map-style dataset's items are."""
    label = "label" if "label" in classes else next(iter(classes), None)
    listing = list_python(source, functools.partial(value_sample, label=label))
    listing.classes = classes.get(label, []) if label is not None else []
    listing.fingerprint += fingerprint
    return listing


def value_sample(row: Mapping[str, Any], label: str | None) -> dict[str, Any]:
    """The sample of a row with no file: its ``json`` and its ``cls``."""
    sample: dict[str, Any] = {"json": {k: v for k, v in row.items() if k != label}}
    value = row.get(label) if label is not None else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        sample["cls"] = value
    return sample


def _undecoded(source: Any) -> Any:
    """``source`` with its ``Image``, ``Audio`` and ``Video`` columns read undecoded
    (``{"bytes": ..., "path": ...}``)."""
    import dataclasses

    for name, feature in source.features.items():
        if type(feature).__name__ in ("Image", "Audio", "Video") and feature.decode:
            source = source.cast_column(name, dataclasses.replace(feature, decode=False))
    return source


class DatasetCells:
    """Loads a row's bytes cells (column -> bytes) from a ``datasets.Dataset`` holding
    only those ``columns``, undecoded; ``item.ref`` is the row's number. A task's rows are
    read at once (:meth:`prefetch`); ``files`` reads the row's other files (``fields``)."""

    kind = "table"

    def __init__(self, dataset: Any, columns: tuple[str, ...], files: Any) -> None:
        self.dataset = dataset
        self.columns = columns
        self.files = files
        self._held: dict[int, dict[str, Any]] = {}

    def __reduce__(self) -> Any:  # what a worker gets: never the rows held here
        return DatasetCells, (self.dataset, self.columns, self.files)

    def prefetch(self, items: list[Item]) -> None:
        """Read the cells of a task's ``items`` in one selection."""
        refs = [item.ref for item in items]
        batch = self.dataset[refs] if refs else {}
        self._held = {
            ref: {name: batch[name][i] for name in self.columns} for i, ref in enumerate(refs)
        }

    def load(self, item: Item) -> dict[str, bytes]:
        from ._parquet import cell_bytes

        row = self._held.pop(item.ref, None)
        if row is None:
            row = self.dataset[item.ref]
        return cell_bytes(row, self.columns)

    def describe(self, item: Item) -> str:
        return f"row {item.ref + 1}"

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str:
        return item.meta

    def close(self) -> None:
        self._held = {}


def _hf_fingerprint(source: Any) -> str:
    """A Hugging Face dataset's own fingerprint (of its data and transforms), or ''."""
    fingerprint = getattr(source, "_fingerprint", None)
    return f":{fingerprint}" if isinstance(fingerprint, str) else ""


def _classes(source: Any) -> list[str]:
    classes = getattr(source, "classes", None)
    if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes):
        return list(classes)
    return []
