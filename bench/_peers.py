"""The peers of the random-access benchmark (bench/read.py): MosaicML streaming (MDS) and
litdata, each reading its own copy of the benchmark's samples written by its own writer.

Imported only in the peers' venv (``bench/read.py --peers PYTHON``), with
``bench/standins`` first on ``PYTHONPATH`` (see that folder).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

_CHUNK = 64_000_000  # bytes per MDS shard / litdata chunk, about the size of a tar shard


def _folder(root: str, samples: int, kind: str) -> str:
    return os.path.join(root, str(samples), kind)


def prepare(root: str, samples: int, tar_shards: Sequence[str]) -> None:
    """Write the samples of ``tar_shards`` as MDS shards and as litdata chunks (once)."""
    from shardkit import Dataset

    def items() -> Any:
        for sample in Dataset(list(tar_shards)):
            yield {"key": sample["__key__"], "jpg": sample["jpg"], "cls": sample["cls"]}

    mds = _folder(root, samples, "mds")
    if not os.path.exists(os.path.join(mds, "index.json")):
        from streaming import MDSWriter

        columns = {"key": "str", "jpg": "bytes", "cls": "bytes"}
        with MDSWriter(out=mds, columns=columns, size_limit=_CHUNK) as out:
            for item in items():
                out.write(item)
    lit = _folder(root, samples, "litdata")
    if not os.path.exists(os.path.join(lit, "index.json")):
        from litdata.streaming.writer import BinaryWriter

        writer = BinaryWriter(lit, chunk_bytes=_CHUNK)
        for index, item in enumerate(items()):
            writer.add_item(index, item)
        writer.done()
        writer.merge()


def mds_dataset(root: str, samples: int) -> Any:
    """MDS's map-style access over its local shards (memory-mapped)."""
    from streaming import StreamingDataset

    return StreamingDataset(local=_folder(root, samples, "mds"), shuffle=False, batch_size=1)


def litdata_dataset(root: str, samples: int) -> Any:
    from litdata import StreamingDataset

    return StreamingDataset(_folder(root, samples, "litdata"))
