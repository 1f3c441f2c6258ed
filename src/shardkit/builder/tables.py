"""CSV / TSV / JSONL / parquet lists: one row per sample, a path column and a label column.

Paths are relative to the list's folder, absolute, or URLs (read with
:func:`shardkit.storage.open_read`); a ``pipe:`` row would run a shell command, so it is
skipped with the reason unless ``SHARDKIT_ALLOW_PIPE=all`` (the list is data). The list
itself may be a URL (``s3://b/train.csv``); its relative paths then name objects beside
it, whose sizes are learnt when they are read. Labels are integers (used as they are) or
class names (numbered in sorted order, like an image folder's classes). Every other column
goes into the sample's ``json`` together with the path, class and label. Rows whose file
is missing or not an image file are skipped and reported; the same path twice is an error
of the list.

A parquet list (``.parquet``, the shape img2dataset users keep their URL lists in) only
supplies rows, read one batch at a time (:mod:`.parquet`); its columns keep their types
(int, float, str, lists) as JSON lines do.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import posixpath
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

from .. import storage
from ..codecs import normalize_image_extension
from ..errors import BuildError
from ..formats.jsondoc import load_json
from .keys import key_base, path_key, relative_path, spilled_keys
from .options import BuildOptions
from .sources import FileSource, Item, Listing, SpilledItems, not_an_image, nothing_found
from .spill import Spill, bucket_count, bucketed, held
from .walk import file_kind

__all__ = ["list_table"]


def list_table(path: str, options: BuildOptions, spill: Spill | None = None) -> Listing:
    """List the rows of a .csv, .tsv, .jsonl, .ndjson or .parquet file.

    The list is read once. Its rows and items are held in memory up to
    :data:`~.spill.ORDER_BUDGET`, beyond it in ``spill`` files: the same listing either
    way, and memory that does not grow with the rows (only with the classes)."""
    if spill is None:
        with Spill() as own:  # everything is held in the end anyway
            return list_table(path, options, own)._held()
    columns = _Columns(path, options)
    rows = held(map(columns.add, _rows(path)), spill)
    if not rows:
        raise BuildError("the list has no rows", url=path)
    remote = "://" in path and not path.startswith("file:")
    root = _root(path, options.root, remote)
    digest = hashlib.sha256(json.dumps(columns.classes).encode())
    found, skipped = _files(rows, root, columns, path, spill)
    listed = held(columns.entries(found, digest), spill)
    if not listed:
        nothing_found("no image files found from the list", skipped, path)
    base = key_base((location for _, location, *_ in listed), root)
    keys = spilled_keys(
        lambda: (relative_path(location, base) for _, location, *_ in listed), len(listed), spill
    )

    def item(entry: tuple[str, str, int, int, str]) -> Item:
        rel, location, label, size, text = entry
        relative = relative_path(location, base)
        ext = normalize_image_extension(rel.rpartition(".")[2].lower())
        return Item(rel, keys.get(relative) or path_key(relative), label, ext, size, text)

    items = [item(e) for e in listed] if isinstance(listed, list) else SpilledItems(listed, item)
    return Listing(
        kind="table",
        path=path,
        source=FileSource(root, kind="table"),
        items=items,
        classes=columns.classes,
        skipped=skipped,
        fingerprint=digest.hexdigest(),
        sizes_known="://" not in root and all(e[3] > 0 or "://" not in e[0] for e in listed),
    )


class _Columns:
    """What one pass over the rows learns of the columns: the label column's classes and,
    for a TFRecord build, which text columns hold only integers (or numbers)."""

    def __init__(self, path: str, options: BuildOptions) -> None:
        self.path = path
        self.column = options.path_column
        self.label_column = options.label_column
        self.typed = options.format == "tfrecord"
        self.names: list[Any] | None = None  # the first row's columns
        self.texts: set[str] = set()  # label values, as text
        self.ints = True  # every label is an int
        self.lowest = 0
        self.highest = -1
        self.kinds: dict[Any, list[bool]] = {}  # column -> [seen, all int, all float]
        self.classes: list[str] = []

    def add(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.names is None:
            self._first(row)
        if self.label_column is not None:
            self._label(row.get(self.label_column))
        for name, kind in self.kinds.items():
            value = row.get(name)
            if value in (None, ""):
                continue
            if not isinstance(value, str):
                kind[:] = [True, False, False]  # JSON lines keep their own types
                continue
            kind[0] = True
            kind[1] = kind[1] and _is_int(value) and _fits_int64(value)
            kind[2] = kind[2] and _is_float(value)
        return row

    def _first(self, row: dict[str, Any]) -> None:
        self.names = list(row)
        if self.column not in row:
            raise BuildError(
                f"no {self.column!r} column (columns: {', '.join(map(str, row))}); "
                "name the path column with --path-column",
                url=self.path,
            )
        if self.label_column is not None and self.label_column not in row:
            self.label_column = None
        if self.typed:
            self.kinds = {n: [False, True, True] for n in self._others(self.names)}

    def _others(self, names: list[Any]) -> list[Any]:
        """Columns that go into the json (a TFRecord build: checked against its schema)."""
        from ..formats.tfschema import RESERVED

        others = [name for name in names if name not in (self.column, self.label_column)]
        if self.typed:
            clash = sorted(str(n) for n in others if n in RESERVED or str(n).startswith("__"))
            if clash:
                raise BuildError(
                    f"column {clash[0]!r} would overwrite a feature of the TFRecord schema: "
                    "rename it",
                    url=self.path,
                )
        return others

    def _label(self, value: Any) -> None:
        text = str(value).strip()
        self.texts.add(text)
        if self.ints and _is_int(value):
            number = int(text)
            self.lowest, self.highest = min(self.lowest, number), max(self.highest, number)
        else:
            self.ints = False

    def labels(self) -> Callable[[Any], int]:
        """Set :attr:`classes`; returns the label of a label cell (ints kept as they are)."""
        if self.label_column is None:
            return lambda value: -1
        if self.ints:
            if self.lowest < 0:
                raise BuildError("labels must not be negative")
            self.classes = [str(i) for i in range(self.highest + 1)]
            return lambda value: int(str(value).strip())
        self.classes = sorted(self.texts)
        index = {name: i for i, name in enumerate(self.classes)}
        return lambda value: index[str(value).strip()]

    def entries(
        self, found: Iterable[tuple[dict[str, Any], str, str, int, int]], digest: Any
    ) -> Iterator[tuple[str, str, int, int, str]]:
        """(path, location, label, size, json text) of each usable row, fingerprinted."""
        label_of = self.labels()
        convert = {
            n: int if k[1] else float for n, k in self.kinds.items() if k[0] and (k[1] or k[2])
        }
        skip = (self.column, self.label_column)
        for row, rel, location, size, mtime in found:
            label = label_of(row.get(self.label_column)) if self.label_column else -1
            meta: dict[str, Any] = {"path": rel}
            if label >= 0:
                meta.update({"class": self.classes[label], "label": label})
            meta.update(
                {
                    k: convert[k](v) if k in convert and v not in (None, "") else v
                    for k, v in row.items()
                    if k not in skip
                }
            )
            text = json.dumps(meta)
            digest.update(f"{text}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
            yield rel, location, label, size, text


def _fits_int64(text: Any) -> bool:
    return -(1 << 63) <= int(text) < (1 << 63)


def _is_float(text: Any) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _rows(path: str) -> Iterator[dict[str, Any]]:
    import io

    lower = path.lower()
    if lower.endswith(".parquet"):
        from .parquet import parquet_rows

        yield from parquet_rows(path)
        return
    try:
        with io.TextIOWrapper(storage.open_read(path), encoding="utf-8-sig", newline="") as f:
            if lower.endswith((".jsonl", ".ndjson")):
                yield from _json_lines(f, path)
            else:
                yield from csv.DictReader(f, delimiter="\t" if lower.endswith(".tsv") else ",")
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BuildError(f"cannot read the list: {exc}", url=path) from exc


def _json_lines(lines: Iterator[str], path: str) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = load_json(line, what="the row")
        except ValueError as exc:
            raise BuildError(f"line {number} is not JSON: {exc}", url=path) from None
        if not isinstance(row, dict):
            raise BuildError(f"line {number} is not a JSON object", url=path)
        yield row


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _files(
    rows: Iterable[dict[str, Any]], root: str, columns: _Columns, path: str, spill: Spill
) -> tuple[Iterator[tuple[dict[str, Any], str, str, int, int]], list[tuple[str, str]]]:
    """(row, path, location, size, mtime_ns) of every usable row, as they are read, and
    the skipped ones (filled as they are read). Raises when a location is listed twice.

    Sizes of URLs and of relative paths under a remote root are not known (0).
    """
    column = columns.column
    _check_twice(rows, root, column, path, spill)
    skipped: list[tuple[str, str]] = []

    def found() -> Iterator[tuple[dict[str, Any], str, str, int, int]]:
        for row in rows:
            rel = str(row.get(column))
            location = _location(rel, root)
            problem = storage.data_url_problem(rel) or not_an_image(rel.rpartition("/")[2])
            if problem:
                skipped.append((rel, problem))
            elif "://" in rel or "://" in root:
                yield row, rel, location, 0, 0
            else:
                try:
                    info = os.stat(os.path.join(root, rel))
                except OSError as exc:
                    skipped.append((rel, f"cannot read: {exc.strerror or exc}"))
                    continue
                if not stat.S_ISREG(info.st_mode):  # a FIFO would block the worker
                    skipped.append((rel, f"not a regular file ({file_kind(info.st_mode)})"))
                    continue
                yield row, rel, location, info.st_size, info.st_mtime_ns

    return found(), skipped


def _check_twice(
    rows: Iterable[dict[str, Any]], root: str, column: str, path: str, spill: Spill
) -> None:
    """Raise for the first row (in list order) with an empty path, or whose file an
    earlier row lists already; checked bucket by bucket when the rows are many."""
    empty: list[int] = []

    def located() -> Iterator[tuple[str, int, str]]:
        for index, row in enumerate(rows):
            rel = str(row.get(column) or "")
            if rel:
                yield _location(rel, root), index, rel
            elif not empty:
                empty.append(index)

    count = len(rows) if isinstance(rows, Sized) else 0
    buckets = bucket_count(count)

    def bucket_of(entry: tuple[str, int, str]) -> int:
        return zlib.crc32(entry[0].encode("utf-8", "surrogateescape")) % buckets

    twice: tuple[int, str, str] | None = None  # (row, path, the path listed first)
    for chunk in bucketed(located(), buckets, bucket_of, spill):
        seen: dict[str, str] = {}  # location -> the path as listed
        for location, index, rel in chunk:
            if location not in seen:
                seen[location] = rel
            elif twice is None or index < twice[0]:
                twice = (index, rel, seen[location])
    if empty and (twice is None or empty[0] < twice[0]):
        raise BuildError(f"row {empty[0] + 1} has an empty {column!r}", url=path)
    if twice is not None:
        _, rel, first = twice
        again = "" if first == rel else f" (as {first!r})"
        raise BuildError(f"{rel!r} is listed twice{again}", url=path)


def _root(path: str, root: str | None, remote: bool) -> str:
    """The folder relative paths are read from and keys are relative to."""
    if root is not None:
        return root.rstrip("/") if "://" in root else os.path.abspath(root)
    return path.rsplit("/", 1)[0] if remote else os.path.dirname(os.path.abspath(path))


def _location(rel: str, root: str) -> str:
    """Where a listed path points: a URL, or a normalized absolute path."""
    if "://" in rel:
        return rel
    if "://" in root:
        return f"{root}/{posixpath.normpath(rel)}"
    return os.path.normpath(os.path.join(root, rel))
