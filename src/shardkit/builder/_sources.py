"""Build sources: what to pack, listed up front as :class:`Item` records.

A source lists its items in a fixed order (the plan shuffles them with the seed) and
knows how to load one item in a worker. Listing happens once, in the driver; loading
happens in the workers, so a source object must pickle small (a root folder, a dataset).

* a folder (``root/<class>/**/<file>``, torchvision's ImageFolder layout, or with
  ``layout="samples"`` ``root/**/<file>`` and no classes), on disk or under an
  object-store prefix (:mod:`.folders`; files that share a path without their extension
  are one sample: :mod:`.samples`), its files read by :class:`.inputs.FileSource`;
* a CSV/JSONL/parquet list (:mod:`.tables`, rows of parquet from :mod:`.parquet`);
* a Python map-style dataset or one-pass iterable (:mod:`.pysources`);
* existing shards (:mod:`.shards`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Protocol, TypeAlias

from ..codecs import normalize_image_extension
from ..errors import BuildError, DataError, EmptyBuildError
from ._samples import FOLDER_EXTENSIONS
from ._spill import RecordFile

if TYPE_CHECKING:
    from ._skipped import SkippedLog

SkippedItems: TypeAlias = "list[tuple[str, str]] | SkippedLog"  # what a listing skipped

__all__ = [
    "Item",
    "Items",
    "Listing",
    "SampleFileError",
    "SampleFiles",
    "Source",
    "SpilledItems",
    "image_extension",
    "not_an_image",
    "nothing_found",
]


class Item(NamedTuple):
    """One input sample as listed: small, picklable, loaded later by a worker."""

    ref: Any  # path (relative to the source root, absolute, or a URL), index, or raw item;
    # a folder's sample of several files: a tuple of (path, field, size)
    key: str
    label: int  # -1 when the source has no labels
    ext: str  # field extension of the image ("jpg"); "" for samples from Python or files
    size: int  # input bytes as listed (0 when unknown)
    meta: str  # JSON text of the sample's ``json`` field ("" for none)
    # A sample of several fields: each (ext, kind, value, size), in member order (.fields)
    fields: tuple[tuple[str, str, str, int], ...] = ()


class SampleFiles(dict[str, bytes]):
    """The fields of a folder's sample of several files, as loaded (field -> bytes)."""


class SampleFileError(DataError):
    """A bad file of a sample of several files: its whole sample is skipped, and the file
    (``url``, relative to the source) is listed with the reason."""


class Source(Protocol):
    """Loads one item in a worker: file bytes, or a ready sample dict."""

    @property
    def kind(self) -> str: ...

    def load(self, item: Item) -> bytes | Mapping[str, Any]: ...

    def describe(self, item: Item) -> str: ...

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str: ...


class Items(Protocol):
    """Listed items: how many, and one pass over them in listing order (a list, or
    :class:`SpilledItems` when there are more than the driver holds at once)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Item]: ...


class SpilledItems:
    """Items kept in a spill file as compact records, made into :class:`Item` s as read."""

    def __init__(self, records: RecordFile, decode: Callable[[Any], Item]) -> None:
        self.records = records
        self.decode = decode

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Item]:
        return map(self.decode, self.records)


@dataclass
class Listing:
    """Everything the driver knows about a source before planning."""

    kind: str
    path: str
    source: Source
    items: Items | None  # None for a one-pass iterable
    classes: list[str]
    skipped: SkippedItems = field(default_factory=list)
    fingerprint: str = ""
    stream: Iterator[Item] | None = None  # the items of a one-pass iterable
    sizes_known: bool = True  # item.size is the exact input size of every item

    @property
    def splittable(self) -> bool:
        return self.items is not None

    def _held(self) -> Listing:
        """This listing with its items in memory (before its spill folder goes)."""
        if self.items is not None and not isinstance(self.items, list):
            self.items = list(self.items)
        if not isinstance(self.skipped, list):
            self.skipped = list(self.skipped.sorted())
        return self


def nothing_found(message: str, skipped: SkippedItems, url: str) -> NoReturn:
    """Raise for a listing with nothing to pack: with the reasons when files were skipped
    (:class:`EmptyBuildError`, the first of them: the message counts them all), else a
    plain :class:`BuildError`."""
    if len(skipped):
        what = f"{message}: all {len(skipped)} files found were skipped; nothing was written"
        first = skipped if isinstance(skipped, list) else skipped.sorted()
        raise EmptyBuildError(what, skipped=first, url=url)  # it keeps the first few
    raise BuildError(message, url=url)


def not_an_image(name: str, *, url: bool = False) -> str:
    """The reason to skip a file of an image folder or list by its name, or ''.

    A URL's name (its path without the query and fragment) needs no image extension:
    the kind of a download whose name names none comes from its bytes."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    if ext in FOLDER_EXTENSIONS or url:
        return ""
    return f"not an image file (extension {ext or 'none'!r})"


def image_extension(name: str) -> str:
    """The field extension of an image file by its name (``JPEG`` -> ``jpg``); '' when
    the name has no image extension (the kind then comes from the bytes)."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    return normalize_image_extension(ext) if ext in FOLDER_EXTENSIONS else ""
