"""The reading pipeline: shard list -> split -> shuffle -> samples -> decode -> batches.

:class:`Dataset` is the entry point; the modules hold its parts: :mod:`._urls` (sources),
:mod:`._epochs` (who reads what each epoch), :mod:`._source` (raw samples), :mod:`._stages`
(per-sample transforms), :mod:`._collate`, :mod:`._state` (mid-epoch resume),
:mod:`._elastic` (resume on another topology), :mod:`._context` (seed, epoch, rank, worker)
and :mod:`._loader` (:class:`Loader`: a DataLoader with one state for all its workers).
:class:`IndexedDataset` (:mod:`._indexed`) reads samples by number through the shards'
``.idx`` files (:mod:`._idxfiles`); :func:`mix` (:mod:`._mixing`) draws from several
datasets by weight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._dataset import Dataset

    # Shared with shardkit's other packages (the one resolver, the one .idx loader and its
    # cache of member tables), not the supported API: not in __all__.
    from ._idxfiles import IndexCache as IndexCache
    from ._idxfiles import load_index as load_index
    from ._idxfiles import load_indexes as load_indexes
    from ._idxfiles import shard_size as shard_size
    from ._indexed import IndexedDataset
    from ._loader import Loader
    from ._mixing import MixedDataset, mix
    from ._tokentable import TokenSource as TokenSource
    from ._urls import ShardList, resolve_source
    from ._urls import (
        find_shards as find_shards,
    )
    from ._urls import (
        is_manifest as is_manifest,
    )
    from ._urls import (
        list_folder as list_folder,
    )
    from ._urls import (
        resolve_parts as resolve_parts,
    )

# Loaded on first use: a Dataset needs neither random access, the Loader nor mixing.
_LAZY = {
    "Dataset": "._dataset",
    "IndexedDataset": "._indexed",
    "Loader": "._loader",
    "MixedDataset": "._mixing",
    "mix": "._mixing",
    "ShardList": "._urls",
    "resolve_source": "._urls",
    # shared with shardkit's other packages, not in __all__
    "find_shards": "._urls",
    "is_manifest": "._urls",
    "list_folder": "._urls",
    "resolve_parts": "._urls",
    "IndexCache": "._idxfiles",
    "load_index": "._idxfiles",
    "load_indexes": "._idxfiles",
    "shard_size": "._idxfiles",
    "TokenSource": "._tokentable",
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
