"""Python sources: a map-style dataset (pickled to the workers) or a one-pass iterable.

A map-style dataset (``__len__`` and ``__getitem__``, a torchvision MNIST say) is indexed
by the workers: each worker gets the dataset and ``to_sample`` once, pickled, and calls
``to_sample(dataset[i])`` for the indices of its tasks. If either does not pickle (a
lambda, a class defined inside a function) the build runs in this process instead, with
the same output. An iterable without ``__getitem__`` (a generator) can only be read once,
in order: it is packed in this process, tasks of ``max_count`` items, not shuffled.

A Hugging Face ``datasets.Dataset`` (without ``to_sample``) keeps its files' encoded bytes:
its ``Image``, ``Audio`` and ``Video`` columns are read with ``decode=False`` (never decoded
and re-encoded), each becomes a field named by its file's extension (from the cell's path,
else from the bytes) and is checked as that kind is; a ``ClassLabel`` column becomes ``cls``
(its names the classes), every other column goes into the sample's ``json``.

Keys are the item's position, zero-padded (``00000042``), unless ``to_sample`` returns a
``__key__``. Resuming trusts that the dataset yields the same items as before: there is no
way to fingerprint arbitrary Python objects cheaply (the type and length are recorded).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .sources import Item, Listing

__all__ = ["DatasetSource", "IterableSource", "default_to_sample", "hf_sample", "list_python"]

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
    if to_sample is None and _is_hf_dataset(source):
        source, convert = _hf_dataset(source)
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
            fingerprint=f"{name}:{count}" + _hf_fingerprint(source),
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


def _is_hf_dataset(source: Any) -> bool:
    """Whether ``source`` is a Hugging Face ``datasets.Dataset`` (told without importing it)."""
    return type(source).__module__.startswith("datasets.") and hasattr(source, "cast_column")


def _hf_dataset(source: Any) -> tuple[Any, ToSample]:
    """``source`` with its media columns undecoded, and the function that makes its rows
    samples (the module docstring says how)."""
    import dataclasses

    media, label = [], None
    for name, feature in source.features.items():
        kind = type(feature).__name__
        if kind in ("Image", "Audio", "Video"):
            media.append(name)
            if getattr(feature, "decode", False):
                source = source.cast_column(name, dataclasses.replace(feature, decode=False))
        elif kind == "ClassLabel" and label is None:
            label = name
    return source, functools.partial(hf_sample, media=tuple(media), label=label)


def hf_sample(row: Mapping[str, Any], media: tuple[str, ...], label: str | None) -> dict[str, Any]:
    """The sample of a row of a Hugging Face dataset whose ``media`` columns are undecoded
    (``{"bytes": ..., "path": ...}``) and whose ``label`` column is a class number."""
    from ..errors import DataError
    from .fields import is_media
    from .validate import check_one

    sample: dict[str, Any] = {}
    meta = {}
    for name, value in row.items():
        if name in media:
            data, path = (value or {}).get("bytes"), str((value or {}).get("path") or "")
            if not data:
                raise DataError(f"column {name!r}: no bytes in the cell")
            ext = path.rpartition(".")[2].lower() if "." in path else ""
            ext = check_one(ext if is_media(ext) else "", data)[0]
            sample[f"{name}.{ext}" if ext in sample else ext] = data
        elif name == label:
            if value is not None and value >= 0:  # -1: no label
                sample["cls"] = value
        else:
            meta[name] = value
    if meta:
        sample["json"] = meta
    return sample


def _hf_fingerprint(source: Any) -> str:
    """A Hugging Face dataset's own fingerprint (of its data and transforms), or ''."""
    fingerprint = getattr(source, "_fingerprint", None) if _is_hf_dataset(source) else None
    return f":{fingerprint}" if isinstance(fingerprint, str) else ""


def _classes(source: Any) -> list[str]:
    if _is_hf_dataset(source):
        for feature in source.features.values():
            if type(feature).__name__ == "ClassLabel":
                return [str(name) for name in feature.names]
    classes = getattr(source, "classes", None)
    if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes):
        return list(classes)
    return []
