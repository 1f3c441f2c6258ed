"""Turn a dataset source into a shard list: URL patterns, shard folders, manifests.

A source is one of:

* a URL or a list of URLs, brace-expanded (``data/shard-{000000..000147}.tar``);
* a folder (a local directory, or a remote URL ending in ``/``): its ``manifest.json`` if it
  has one, else every shard file in it (``.tar``, ``.tgz``, ``.tar.gz``, ``.tfrecord``,
  ``.tfrecords``, ``.tfr``, optionally ``.gz``), in name order, with their sample counts
  when every shard has an index (``shardkit index DIR`` writes them, see
  :mod:`shardkit.pipeline.idxfiles`);
* a ``manifest.json`` (any URL ending in ``.json``).

A manifest is a JSON object with a ``shards`` list (webdataset's ``shardlist`` is read too)
whose entries name a shard (``url``, ``name`` or ``path``; relative ones are relative to the
manifest's folder) and may give its sample count (``samples``, ``nsamples``, ``count`` or
``num_samples``). Counts make epochs exact (see :mod:`shardkit.pipeline.epochs`); they are
used only when every shard has one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import storage
from ..errors import ConfigError, StorageError
from .idxfiles import folder_counts

__all__ = ["MANIFEST_NAME", "ShardList", "is_shard_name", "parse_manifest", "resolve_source"]

MANIFEST_NAME = "manifest.json"

_SHARD_SUFFIXES = (".tar", ".tgz", ".tfrecord", ".tfrecords", ".tfr")
_URL_KEYS = ("url", "name", "path")
_COUNT_KEYS = ("samples", "nsamples", "count", "num_samples")


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


def is_shard_name(name: str) -> bool:
    """Whether a file name looks like a shard (tar or TFRecord, optionally gzipped)."""
    lower = name.lower()
    lower = lower[:-3] if lower.endswith(".gz") else lower
    return lower.endswith(_SHARD_SUFFIXES) and not name.startswith(".")


def resolve_source(
    source: str | Sequence[str], *, storage_options: dict[str, Any] | None = None
) -> ShardList:
    """The :class:`ShardList` a source names (see the module docs for the forms)."""
    if isinstance(source, str):
        if source.startswith("pipe:"):
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
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError as exc:
        raise StorageError("no such folder", url=url) from exc
    return [storage.basename(str(entry)) for entry in entries]


def _read_manifest(url: str, storage_options: dict[str, Any] | None) -> ShardList:
    with storage.open_read(url, storage_options=storage_options) as stream:
        data = stream.read()
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"manifest is not valid JSON: {exc}") from exc
    return parse_manifest(document, base=url.rsplit("/", 1)[0] if "/" in url else "")


def parse_manifest(document: Any, *, base: str = "") -> ShardList:
    """A :class:`ShardList` from a parsed manifest; relative URLs are joined to ``base``."""
    entries = document
    if isinstance(document, Mapping):
        entries = document.get("shards", document.get("shardlist"))
    if not isinstance(entries, list) or not entries:
        raise ConfigError("a manifest needs a non-empty 'shards' list")
    urls: list[str] = []
    counts: list[int] = []
    for index, entry in enumerate(entries):
        url, count = _parse_entry(entry, index)
        urls.append(url if not base or _is_absolute(url) else storage.join(base, url))
        if count is not None:
            counts.append(count)
    return ShardList(tuple(urls), tuple(counts) if len(counts) == len(urls) else None)


def _parse_entry(entry: Any, index: int) -> tuple[str, int | None]:
    if isinstance(entry, str):
        return entry, None
    if not isinstance(entry, Mapping):
        raise ConfigError(f"manifest shard {index} is neither a URL nor an object")
    url = next((entry[k] for k in _URL_KEYS if isinstance(entry.get(k), str)), None)
    if url is None:
        raise ConfigError(f"manifest shard {index} has no 'url', 'name' or 'path'")
    count = next((entry[k] for k in _COUNT_KEYS if k in entry), None)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ConfigError(f"manifest shard {index} ({url}) has a bad sample count {count!r}")
    return url, count


def _is_absolute(url: str) -> bool:
    return not storage.is_local(url) or url.startswith(("/", "file:"))
