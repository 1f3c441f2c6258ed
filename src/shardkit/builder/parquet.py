"""Parquet lists: the rows of a ``.parquet`` file, one batch at a time.

This module only supplies rows (dicts, one per row, in file order) to :mod:`.tables`,
which turns rows into items the same way for every kind of list. Columns keep their
parquet types: integers, floats, booleans, strings, lists and structs of them, as a
JSON line would hold them; a column of another type (a timestamp, bytes, a decimal)
has no JSON form, so it is an error of the list naming the column. A local file is read
where it lies; a remote one through its filesystem's seekable file (ranged reads), so
only the footer and one batch at a time are held. Text columns are read as dictionaries
(a value repeated in many rows is held once), a text cell holds at most :data:`MAX_CELL`
bytes (checked before the rows become Python objects), and a batch becomes Python
objects in slices of at most :data:`BATCH_BYTES` text bytes.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from .. import storage
from .._optional import require
from ..errors import BuildError, StorageError

__all__ = ["parquet_rows"]

#: rows turned into Python objects at a time
BATCH_ROWS = 8192
#: The most bytes one text or binary cell may hold: a list's row names a file and a few
#: values. Parquet stores a repeated value once (a dictionary page), so a small file can
#: name a huge value in every row: it is refused from its size, before it is repeated.
MAX_CELL = 1 << 16
#: The most text bytes turned into Python objects at once (a batch is split to stay under).
BATCH_BYTES = 64 << 20


def parquet_rows(path: str) -> Iterator[dict[str, Any]]:
    """Each row of the parquet file at ``path`` as a dict, column name -> value."""
    require("pyarrow.parquet", "a parquet list")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _open(path) as f:
            first = pq.ParquetFile(f)
            schema = first.schema_arrow
            _check_types(schema, path)
            # Text columns stay dictionary-encoded as read: a repeated value is held once.
            texts = [field.name for field in schema if _is_text(field.type)]
            parquet = pq.ParquetFile(f, metadata=first.metadata, read_dictionary=texts)
            done = 0
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                for piece in _pieces(batch, done, path):
                    yield from piece.to_pylist()
                done += batch.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"cannot read the list: {exc}", url=path) from exc


def _pieces(batch: Any, done: int, path: str) -> Iterator[Any]:
    """``batch`` in slices of at most :data:`BATCH_BYTES` text bytes; raises for a cell
    over :data:`MAX_CELL` (``done``: the rows before this batch)."""
    import pyarrow.compute as pc

    per_row = None
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        sizes = _cell_sizes(column)
        if sizes is None:
            continue
        sizes = pc.fill_null(sizes, 0)
        largest = pc.max(sizes).as_py() or 0
        if largest > MAX_CELL:
            row = done + pc.index(sizes, largest).as_py() + 1
            raise BuildError(
                f"row {row}, column {name!r}: a cell of {largest} bytes; a list's cell "
                f"holds at most {MAX_CELL}",
                url=path,
            )
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


def _cell_sizes(column: Any) -> Any:
    """The bytes of each cell of a text or binary column (None for other columns)."""
    import pyarrow.compute as pc
    import pyarrow.types as t

    if t.is_dictionary(column.type):
        if not _is_text(column.type.value_type):
            return None
        return pc.take(pc.binary_length(column.dictionary), column.indices)
    return pc.binary_length(column) if _is_text(column.type) else None


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


def _check_types(schema: Any, path: str) -> None:
    for field in schema:
        if not _has_json_form(field.type):
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
