"""Turn a dataset source into a shard list: URL patterns, shard folders, manifests.

A source is one of:

* a URL or a list of URLs, brace-expanded (``data/shard-{000000..000147}.tar``);
* a folder (a local directory, or a remote URL ending in ``/``): its ``manifest.json`` if it
  has one, else every shard file in it (:func:`shardkit.formats.names.is_shard_name`:
  ``.tar``, ``.tgz``, ``.tfrecord``, ``.tfrecords``, ``.tfr``, optionally ``.gz``), in name
  order, with their sample counts when every shard has an index (``shardkit index DIR``
  writes them, see :mod:`shardkit.pipeline.idxfiles`);
* a ``manifest.json`` (any URL ending in ``.json``).

Manifests are read by :func:`shardkit.reader.load_manifest` (every shape is documented in
:mod:`shardkit.formats.manifest`); relative shard names are relative to the manifest's
folder, and a ``pipe:`` shard in a manifest is refused (it is data, not a caller's URL).
Sample counts make epochs exact (see :mod:`shardkit.pipeline.epochs`); they are used only
when every shard has one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import storage
from ..errors import ConfigError, StorageError
from ..formats import manifest as _manifest
from ..formats.names import MANIFEST_NAME, is_shard_name
from ..reader import load_manifest, manifest_urls
from .idxfiles import folder_counts

__all__ = ["ShardList", "parse_manifest", "resolve_source"]


@dataclass(frozen=True)
class ShardList:
    """The shards of a dataset, in their canonical order, with sample counts if known."""

    urls: tuple[str, ...]
    counts: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ConfigError("the dataset source names no shards")
        if self.counts is not None and len(self.counts) != len(self.urls):
            raise ConfigError("a ShardList needs one sample count per shard")

    @property
    def total(self) -> int | None:
        """Samples in the whole dataset, if every shard's count is known."""
        return None if self.counts is None else sum(self.counts)


def resolve_source(
    source: str | Sequence[str], *, storage_options: dict[str, Any] | None = None
) -> ShardList:
    """The :class:`ShardList` a source names (see the module docs for the forms)."""
    if isinstance(source, str):
        if storage.is_executing(source):
            return ShardList((source,))
        if source.lower().endswith(".json"):
            return _read_manifest(source, storage_options)
        if _is_folder(source):
            return _list_folder(source, storage_options)
        return ShardList(tuple(storage.expand_urls(source)))
    if not source or not all(isinstance(url, str) for url in source):
        raise ConfigError(f"a source is a URL or a non-empty list of URLs, not {source!r}")
    return ShardList(tuple(storage.expand_urls(list(source))))


def _is_folder(url: str) -> bool:
    if "{" in url:
        return False
    if storage.is_local(url):
        return os.path.isdir(storage.local_path(url))
    return url.endswith("/")


def _list_folder(url: str, storage_options: dict[str, Any] | None) -> ShardList:
    names = _folder_names(url, storage_options)
    if MANIFEST_NAME in names:
        return _read_manifest(storage.join(url, MANIFEST_NAME), storage_options)
    shards = sorted(name for name in names if is_shard_name(name))
    if not shards:
        raise ConfigError(f"no shards (.tar, .tfrecord, ...) and no {MANIFEST_NAME} in {url}")
    counts = folder_counts(url, names, shards, storage_options)
    return ShardList(tuple(storage.join(url, name) for name in shards), counts)


def _folder_names(url: str, storage_options: dict[str, Any] | None) -> list[str]:
    if storage.is_local(url):
        return os.listdir(storage.local_path(url))
    fs, path = storage.filesystem(url, storage_options)
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError as exc:
        raise StorageError("no such folder", url=url) from exc
    return [storage.basename(str(entry)) for entry in entries]


def _read_manifest(url: str, storage_options: dict[str, Any] | None) -> ShardList:
    contents, urls = load_manifest(url, storage_options=storage_options)
    return ShardList(urls, contents.counts)


def parse_manifest(document: Any, *, base: str = "") -> ShardList:
    """A :class:`ShardList` from a parsed manifest; relative URLs are joined to ``base``."""
    contents = _manifest.parse_manifest(document)
    return ShardList(manifest_urls(contents, base=base, found_in="the manifest"), contents.counts)
