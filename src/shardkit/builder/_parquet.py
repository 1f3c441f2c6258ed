"""Parquet lists: the rows of a ``.parquet`` file, one batch at a time.

This module only supplies rows (dicts, one per row, in file order) to :mod:`.tables`,
which turns rows into items the same way for every kind of list. Columns keep their
parquet types: integers, floats, booleans, strings, lists and structs of them, as a
JSON line would hold them; a column of another type (a timestamp, bytes, a decimal)
has no JSON form, so it is an error of the list naming the column. A local file is read
where it lies; a remote one through its filesystem's seekable file (ranged reads), so
only the footer and one batch at a time are held. Text columns are read as dictionaries
(a value repeated in many rows is held once), a cell of any type (text, a list, a struct,
nested) holds at most the budget's ``cell`` limit (:data:`MAX_CELL` bytes by default;
counted from arrow's offsets and buffers before the rows become Python objects), and a
batch becomes Python objects in slices of at most :data:`BATCH_BYTES` bytes of values.

A bytes column (the Hugging Face layout: ``binary``, or ``struct<bytes, path>`` as
``datasets``' ``Image`` and ``Audio`` features store it) holds the samples' files: the
listing never turns its cells into Python objects, only their sizes and paths (a row's
cell is ``[size, path]``, the path None when there is none), and a cell may hold up to
:data:`MAX_BYTES_CELL` bytes. The workers read those cells from the file
(:class:`ParquetCells`): each task reads the row groups its rows are in once, and holds
its own rows' cells.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .. import storage
from .._optional import require
from ..budget import LIMITS, allow, limit
from ..errors import BuildError, StorageError

__all__ = [
    "MAX_BYTES_CELL",
    "ParquetCells",
    "arrow_rows",
    "bytes_columns",
    "cell_bytes",
    "check_schema",
    "hf_classes",
    "layout",
    "parquet_rows",
]

#: rows turned into Python objects at a time
BATCH_ROWS = 8192
#: The most bytes one text or binary cell may hold: a list's row names a file and a few
#: values. Parquet stores a repeated value once (a dictionary page), so a small file can
#: name a huge value in every row: it is refused from its size, before it is repeated.
MAX_CELL = LIMITS["cell"].default
#: The most bytes one cell of a bytes column may hold (a sample's file: it is read by a
#: worker, never by the listing, so the bound is a file's, not a list cell's).
MAX_BYTES_CELL = LIMITS["file_cell"].default
#: The most text bytes turned into Python objects at once (a batch is split to stay under).
BATCH_BYTES = 64 << 20
#: About the most values (of lists, at every level) one batch read from a file holds.
BATCH_VALUES = 1 << 22


def parquet_rows(path: str) -> Iterator[dict[str, Any]]:
    """Each row of the parquet file at ``path`` as a dict, column name -> value."""
    require("pyarrow.parquet", "a parquet list")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _open(path) as f:
            first = pq.ParquetFile(f)
            schema = first.schema_arrow
            cells = bytes_columns(schema)
            check_schema(schema, path, cells)
            # Text columns stay dictionary-encoded as read: a repeated value is held once.
            texts = [f.name for f in schema if _is_text(f.type) and f.name not in cells]
            parquet = pq.ParquetFile(f, metadata=first.metadata, read_dictionary=texts)
            yield from arrow_rows(_batches(parquet, cells, path), cells, path)
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"cannot read the list: {exc}", url=path) from exc


def _batches(parquet: Any, cells: frozenset[str], path: str) -> Iterator[Any]:
    """The record batches of ``parquet``, a row group at a time, each of as many rows as
    hold about :data:`BATCH_VALUES` values (from the footer): reading a batch holds its
    values, so a row group of a few rows of a million values each is read a row at a time,
    and one whose values cannot fit in its rows' cells is refused before it is read."""
    metadata = parquet.metadata
    done = 0
    for group in range(metadata.num_row_groups):
        meta = metadata.row_group(group)
        rows, values = meta.num_rows, 0
        for j in range(meta.num_columns):
            leaf = meta.column(j)
            if leaf.path_in_schema.split(".", 1)[0] not in cells:
                values = max(values, leaf.num_values)
        if rows and values * _VALUE > rows * limit("cell"):  # some cell of them is over
            span = f"row {done + 1}" if rows == 1 else f"rows {done + 1}-{done + rows}"
            what = f"{span}: cells that hold {values:,} values"
            allow("cell", values * _VALUE // rows, what=what, error=BuildError, url=path)
        size = max(1, min(BATCH_ROWS, rows * BATCH_VALUES // max(values, 1)))
        yield from parquet.iter_batches(batch_size=size, row_groups=[group])
        done += rows


def arrow_rows(
    batches: Iterable[Any], cells: frozenset[str], path: str
) -> Iterator[dict[str, Any]]:
    """Each row of arrow ``batches`` (a parquet file's, a ``datasets.Dataset``'s) as a
    dict, its ``cells`` (bytes columns) as ``[size, path]``; ``path`` names the list."""
    done = 0
    for batch in batches:
        batch, files = _cells(batch, cells, done, path)
        for piece in _pieces(batch, done, path):
            for row in piece.to_pylist():
                row.update((name, next(cell)) for name, cell in files.items())
                yield row
        done += batch.num_rows


def hf_classes(schema: Any) -> dict[str, list[str]]:
    """The names of each ``ClassLabel`` column of an arrow ``schema``, from the features
    ``datasets`` keeps in its metadata (a ``Dataset.to_parquet`` file's, a Dataset's own)."""
    from ..formats.jsondoc import load_json

    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return {}
    try:
        features = load_json(raw, what="the huggingface metadata")["info"]["features"]
    except (TypeError, ValueError, KeyError):  # not the layout datasets writes
        return {}
    if not isinstance(features, dict):
        return {}
    return {
        str(name): [str(n) for n in feature["names"]]
        for name, feature in features.items()
        if isinstance(feature, dict)
        and feature.get("_type") == "ClassLabel"
        and isinstance(feature.get("names"), list)
    }


def layout(path: str) -> tuple[frozenset[str], dict[str, list[str]]]:
    """The bytes columns and the ``ClassLabel`` columns' names of the parquet file at
    ``path`` (none for another list)."""
    if not path.lower().endswith(".parquet"):
        return frozenset(), {}
    require("pyarrow.parquet", "a parquet list")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _open(path) as f:
            schema = pq.ParquetFile(f).schema_arrow
            return bytes_columns(schema), hf_classes(schema)
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"cannot read the list: {exc}", url=path) from exc


def bytes_columns(schema: Any) -> frozenset[str]:
    return frozenset(f.name for f in schema if _bytes_kind(f.type))


def _bytes_kind(kind: Any) -> bool:
    """Whether a column holds files: binary, or struct<bytes: binary, path: string>."""
    import pyarrow.types as t

    if t.is_struct(kind):
        names = {kind.field(i).name for i in range(kind.num_fields)}
        return "bytes" in names and _bytes_kind(kind.field("bytes").type)
    return bool(t.is_binary(kind) or t.is_large_binary(kind))


def _cells(batch: Any, cells: frozenset[str], done: int, path: str) -> tuple[Any, dict[str, Any]]:
    """``batch`` without its bytes columns, and each one's ``[size, path]`` per row."""
    import pyarrow.compute as pc
    import pyarrow.types as t

    files: dict[str, Any] = {}
    for name in sorted(cells & set(batch.schema.names)):
        column = batch.column(name)
        struct = t.is_struct(column.type)
        data = pc.struct_field(column, "bytes") if struct else column
        sizes = pc.binary_length(data)
        _bound(sizes, f"row {{row}}, column {name!r}: a file", done, path, "file_cell")
        has_path = struct and "path" in {f.name for f in column.type}
        paths = pc.struct_field(column, "path").to_pylist() if has_path else None
        names = paths or [None] * len(sizes)
        files[name] = iter([[s, p] for s, p in zip(sizes.to_pylist(), names, strict=True)])
        batch = batch.drop_columns([name])
    return batch, files


class ParquetCells:
    """Loads a row's bytes cells (column -> bytes) from a parquet list; ``item.ref`` is the
    row's number. One row group of the bytes columns is held at a time per process;
    ``files`` reads the row's other files (paths or URLs)."""

    kind = "table"

    def __init__(self, path: str, columns: tuple[str, ...], files: Any) -> None:
        self.path = path
        self.columns = columns
        self.files = files
        self._held: dict[str, Any] = {}

    def __reduce__(self) -> Any:  # what a worker gets: never the row group held here
        return ParquetCells, (self.path, self.columns, self.files)

    def prefetch(self, items: list[Any]) -> None:
        """Read the cells of a task's ``items`` (rows in any order), each row group they
        are in once, in file order; :meth:`load` then takes them (a task's samples are
        held, not a row group per sample)."""
        starts = self._starts()
        groups: dict[int, list[int]] = {}
        for item in items:
            groups.setdefault(bisect.bisect_right(starts, item.ref) - 1, []).append(item.ref)
        rows = self._held["rows"] = {}
        for group in sorted(groups):
            table = self._group(group)
            offsets = [ref - starts[group] for ref in groups[group]]
            rows.update(zip(groups[group], table.take(offsets).to_pylist(), strict=True))
        self._held.pop("table", None)

    def load(self, item: Any) -> dict[str, bytes]:
        row = self._held.get("rows", {}).pop(item.ref, None)
        if row is None:  # not prefetched: its row group (held until another is needed)
            starts = self._starts()
            group = bisect.bisect_right(starts, item.ref) - 1
            if self._held.get("group") != group:
                self._held["table"] = None  # the last group goes before the next one comes
                self._held["table"] = self._group(group)
                self._held["group"] = group
            row = self._held["table"].slice(item.ref - starts[group], 1).to_pylist()[0]
        return cell_bytes(row, self.columns)

    def _starts(self) -> list[int]:
        """The first row of each row group, then the number of rows (the file opened)."""
        held = self._held
        if "starts" not in held:
            import pyarrow.parquet as pq

            held["stream"] = _open(self.path)
            held["file"] = pq.ParquetFile(held["stream"])
            meta = held["file"].metadata
            held["starts"] = [0]
            for i in range(meta.num_row_groups):
                held["starts"].append(held["starts"][-1] + meta.row_group(i).num_rows)
        starts: list[int] = held["starts"]
        return starts

    def _group(self, group: int) -> Any:
        self._held.pop("group", None)
        return self._held["file"].read_row_group(group, columns=list(self.columns))

    def describe(self, item: Any) -> str:
        return f"row {item.ref + 1}"

    def json_text(self, item: Any, classes: tuple[str, ...]) -> str:
        return str(item.meta)

    def close(self) -> None:
        stream = self._held.get("stream")
        self._held.clear()
        if stream is not None:
            stream.close()


def cell_bytes(row: Mapping[str, Any], columns: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each of a row's bytes ``columns`` that holds some: a cell holding only
    a path is a field of the file it names (:meth:`.tables._Columns.extras`)."""
    out = {}
    for name in columns:
        value = row[name]
        if isinstance(value, dict):
            value = value.get("bytes")
        if value:
            out[name] = bytes(value)
    return out


def _pieces(batch: Any, done: int, path: str) -> Iterator[Any]:
    """``batch`` in slices of at most :data:`BATCH_BYTES` bytes of values; raises for a
    cell of any type over the budget's ``cell`` limit (``done``: the rows before this
    batch), from the arrow sizes, before any cell becomes Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    per_row = None
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        sizes = pa.array(_cell_sizes(column))
        _bound(sizes, f"row {{row}}, column {name!r}: a cell", done, path)
        per_row = sizes if per_row is None else pc.add(per_row, sizes)
    if per_row is None or (pc.sum(per_row).as_py() or 0) <= BATCH_BYTES:
        yield batch
        return
    start = held = 0
    for end, size in enumerate(per_row.to_pylist()):
        if held + size > BATCH_BYTES and end > start:
            yield batch.slice(start, end - start)
            start, held = end, 0
        held += size
    yield batch.slice(start)


def _bound(sizes: Any, what: str, done: int, path: str, kind: str = "cell") -> None:
    """Refuse the list at the first of ``sizes`` over ``kind``'s limit in the budget
    (``what`` names it, ``{row}`` its row; ``done``: the rows before)."""
    import pyarrow.compute as pc

    largest = pc.max(sizes).as_py() or 0
    if largest > limit(kind):
        row = done + pc.index(sizes, largest).as_py() + 1
        allow(kind, largest, what=what.format(row=row), error=BuildError, url=path)


#: What one value inside a list or struct cell costs beside its own bytes (its Python
#: object's pointer): a list of a million empty strings is not an empty cell.
_VALUE = 8


def _cell_sizes(column: Any) -> Any:
    """The bytes each cell of an arrow ``column`` of any type becomes (a numpy int64 array):
    a text cell its length; a list, map or struct cell its values' bytes, each value
    counted :data:`_VALUE` more; a number its width. Computed from the offsets of each
    level, a few numbers per row: never from the values one by one, nor Python objects."""
    import numpy as np
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):  # a table's column (a datasets.Dataset's batch)
        parts = [_cell_sizes(chunk) for chunk in column.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    ends = _prefix(column, np.arange(len(column) + 1, dtype=np.int64))
    return np.diff(ends) - _VALUE


def _prefix(column: Any, at: Any) -> Any:
    """The bytes of ``column``'s first ``at`` values (a numpy array of counts), each value
    counted :data:`_VALUE` more."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.types as t

    kind = column.type
    if t.is_dictionary(kind):  # by value: a dictionary column holds a few distinct ones
        values = np.diff(_prefix(column.dictionary, np.arange(len(column.dictionary) + 1)))
        indices = pc.fill_null(column.indices, 0).to_numpy(zero_copy_only=False)
        taken = values[indices] if len(values) else np.full(len(column), _VALUE)
        return np.concatenate(([0], np.cumsum(taken, dtype=np.int64)))[at]
    if _is_text(kind) or t.is_list(kind) or t.is_large_list(kind) or t.is_map(kind):
        offsets = _offsets(column)
        first, last = offsets[:1], offsets[at]
        if _is_text(kind):
            inner = last - first
        else:
            inner = _prefix(column.values, last) - _prefix(column.values, first)
        return inner + _VALUE * at
    if t.is_fixed_size_list(kind):
        n = kind.list_size
        first = np.array([column.offset * n], np.int64)
        inner = _prefix(column.values, first + at * n) - _prefix(column.values, first)
        return inner + _VALUE * at
    if t.is_struct(kind):
        total = _VALUE * at
        for i in range(kind.num_fields):
            total = total + _prefix(column.field(i), at)
        return total
    width = max(1, getattr(kind, "bit_width", 8) // 8)
    return (width + _VALUE) * at


def _offsets(column: Any) -> Any:
    """The value offsets of a text or list ``column`` (its ``len + 1``, from its buffer: no
    copy), as int64."""
    import numpy as np
    import pyarrow.types as t

    kind = column.type
    wide = t.is_large_string(kind) or t.is_large_binary(kind) or t.is_large_list(kind)
    raw = np.frombuffer(column.buffers()[1], np.int64 if wide else np.int32)
    return raw[column.offset : column.offset + len(column) + 1].astype(np.int64)


def _is_text(kind: Any) -> bool:
    import pyarrow.types as t

    return bool(
        t.is_string(kind) or t.is_large_string(kind) or t.is_binary(kind) or t.is_large_binary(kind)
    )


def _open(path: str) -> Any:
    """A seekable binary file over ``path`` (parquet keeps its schema at the end)."""
    if storage.is_local(path):
        return storage.open_read(path, buffer_size=0)
    if storage.is_executing(path):  # a pipe cannot seek: its output is held whole
        with storage.open_read(path) as stream:
            return io.BytesIO(stream.read())
    fs, name = storage.filesystem(path)
    try:
        return fs.open(name, "rb")
    except FileNotFoundError as exc:
        raise StorageError("no such file", url=path) from exc


def check_schema(schema: Any, path: str, cells: frozenset[str]) -> None:
    """Raise for a column (not one of ``cells``) that a sample's json cannot hold."""
    for field in schema:
        if field.name not in cells and not _has_json_form(field.type):
            raise BuildError(
                f"column {field.name!r} is of type {field.type}, which a sample's json "
                "cannot hold: cast it to a string or a number, or drop it",
                url=path,
            )


def _has_json_form(kind: Any) -> bool:
    import pyarrow.types as t

    if t.is_dictionary(kind):
        return _has_json_form(kind.value_type)
    if t.is_list(kind) or t.is_large_list(kind) or t.is_fixed_size_list(kind):
        return _has_json_form(kind.value_type)
    if t.is_struct(kind):
        return all(_has_json_form(kind.field(i).type) for i in range(kind.num_fields))
    return bool(
        t.is_integer(kind)
        or t.is_float32(kind)
        or t.is_float64(kind)
        or t.is_boolean(kind)
        or t.is_null(kind)
        or t.is_string(kind)
        or t.is_large_string(kind)
    )
