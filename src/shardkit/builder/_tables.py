"""CSV / TSV / JSONL / parquet lists: one row per sample, a path column and a label column.

Paths are relative to the list's folder, absolute, or URLs (read with
:func:`shardkit.storage.open_read`); a ``pipe:`` row would run a shell command, so it is
skipped with the reason unless ``SHARDKIT_ALLOW_PIPE=all`` (the list is data). The list
itself may be a URL (``s3://b/train.csv``); its relative paths then name objects beside
it, whose sizes are learnt when they are read. A list never guesses (docs/build.md, "List
rules"): labels are integers (class numbers, kept as they are, below :data:`MAX_LABEL`) or
class names (numbered in sorted order, like an image folder's classes); a row whose label
cell is empty is skipped, never renumbering the others; a named label column must exist.
Every other column goes into the sample's ``json`` together with the path, class and
label, as text unless the column is wholly canonical numbers. Rows with an empty path, a
file an earlier row lists, a missing label, or a file that is missing or not an image are
skipped with their reason; a URL scheme whose module is missing stops the listing.

A parquet list (``.parquet``, the shape img2dataset users keep their URL lists in) only
supplies rows, read one batch at a time (:mod:`.parquet`); its columns keep their types
(int, float, str, lists) as JSON lines do.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import posixpath
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .. import storage
from .._optional import require
from ..budget import allow, limit
from ..errors import BuildError, ConfigError, MissingDependencyError
from ..formats.jsondoc import load_json
from ..formats.names import encode_name, lone_surrogate
from ._inputs import FileSource
from ._keys import key_base, path_key, relative_path, spilled_keys
from ._skipped import SkippedLog
from ._sources import (
    Item,
    Listing,
    SpilledItems,
    image_extension,
    not_an_image,
    nothing_found,
)
from ._spill import Spill, bucket_count, bucketed, held
from ._walk import file_kind
from .options import BuildOptions

__all__ = ["DEFAULT_LABEL_COLUMN", "MAX_LABEL", "TableRows", "list_table"]

#: The label column a list may lack (it is then unlabeled); any other named column must exist.
DEFAULT_LABEL_COLUMN = "label"
#: Integer labels are class numbers below this: one class is listed per number up to the
#: highest, so a label of 10,000,000 would list ten million classes.
MAX_LABEL = 1_000_000

# A usable row: (row, path, location, size, mtime_ns, fields)
Found = tuple[dict[str, Any], str, str, int, int, tuple[Any, ...]]


def list_table(
    path: str, options: BuildOptions, spill: Spill | None = None, given: TableRows | None = None
) -> Listing:
    """List the rows of a .csv, .tsv, .jsonl, .ndjson or .parquet file (or ``given``
    rows, a ``datasets.Dataset``'s, with ``path`` naming them).

    The list is read once. Its rows and items are held in memory up to
    :data:`~.spill.ORDER_BUDGET`, beyond it in ``spill`` files: the same listing either
    way, and memory that does not grow with the rows (only with the classes)."""
    if spill is None:
        with Spill() as own:  # everything is held in the end anyway
            return list_table(path, options, own, given)._held()
    given = given or _file_rows(path)
    columns = _Columns(path, options, given.cells, given.classes)
    rows = held(map(columns.add, given.read()), spill)
    if not rows:
        raise BuildError("the list has no rows", url=path)
    remote = storage.url_scheme(path) not in ("", "file")
    root = _root(path, options.root, remote)
    digest = hashlib.sha256(json.dumps(columns.classes).encode())
    found, skipped = _files(rows, root, columns, path, spill)
    listed = held(columns.entries(found, digest), spill)
    if not listed:
        nothing_found("no image files found from the list", skipped, path)
    if columns.in_cells:  # the files are in the list: keys are the row numbers
        width = max(8, len(str(len(rows) - 1)))
        keys: Any = None
        base: list[str] = []
    else:
        base = key_base((location for _, location, *_ in listed), root)
        keys = spilled_keys(
            lambda: (relative_path(location, base) for _, location, *_ in listed),
            len(listed),
            spill,
        )

    def item(entry: tuple[str, str, int, int, str, tuple[Any, ...]]) -> Item:
        rel, location, label, size, text, fields = entry
        if columns.in_cells:
            key = f"{int(rel):0{width}d}"
            return Item(int(rel), key, label, columns.main_ext, size, text, fields)
        relative = relative_path(location, base)
        ext = columns.main_ext or image_extension(_name(rel))
        key = keys.get(relative) or path_key(relative)
        return Item(rel, key, label, ext, size, text, fields)

    items = [item(e) for e in listed] if isinstance(listed, list) else SpilledItems(listed, item)
    files = FileSource(root, kind="table")
    source: Any = files
    if columns.cells:
        source = given.cell_source(tuple(sorted(columns.cells)), files)
    return Listing(
        kind="table",
        path=path,
        source=source,
        items=items,
        classes=columns.classes,
        skipped=skipped,
        fingerprint=digest.hexdigest(),
        sizes_known=not columns.fields
        and not storage.url_scheme(root)
        and all(e[3] > 0 or not storage.url_scheme(e[0]) for e in listed),
    )


@dataclass(frozen=True)
class TableRows:
    """Where a list's rows come from: ``read`` gives them (dicts in list order), ``cells``
    are its bytes columns (a row's cell ``[size, path]``), ``classes`` the names of its
    ``ClassLabel`` columns (Hugging Face), and ``cell_source(columns, files)`` loads a
    row's bytes cells in the workers."""

    read: Callable[[], Iterator[dict[str, Any]]]
    cells: frozenset[str]
    classes: Mapping[str, list[str]]
    cell_source: Callable[[tuple[str, ...], FileSource], Any]


def _file_rows(path: str) -> TableRows:
    """The rows of the list file at ``path`` (a parquet's bytes columns read in place)."""
    from ._parquet import ParquetCells, layout

    cells, classes = layout(path)
    return TableRows(
        lambda: _rows(path),
        cells,
        classes,
        lambda columns, files: ParquetCells(path, columns, files),
    )


class _Columns:
    """What one pass over the rows learns of the columns: the label column's classes and,
    for a TFRecord build, which text columns hold only integers (or numbers)."""

    def __init__(
        self,
        path: str,
        options: BuildOptions,
        cells: frozenset[str],
        class_names: Mapping[str, list[str]],
    ) -> None:
        self.path = path
        self.column: Any = options.path_column
        self.label_column = options.label_column
        self.class_names = class_names  # a ClassLabel column's names are its classes
        # without a named label column, a ClassLabel column is the labels
        self.find_label = not options.fields and options.label_column == DEFAULT_LABEL_COLUMN
        # fields (.fields): given, or each bytes column of a parquet list (its ext '': the
        # cell's path or bytes tell it); the first media field is the main file
        self.fields = [(e, c) for e, c in options.fields if e != "cls"] or [
            ("", name) for name in sorted(cells)
        ]
        self.cells = cells & {c for _, c in self.fields}
        self.unused = cells - self.cells  # bytes columns no field names: left out
        self.main_ext = ""
        self.in_cells = False
        self.json_field = any(e == "json" for e, _ in self.fields)
        if options.fields:
            self.label_column = dict(options.fields).get("cls")
        if self.fields:
            self._main(options)
        # A TFRecord build of an image list types its other columns as features (checked
        # against the schema); a sample of several fields keeps them in its json.
        self.typed = options.format == "tfrecord" and not self.fields
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
        if self.label_column is not None and not _blank(row.get(self.label_column)):
            self._label(row.get(self.label_column))
        for name, kind in self.kinds.items():
            value = row.get(name)
            if _blank(value):
                continue
            if not isinstance(value, str):
                kind[:] = [True, False, False]  # JSON lines keep their own types
                continue
            kind[0] = True
            kind[1] = kind[1] and _canonical_int(value)
            kind[2] = kind[2] and (_canonical_int(value) or _canonical_float(value))
        return row

    def _main(self, options: BuildOptions) -> None:
        from ._fields import is_media

        media = [(e, c) for e, c in self.fields if is_media(e) or c in self.cells]
        if not media:
            raise ConfigError(
                "fields name no file: give one media field, such as --field jpg=url "
                "(image, audio or video extensions; docs/build.md, 'Fields')"
            )
        self.main_ext, self.column = media[0]
        self.in_cells = self.column in self.cells

    def extras(self, row: dict[str, Any], root: str) -> tuple[tuple[Any, ...], str]:
        """The item's fields (.fields) of ``row``, or the reason to skip it."""
        from ._fields import is_media

        out: list[tuple[str, str, str, int]] = []
        for ext, column in self.fields:
            cell = row.get(column)
            if column in self.cells:
                where = str(cell[1] or "") if cell is not None else ""
                name = image_extension(where) or _media_ext(where)
                if cell is not None and not cell[0] and where:  # no bytes: the file it names
                    file, problem = _extra_file(where, column, root)
                    if problem:
                        return (), problem
                    out.append((ext or name, "file", *file))
                    continue
                if cell is None or not cell[0]:
                    return (), f"empty {column!r} cell"
                out.append((ext or name, "cell", column, cell[0]))
            elif column == self.column:
                out.append((ext, "main", "", 0))
            elif is_media(ext):
                file, problem = _extra_file(cell, column, root)
                if problem:
                    return (), problem
                out.append((ext, "file", *file))
            elif _blank(cell):
                return (), f"empty {column!r} cell"
            else:
                text = cell if isinstance(cell, str) else json.dumps(cell)
                out.append((ext, "text", text, 0))
        return tuple(out), ""

    def missing_label(self, row: dict[str, Any]) -> str:
        """Why ``row`` has no label when the list has a label column, or ''."""
        if self.label_column is None or not _blank(row.get(self.label_column)):
            return ""
        return f"no label (empty {self.label_column!r} cell)"

    def _first(self, row: dict[str, Any]) -> None:
        self.names = list(row)
        for ext, column in self.fields:
            if column not in row:
                raise BuildError(
                    f"no {column!r} column for the {ext or 'bytes'!r} field "
                    f"(columns: {_names(row)})",
                    url=self.path,
                )
        if self.column not in row:
            raise BuildError(
                f"no {self.column!r} column (columns: {_names(row)}); "
                "name the path column with --path-column",
                url=self.path,
            )
        if self.find_label and self.label_column not in row:
            named = {c for _, c in self.fields}
            found = (n for n in row if n in self.class_names and n not in named)
            self.label_column = next(found, self.label_column)
        if self.label_column is not None and self.label_column not in row:
            if self.label_column != DEFAULT_LABEL_COLUMN:  # named, so meant to be there
                raise BuildError(
                    f"no {self.label_column!r} column (columns: {_names(row)}); name the "
                    "label column with --label-column ('' for none)",
                    url=self.path,
                )
            self.label_column = None
        self.kinds = {n: [False, True, True] for n in self._others(self.names)}

    def _others(self, names: list[Any]) -> list[Any]:
        """Columns that go into the json (a TFRecord build: checked against its schema)."""
        from ..formats.tfschema import RESERVED

        named = {self.column, self.label_column, *(c for _, c in self.fields), *self.unused}
        others = [name for name in names if name not in named]
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
        if self.ints and _is_int_label(value):
            number = int(text)
            self.lowest, self.highest = min(self.lowest, number), max(self.highest, number)
        else:
            self.ints = False

    def labels(self) -> Callable[[Any], int]:
        """Set :attr:`classes`; returns the label of a label cell (ints kept as they are)."""
        if self.label_column is None:
            return lambda value: -1
        names = self.class_names.get(self.label_column)
        if names is not None:
            return self._class_label(names)
        if self.ints:
            if self.lowest < 0:
                raise BuildError("labels must not be negative", url=self.path)
            if self.highest >= MAX_LABEL:
                raise BuildError(
                    f"label {self.highest} is too large: an integer label is a class number, "
                    f"below {MAX_LABEL:,} (one class per number up to the highest); "
                    "give the classes names instead",
                    url=self.path,
                )
            self.classes = [str(i) for i in range(self.highest + 1)]
            return lambda value: int(str(value).strip())
        self.classes = sorted(self.texts)
        index = {name: i for i, name in enumerate(self.classes)}
        return lambda value: index[str(value).strip()]

    def _class_label(self, names: list[str]) -> Callable[[Any], int]:
        """A ``ClassLabel`` column's labels: class numbers into its ``names``, -1 (its
        "no label") giving none."""
        if not self.ints or self.lowest < -1 or self.highest >= len(names):
            raise BuildError(
                f"the {self.label_column!r} column is a ClassLabel of {len(names)} classes: "
                f"its cells must be class numbers 0..{len(names) - 1} (or -1, no label)",
                url=self.path,
            )
        self.classes = list(names)
        return lambda value: int(str(value).strip())

    def entries(
        self, found: Iterable[Found], digest: Any
    ) -> Iterator[tuple[str, str, int, int, str, tuple[Any, ...]]]:
        """(path, location, label, size, json text, fields) of each usable row,
        fingerprinted."""
        label_of = self.labels()
        convert = {
            n: int if k[1] else float for n, k in self.kinds.items() if k[0] and (k[1] or k[2])
        }
        skip = {self.column, self.label_column, *(c for _, c in self.fields), *self.unused}
        for row, rel, location, size, mtime, fields in found:
            label = label_of(row.get(self.label_column)) if self.label_column else -1
            meta: dict[str, Any] = {} if self.in_cells else {"path": rel}
            if label >= 0:
                meta.update({"class": self.classes[label], "label": label})
            meta.update(
                {
                    k: convert[k](v) if k in convert and not _blank(v) else v
                    for k, v in row.items()
                    if k not in skip
                }
            )
            text = "" if self.json_field else json.dumps(meta)
            line = f"{text}\0{size}\0{mtime}\n" + (json.dumps(fields) if fields else "")
            digest.update(line.encode("utf-8", "surrogateescape"))
            yield rel, location, label, size, text, fields


def _names(row: dict[str, Any]) -> str:
    return ", ".join(map(str, row))


def _blank(value: Any) -> bool:
    """Whether a cell is empty: JSON null, or text of nothing but spaces."""
    return value is None or (isinstance(value, str) and not value.strip())


_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")


def _canonical_int(text: str) -> bool:
    """Whether ``text`` is an integer written as Python writes it (no ``+``, no leading
    zero, no spaces), within int64: reading it as a number loses nothing."""
    return bool(_INT.fullmatch(text)) and text != "-0" and -(1 << 63) <= int(text) < (1 << 63)


def _canonical_float(text: str) -> bool:
    """Whether ``text`` is a finite float written as Python writes it (``2.5``, not
    ``2.50`` or ``inf``)."""
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and repr(number) == text


def _rows(path: str) -> Iterator[dict[str, Any]]:
    import io

    lower = path.lower()
    if lower.endswith(".parquet"):
        from ._parquet import parquet_rows

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


def _json_lines(f: Any, path: str) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL list, each line read up to the budget's ``row`` limit (a line
    over it is refused before it is parsed: its lists would be Python objects)."""
    bound = limit("row")
    number = 0
    while line := f.readline(bound + 1):
        number += 1
        if len(line) > bound and not line.endswith("\n"):
            allow("row", len(line), what=f"line {number}", error=BuildError, url=path)
        if not line.strip():
            continue
        try:
            row = load_json(line, what="the row")
        except ValueError as exc:
            raise BuildError(f"line {number} is not JSON: {exc}", url=path) from None
        if not isinstance(row, dict):
            raise BuildError(f"line {number} is not a JSON object", url=path)
        yield row


def _is_int_label(value: Any) -> bool:
    """Whether a label cell is a class number: a JSON int, or text of a canonical int."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and _canonical_int(value.strip())


def _media_ext(name: str) -> str:
    """The media extension of a file name, or '' (the bytes then tell it)."""
    from ._fields import is_media

    ext = name.rpartition(".")[2].lower() if "." in name else ""
    return ext if is_media(ext) else ""


def _extra_file(cell: Any, column: str, root: str) -> tuple[tuple[str, int], str]:
    """((path, size), '') of a media field's file other than the main one, or the reason
    to skip its row (its size: 0 when remote, learnt when read)."""
    rel = "" if cell is None else str(cell)
    problem = storage.data_url_problem(rel) if rel.strip() else f"empty {column!r} cell"
    problem = problem or ""
    if problem or storage.url_scheme(rel) or storage.url_scheme(root):
        return (rel, 0), problem
    try:
        info = os.stat(os.path.join(root, rel))
    except OSError as exc:
        return (rel, 0), f"cannot read {rel!r}: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return (rel, 0), f"{rel!r} is not a regular file ({file_kind(info.st_mode)})"
    return (rel, info.st_size), ""


def _files(
    rows: Iterable[dict[str, Any]], root: str, columns: _Columns, path: str, spill: Spill
) -> tuple[Iterator[Found], SkippedLog]:
    """(row, path, location, size, mtime_ns) of every usable row, as they are read, and
    the skipped ones with their reasons (filled as they are read): an empty path, a file
    an earlier row lists already, a missing label, a file that is missing or not an image.

    Sizes of URLs and of relative paths under a remote root are not known (0). A URL
    whose scheme needs a module that is not installed stops the listing (before anything
    is written), naming the extra: skipping every such row would build a partial dataset.
    """
    column = columns.column
    repeats = {} if columns.in_cells else _repeats(rows, root, column, spill)
    skipped = SkippedLog(spill)  # any number of rows: bounded in memory
    schemes = _Schemes(path)

    def found() -> Iterator[Found]:
        for index, row in enumerate(rows):
            fields, problem = columns.extras(row, root) if columns.fields else ((), "")
            if columns.in_cells:
                if problem := problem or columns.missing_label(row):
                    skipped.append((f"row {index + 1}", problem))
                else:
                    yield row, str(index), "", sum(f[3] for f in fields), 0, fields
                continue
            cell = row.get(column)
            rel = "" if cell is None else str(cell)
            problem = (
                repeats.get(index)
                or lone_surrogate(rel, "path")
                or problem
                or columns.missing_label(row)
                or storage.data_url_problem(rel)
                or (
                    ""
                    if columns.fields
                    else not_an_image(_name(rel), url=bool(storage.url_scheme(rel)))
                )
            )
            if problem:
                skipped.append((encode_name(rel) if rel.strip() else f"row {index + 1}", problem))
            elif storage.url_scheme(rel) or storage.url_scheme(root):
                schemes.check(rel, index)
                yield row, rel, _location(rel, root), 0, 0, fields
            else:
                try:
                    info = os.stat(os.path.join(root, rel))
                except OSError as exc:
                    skipped.append((rel, f"cannot read: {exc.strerror or exc}"))
                    continue
                if not stat.S_ISREG(info.st_mode):  # a FIFO would block the worker
                    skipped.append((rel, f"not a regular file ({file_kind(info.st_mode)})"))
                    continue
                yield row, rel, _location(rel, root), info.st_size, info.st_mtime_ns, fields

    return found(), skipped


# Schemes whose module is an extra of shardkit's. Others are not checked here: some
# filesystems connect when made (ftp, sftp); a row of an unknown one is skipped when read.
_EXTRA_SCHEMES = frozenset({"s3", "s3a", "gs", "gcs", "http", "https"})


class _Schemes:
    """Checks, once per URL scheme, that the module which opens it is installed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: set[str] = set()

    def check(self, url: str, index: int) -> None:
        scheme = storage.url_scheme(url)
        if scheme in self.seen or scheme not in _EXTRA_SCHEMES:
            return
        self.seen.add(scheme)
        try:
            if scheme in ("http", "https"):  # downloaded by the workers (builder.fetch)
                require("aiohttp", "downloading http(s) URLs")
            else:
                storage.filesystem(url)  # an object store's client: made, not connected
        except MissingDependencyError as exc:
            raise MissingDependencyError(
                f"row {index + 1} is a {scheme}:// URL: {exc.message}", url=self.path
            ) from exc
        except (OSError, ValueError):
            pass  # an unknown scheme: each such row is skipped with the reason when read


def _repeats(
    rows: Iterable[dict[str, Any]], root: str, column: str, spill: Spill
) -> dict[int, str]:
    """The rows (by index) with an empty path, or whose file an earlier row lists
    already, with the reason to skip each; checked bucket by bucket when rows are many."""
    bad: dict[int, str] = {}

    def located() -> Iterator[tuple[str, int, str]]:
        for index, row in enumerate(rows):
            rel = str(row.get(column) or "")
            if lone_surrogate(rel):  # skipped by its reason as it is listed
                continue
            if rel.strip():
                yield _location(rel, root), index, rel
            else:
                bad[index] = f"empty {column!r} cell"

    count = len(rows) if isinstance(rows, Sized) else 0
    buckets = bucket_count(count)

    def bucket_of(entry: tuple[str, int, str]) -> int:
        return zlib.crc32(entry[0].encode("utf-8", "surrogateescape")) % buckets

    for chunk in bucketed(located(), buckets, bucket_of, spill):
        seen: dict[str, tuple[int, str]] = {}  # location -> the first row, its path
        for location, index, rel in chunk:  # in list order within a bucket
            if location not in seen:
                seen[location] = (index, rel)
                continue
            first, spelt = seen[location]
            again = "" if spelt == rel else f" as {spelt!r}"
            bad[index] = f"listed twice: row {first + 1} lists it already{again}"
    return bad


def _name(rel: str) -> str:
    """The file name of a listed path or URL (a URL's without its query and fragment)."""
    if storage.url_scheme(rel):
        rel = urlsplit(rel).path
    return rel.rpartition("/")[2]


def _root(path: str, root: str | None, remote: bool) -> str:
    """The folder relative paths are read from and keys are relative to."""
    if root is not None:
        return root.rstrip("/") if storage.url_scheme(root) else os.path.abspath(root)
    return path.rsplit("/", 1)[0] if remote else os.path.dirname(os.path.abspath(path))


def _location(rel: str, root: str) -> str:
    """Where a listed path points: a URL, or a normalized absolute path."""
    if storage.url_scheme(rel):
        return rel.partition("#")[0]  # a fragment never reaches the server
    if storage.url_scheme(root):
        return f"{root}/{posixpath.normpath(rel)}"
    return os.path.normpath(os.path.join(root, rel))
