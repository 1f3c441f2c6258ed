"""The reading pipeline: shard list -> split -> shuffle -> samples -> decode -> batches.

:class:`Dataset` is the entry point; the modules hold its parts: :mod:`.urls` (sources),
:mod:`.epochs` (who reads what each epoch), :mod:`.source` (raw samples), :mod:`.stages`
(per-sample transforms), :mod:`.collate`, :mod:`.state` (mid-epoch resume),
:mod:`.elastic` (resume on another topology), :mod:`.context` (seed, epoch, rank, worker)
and :mod:`.loader` (:class:`Loader`: a DataLoader with one state for all its workers).
"""

from __future__ import annotations

from .dataset import Dataset
from .loader import Loader
from .urls import ShardList, resolve_source

__all__ = ["Dataset", "Loader", "ShardList", "resolve_source"]
