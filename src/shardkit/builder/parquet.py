"""Parquet lists: the rows of a ``.parquet`` file, one batch at a time.

This module only supplies rows (dicts, one per row, in file order) to :mod:`.tables`,
which turns rows into items the same way for every kind of list. Columns keep their
parquet types: integers, floats, booleans, strings, lists and structs of them, as a
JSON line would hold them; a column of another type (a timestamp, bytes, a decimal)
has no JSON form, so it is an error of the list naming the column. A local file is read
where it lies; a remote one through its filesystem's seekable file (ranged reads), so
only the footer and one batch at a time are held.
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


def parquet_rows(path: str) -> Iterator[dict[str, Any]]:
    """Each row of the parquet file at ``path`` as a dict, column name -> value."""
    require("pyarrow.parquet", "a parquet list")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with _open(path) as f:
            parquet = pq.ParquetFile(f)
            _check_types(parquet.schema_arrow, path)
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                yield from batch.to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise BuildError(f"cannot read the list: {exc}", url=path) from exc


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
