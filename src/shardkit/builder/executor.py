"""Where build tasks run: moved to :mod:`shardkit.engines` (one factory for the local
pool, inline, Ray and Dask). The names stay importable from here."""

from __future__ import annotations

from ..engines import (
    Executor,
    InlineExecutor,
    ProcessExecutor,
    check_not_bootstrapping,
    warm_up,
)
from ..engines._local import UNGUARDED_SCRIPT

__all__ = [
    "UNGUARDED_SCRIPT",
    "Executor",
    "InlineExecutor",
    "ProcessExecutor",
    "check_not_bootstrapping",
    "warm_up",
]
