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
from collections.abc import Iterator
from typing import Any

from .. import storage
from ..codecs import normalize_image_extension
from ..errors import BuildError
from .keys import make_keys, relative_paths
from .options import BuildOptions
from .sources import FileSource, Item, Listing, not_an_image, nothing_found
from .walk import file_kind

__all__ = ["list_table"]


def list_table(path: str, options: BuildOptions) -> Listing:
    """List the rows of a .csv, .tsv, .jsonl, .ndjson or .parquet file."""
    rows = list(_rows(path))
    if not rows:
        raise BuildError("the list has no rows", url=path)
    column, label_column = options.path_column, options.label_column
    if column not in rows[0]:
        raise BuildError(
            f"no {column!r} column (columns: {', '.join(map(str, rows[0]))}); "
            "name the path column with --path-column",
            url=path,
        )
    if label_column is not None and label_column not in rows[0]:
        label_column = None
    classes, labels = _labels([row.get(label_column) for row in rows] if label_column else [])
    remote = "://" in path and not path.startswith("file:")
    root = _root(path, options.root, remote)
    found, skipped = _files(rows, root, column, path)
    if options.format == "tfrecord":
        rows = _typed_columns(rows, path, skip=(column, label_column))
    keys = make_keys(relative_paths([_location(rel, root) for _, rel, _, _ in found], root))
    items, digest = [], hashlib.sha256(json.dumps(classes).encode())
    for (row_index, rel, size, mtime), key in zip(found, keys, strict=True):
        row = rows[row_index]
        label = labels[row_index] if labels else -1
        meta: dict[str, Any] = {"path": rel}
        if label >= 0:
            meta.update({"class": classes[label], "label": label})
        meta.update({k: v for k, v in row.items() if k not in (column, label_column)})
        text = json.dumps(meta)
        ext = normalize_image_extension(rel.rpartition(".")[2].lower())
        items.append(Item(rel, key, label, ext, size, text))
        digest.update(f"{text}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    if not items:
        nothing_found("no image files found from the list", skipped, path)
    return Listing(
        kind="table",
        path=path,
        source=FileSource(root, kind="table"),
        items=items,
        classes=classes,
        skipped=skipped,
        fingerprint=digest.hexdigest(),
        sizes_known="://" not in root and all(i.size > 0 or "://" not in i.ref for i in items),
    )


def _typed_columns(
    rows: list[dict[str, Any]], path: str, *, skip: tuple[str | None, ...]
) -> list[dict[str, Any]]:
    """Rows whose text columns holding only integers (or numbers) hold ints (or floats).

    For a TFRecord build, where each column becomes a feature by the type of its value
    (:func:`shardkit.formats.tfschema.column_feature`): one type per column, so one
    tf.data feature spec parses every record. Empty cells do not count.
    """
    from ..formats.tfschema import RESERVED

    names = [name for name in rows[0] if name not in skip]
    clash = sorted(str(name) for name in names if name in RESERVED or str(name).startswith("__"))
    if clash:
        raise BuildError(
            f"column {clash[0]!r} would overwrite a feature of the TFRecord schema: rename it",
            url=path,
        )
    convert: dict[str, Any] = {}
    for name in names:
        values = [row.get(name) for row in rows if row.get(name) not in (None, "")]
        if not values or not all(isinstance(v, str) for v in values):
            continue  # JSON lines keep their own types
        if all(_is_int(v) and _fits_int64(v) for v in values):
            convert[name] = int
        elif all(_is_float(v) for v in values):
            convert[name] = float
    if not convert:
        return rows
    return [
        {k: convert[k](v) if k in convert and v not in (None, "") else v for k, v in row.items()}
        for row in rows
    ]


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
            row = json.loads(line)
        except ValueError as exc:
            raise BuildError(f"line {number} is not JSON: {exc}", url=path) from None
        if not isinstance(row, dict):
            raise BuildError(f"line {number} is not a JSON object", url=path)
        yield row


def _labels(values: list[Any]) -> tuple[list[str], list[int]]:
    """(class names, label per row) from a label column; ints are kept as they are."""
    if not values:
        return [], []
    texts = [str(v).strip() for v in values]
    if all(_is_int(v) for v in values):
        labels = [int(t) for t in texts]
        if min(labels) < 0:
            raise BuildError("labels must not be negative")
        return [str(i) for i in range(max(labels) + 1)], labels
    classes = sorted(set(texts))
    index = {name: i for i, name in enumerate(classes)}
    return classes, [index[t] for t in texts]


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _files(
    rows: list[dict[str, Any]], root: str, column: str, path: str
) -> tuple[list[tuple[int, str, int, int]], list[tuple[str, str]]]:
    """(row, path, size, mtime_ns) of every usable row, and the skipped ones.

    Sizes of URLs and of relative paths under a remote root are not known (0).
    """
    found: list[tuple[int, str, int, int]] = []
    skipped: list[tuple[str, str]] = []
    seen: dict[str, str] = {}  # location -> the path as listed
    for index, row in enumerate(rows):
        rel = str(row.get(column) or "")
        if not rel:
            raise BuildError(f"row {index + 1} has an empty {column!r}", url=path)
        location = _location(rel, root)
        if location in seen:
            again = "" if seen[location] == rel else f" (as {seen[location]!r})"
            raise BuildError(f"{rel!r} is listed twice{again}", url=path)
        seen[location] = rel
        problem = storage.data_url_problem(rel) or not_an_image(rel.rpartition("/")[2])
        if problem:
            skipped.append((rel, problem))
        elif "://" in rel or "://" in root:
            found.append((index, rel, 0, 0))
        else:
            try:
                info = os.stat(os.path.join(root, rel))
            except OSError as exc:
                skipped.append((rel, f"cannot read: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(info.st_mode):  # a FIFO would block the worker that reads it
                skipped.append((rel, f"not a regular file ({file_kind(info.st_mode)})"))
                continue
            found.append((index, rel, info.st_size, info.st_mtime_ns))
    return found, skipped


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
