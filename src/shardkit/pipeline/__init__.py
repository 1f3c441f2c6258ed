"""The reading pipeline: shard list -> split -> shuffle -> samples -> decode -> batches.

:class:`Dataset` is the entry point; the modules hold its parts: :mod:`.urls` (sources),
:mod:`.epochs` (who reads what each epoch), :mod:`.source` (raw samples), :mod:`.stages`
(per-sample transforms), :mod:`.collate`, :mod:`.state` (mid-epoch resume) and
:mod:`.context` (seed, epoch, rank, worker). :class:`IndexedDataset` (:mod:`.indexed`)
reads samples by number through the shards' ``.idx`` files (:mod:`.idxfiles`); :func:`mix`
(:mod:`.mixing`) draws from several datasets by weight.
"""

from __future__ import annotations

from .dataset import Dataset
from .indexed import IndexedDataset
from .iterable import FromIterable, as_is, from_iterable
from .mixing import MixedDataset, mix
from .urls import ShardList, resolve_source

__all__ = [
    "Dataset",
    "FromIterable",
    "IndexedDataset",
    "MixedDataset",
    "ShardList",
    "as_is",
    "from_iterable",
    "mix",
    "resolve_source",
]
