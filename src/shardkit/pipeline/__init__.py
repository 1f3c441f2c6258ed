"""The reading pipeline: shard list -> split -> shuffle -> samples -> decode -> batches.

:class:`Dataset` is the entry point; the modules hold its parts: :mod:`.urls` (sources),
:mod:`.epochs` (who reads what each epoch), :mod:`.source` (raw samples), :mod:`.stages`
(per-sample transforms), :mod:`.collate`, :mod:`.state` (mid-epoch resume),
:mod:`.elastic` (resume on another topology), :mod:`.context` (seed, epoch, rank, worker)
and :mod:`.loader` (:class:`Loader`: a DataLoader with one state for all its workers).
:class:`IndexedDataset` (:mod:`.indexed`) reads samples by number through the shards'
``.idx`` files (:mod:`.idxfiles`); :func:`mix` (:mod:`.mixing`) draws from several
datasets by weight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .dataset import Dataset
    from .indexed import IndexedDataset
    from .loader import Loader
    from .mixing import MixedDataset, mix
    from .urls import ShardList, resolve_source

# Loaded on first use: a Dataset needs neither random access, the Loader nor mixing.
_LAZY = {
    "Dataset": ".dataset",
    "IndexedDataset": ".indexed",
    "Loader": ".loader",
    "MixedDataset": ".mixing",
    "mix": ".mixing",
    "ShardList": ".urls",
    "resolve_source": ".urls",
}

__all__ = [
    "Dataset",
    "IndexedDataset",
    "Loader",
    "MixedDataset",
    "ShardList",
    "mix",
    "resolve_source",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
