"""Unix-style tools over shards, as library functions (the ``shardkit`` CLI wraps them).

Every tool takes inputs as shard URLs (brace patterns expand), local folders (their
shards, in ``manifest.json`` order when there is one), manifests, or ``-`` for a tar
stream on stdin; tools that write take a file, ``-`` (stdout) or a shard pattern. Only
:mod:`shardkit.reader`, :mod:`shardkit.formats` and :class:`~shardkit.writer.ShardWriter`
are used underneath.
"""

from __future__ import annotations

from ..formats.index import ShardIndex, index_url
from ..pipeline import load_index
from ._inputs import (
    Manifest,
    ShardRef,
    class_names,
    iter_samples,
    read_manifest,
    resolve_inputs,
)
from .cat import cat, iter_cat, shuffle_buffer
from .convert import convert
from .grid import ContactSheet, contact_sheet
from .index import build_index, read_indexed_sample, write_index, write_indexes
from .proc import ProcError, ProcResult, proc, run_on_sample, run_on_samples
from .show import FieldInfo, describe_field, describe_sample, format_sample, format_samples
from .split import split, write_shards
from .stats import ShardStats, Stats, format_stats, plot_stats, stats
from .tsv import field_value, parse_fields, tsv_rows, write_tsv
from .verify import Problem, ShardCheck, VerifyReport, verify, verify_shard

__all__ = [
    "ContactSheet",
    "FieldInfo",
    "Manifest",
    "Problem",
    "ProcError",
    "ProcResult",
    "ShardCheck",
    "ShardIndex",
    "ShardRef",
    "ShardStats",
    "Stats",
    "VerifyReport",
    "build_index",
    "cat",
    "class_names",
    "contact_sheet",
    "convert",
    "describe_field",
    "describe_sample",
    "field_value",
    "format_sample",
    "format_samples",
    "format_stats",
    "index_url",
    "iter_cat",
    "iter_samples",
    "load_index",
    "parse_fields",
    "plot_stats",
    "proc",
    "read_indexed_sample",
    "read_manifest",
    "resolve_inputs",
    "run_on_sample",
    "run_on_samples",
    "shuffle_buffer",
    "split",
    "stats",
    "tsv_rows",
    "verify",
    "verify_shard",
    "write_index",
    "write_indexes",
    "write_shards",
    "write_tsv",
]
