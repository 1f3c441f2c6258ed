"""What kind of source a build was given, told from its name alone (cheap: it runs before
the build machinery loads, to warm up the workers a list's downloads need)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["TABLE_EXTENSIONS", "is_table"]

TABLE_EXTENSIONS = (".csv", ".tsv", ".jsonl", ".ndjson", ".parquet")


def is_table(source: Any) -> bool:
    """Whether ``source`` names a CSV/TSV/JSONL/parquet list."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    path = os.fspath(source)
    return path.lower().endswith(TABLE_EXTENSIONS) and "{" not in path
