"""The ``.idx`` files of a shard list (written by ``shardkit index``), as the pipeline uses
them: per-shard sample counts for :class:`~shardkit.pipeline.dataset.Dataset`, and
sample offsets for :class:`~shardkit.pipeline.indexed.IndexedDataset`.

An index is untrusted input like any file read: :func:`shardkit.reader.load_index` bounds
every entry by the shard's size and by the reader's member limit
(:func:`shardkit.formats.index.check_index`) before anything is read through it, and an
index whose recorded shard size differs from the shard's is stale and refused.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .. import storage
from ..errors import ConfigError
from ..formats.index import ShardIndex, check_shard_size, index_url
from ..reader import load_index

__all__ = ["folder_counts", "load_indexes"]

_THREADS = 8  # index files fetched at once from a remote folder


def load_indexes(urls: Sequence[str], storage_options: dict[str, Any] | None) -> list[ShardIndex]:
    """The index of every shard; ConfigError naming the first shard that has none."""

    def load(url: str) -> ShardIndex:
        index = load_index(url, storage_options=storage_options)
        if index is None:
            raise ConfigError(
                f"{url} has no index ({index_url(storage.basename(url))}): "
                "run `shardkit index` on its folder first"
            )
        return index

    if len(urls) == 1 or all(storage.is_local(url) for url in urls):
        return [load(url) for url in urls]
    from concurrent.futures import ThreadPoolExecutor  # only remote folders need threads

    with ThreadPoolExecutor(_THREADS) as pool:
        return list(pool.map(load, urls))


def folder_counts(
    folder: str, names: Sequence[str], shards: Sequence[str], storage_options: dict[str, Any] | None
) -> tuple[int, ...] | None:
    """Per-shard sample counts from the ``.idx`` files of a folder listing ``names``, if
    every shard in ``shards`` (names in it) has one, else None. Each index is checked
    against its shard's size now: a stale one raises FormatError."""
    present = set(names)
    if not shards or not all(index_url(name) in present for name in shards):
        return None
    urls = [storage.join(folder, name) for name in shards]
    indexes = load_indexes(urls, storage_options)
    sizes = _sizes(folder, urls, storage_options)
    for url, index in zip(urls, indexes, strict=True):
        check_shard_size(url, index.shard_bytes or 0, sizes[url])
    return tuple(index.samples for index in indexes)


def _sizes(
    folder: str, urls: Sequence[str], storage_options: dict[str, Any] | None
) -> dict[str, int]:
    if storage.is_local(folder):
        return {url: os.stat(storage.local_path(url)).st_size for url in urls}
    fs, path = storage.filesystem(folder, storage_options)
    listed = {storage.basename(str(e["name"])): e.get("size") for e in fs.ls(path, detail=True)}
    sizes = {}
    for url in urls:
        size = listed.get(storage.basename(url))
        sizes[url] = size if isinstance(size, int) else int(fs.size(url))
    return sizes
