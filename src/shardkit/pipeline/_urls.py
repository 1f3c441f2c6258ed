"""The one shard-list resolver: what shards a dataset source names.

``Dataset``, ``IndexedDataset``, ``mix``, every tool (:mod:`shardkit.tools._inputs`) and
``build`` (before it falls back to an image folder) ask :func:`resolve_parts` /
:func:`resolve_source`, so one source means the same shards everywhere. A source is one of:

* a ``manifest.json`` (any URL ending in ``.json``, :func:`is_manifest`): the shards it
  lists, in its order;
* a folder (a local directory, or a remote URL ending in ``/``): its ``manifest.json`` if
  it has one, else every shard file in it (:func:`shardkit.formats.names.is_shard_name`:
  ``.tar``, ``.tgz``, ``.tfrecord``, ``.tfrecords``, ``.tfr``, optionally ``.gz``; not
  hidden, not a folder), in name order; subfolders are not looked into;
* a URL, brace-expanded (``data/shard-{000000..000147}.tar``), or a ``pipe:`` command;
* a list of any of these: their shards, one after the other.

Manifests are read by :func:`shardkit.reader.load_manifest` (every shape is documented in
:mod:`shardkit.formats.manifest`); relative shard names are relative to the manifest's
folder, and a ``pipe:`` shard in a manifest is refused (it is data, not a caller's URL).
Sample counts come from the manifest, else from the ``.idx`` files beside the shards (of
a folder, a local brace pattern or a local URL list alike; a remote pattern opens nothing
before it is read, so name its folder to use them; ``shardkit index`` writes them, and
:mod:`shardkit.pipeline._idxfiles` loads and checks them). They make epochs exact (see
:mod:`shardkit.pipeline._epochs`), and are used only when every shard has one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .. import storage
from ..errors import ConfigError, StorageError
from ..formats import manifest as _manifest
from ..formats.manifest import ManifestContents
from ..formats.names import MANIFEST_NAME, is_shard_name
from ..reader import load_manifest, manifest_urls
from ..storage import LOCAL, Access, StorageOptions
from ._idxfiles import IndexCache, index_counts

__all__ = [
    "FolderListing",
    "ShardList",
    "SourcePart",
    "find_shards",
    "is_manifest",
    "list_folder",
    "parse_manifest",
    "resolve_parts",
    "resolve_source",
]


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


@dataclass(frozen=True)
class SourcePart:
    """The shards one source string names; ``manifest`` and ``contents`` when they come
    from a manifest (what it says of each shard: bytes, digest, classes)."""

    urls: tuple[str, ...]
    counts: tuple[int, ...] | None = None
    manifest: str | None = None
    contents: ManifestContents | None = None


class FolderListing(NamedTuple):
    """A folder's shard files (names, sorted), every name in it, and the shards' sizes."""

    shards: list[str]
    names: frozenset[str]
    sizes: dict[str, int | None]

    @property
    def has_manifest(self) -> bool:
        return MANIFEST_NAME in self.names


def is_manifest(url: str) -> bool:
    """Whether a source string names a manifest (the one rule: it ends in ``.json``)."""
    return url.split("?", 1)[0].lower().endswith(".json")


def resolve_source(
    source: str | Sequence[str],
    *,
    storage_options: Access | StorageOptions | None = None,
    counts: bool = True,
    indexes: IndexCache | None = None,
) -> ShardList:
    """The :class:`ShardList` a source names (see the module docs for the forms).
    ``counts=False`` skips the ``.idx`` files (only the URLs are wanted); ``indexes``:
    the reader's index cache, which keeps the tables of the indexes counted."""
    parts = resolve_parts(source, access=Access.of(storage_options), counts=counts, indexes=indexes)
    urls = tuple(url for part in parts for url in part.urls)
    known = [part.counts for part in parts]
    if any(part_counts is None for part_counts in known):
        return ShardList(urls)
    return ShardList(urls, tuple(n for part_counts in known for n in part_counts or ()))


def resolve_parts(
    source: str | Sequence[str],
    *,
    access: Access = LOCAL,
    counts: bool = True,
    indexes: IndexCache | None = None,
) -> list[SourcePart]:
    """The shards of each part of a source, in order: a folder or manifest is one part,
    and a run of plain URLs (brace-expanded) another. A ConfigError for a source that
    names no shards."""
    if isinstance(source, str):
        specs: list[str] = [source]
    elif (
        source
        and not isinstance(source, (bytes, bytearray))
        and all(isinstance(url, str) for url in source)
    ):
        specs = list(source)
    else:
        raise ConfigError(f"a source is a URL or a non-empty list of URLs, not {source!r}")
    parts: list[SourcePart] = []
    plain: list[str] = []
    for spec in specs:
        part = _named(spec, access, counts, indexes)
        if part is None:
            plain.append(spec)
            continue
        if plain:
            parts.append(_plain(plain, access, counts, indexes))
            plain = []
        if not part.urls:
            raise ConfigError(f"no shards (.tar, .tfrecord, ...) and no {MANIFEST_NAME} in {spec}")
        parts.append(part)
    if plain:
        parts.append(_plain(plain, access, counts, indexes))
    return parts


def find_shards(source: str, *, access: Access = LOCAL, counts: bool = False) -> SourcePart | None:
    """What :func:`resolve_parts` makes of one source string, or None when it is a folder
    that holds neither a manifest nor a shard file (the build then reads it as an image
    folder)."""
    part = _named(source, access, counts)
    if part is None:
        return _plain([source], access, counts)
    return part if part.urls else None


def _named(
    spec: str,
    access: Access,
    counts: bool,
    indexes: IndexCache | None = None,
) -> SourcePart | None:
    """The part a manifest or folder names (empty for a folder without shards), or None
    for a plain URL or pattern."""
    if storage.is_executing(spec):
        return None
    if is_manifest(spec):
        return _read_manifest(spec, access)
    if _is_folder(spec):
        return _folder(spec, access, counts, indexes)
    return None


def _plain(
    specs: Sequence[str],
    access: Access,
    counts: bool,
    indexes: IndexCache | None = None,
) -> SourcePart:
    urls = tuple(storage.expand_urls(list(specs)))
    return SourcePart(urls, _beside(urls, access, indexes) if counts else None)


def _beside(
    urls: Sequence[str], access: Access, indexes: IndexCache | None
) -> tuple[int, ...] | None:
    """Counts from the ``.idx`` files beside a pattern's or list's local shards. Remote
    ones are not looked for: a remote pattern opens nothing before it is read (and an
    http server's answer for a missing file is not to be trusted); its folder
    (``s3://bucket/train/``) is listed, and its indexes used, as a source."""
    if all(storage.is_local(url) for url in urls):
        return index_counts(urls, access=access, cache=indexes)
    return None


def _is_folder(url: str) -> bool:
    if "{" in url:
        return False
    if storage.is_local(url):
        return os.path.isdir(storage.local_path(url))
    return url.endswith("/")


def _folder(
    url: str,
    access: Access,
    counts: bool,
    indexes: IndexCache | None = None,
) -> SourcePart:
    listing = list_folder(url, access)
    if listing.has_manifest:
        return _read_manifest(storage.join(url, MANIFEST_NAME), access)
    urls = tuple(storage.join(url, name) for name in listing.shards)
    if not counts or not urls:
        return SourcePart(urls)
    sizes = [listing.sizes.get(name) for name in listing.shards]
    found = index_counts(urls, access=access, listed=listing.names, sizes=sizes, cache=indexes)
    return SourcePart(urls, found)


def list_folder(url: str, access: Access = LOCAL) -> FolderListing:
    """The shard files of one folder (local, or a remote URL), not looking into
    subfolders, and every name in it: a local one through the reading door
    (:func:`shardkit.storage.folder_entries`: only a regular file is a shard; a FIFO at an
    ``.idx`` name is listed, so loading it names it rather than the count going unknown);
    a StorageError when it cannot be listed."""
    names: set[str] = set()
    sizes: dict[str, int | None] = {}
    if storage.is_local(url):  # the reading door's listing: a FIFO is named, never a shard
        try:
            found, regular = storage.folder_entries(storage.local_path(url))
        except OSError as exc:
            raise StorageError(f"cannot list the folder: {exc.strerror or exc}", url=url) from exc
        names.update(found)
        sizes.update((name, size) for name, size in regular.items() if is_shard_name(name))
    else:
        fs, path = storage.filesystem(url, access)
        try:
            entries = fs.ls(path, detail=True)
        except FileNotFoundError as exc:
            raise StorageError("no such folder", url=url) from exc
        except OSError as exc:
            raise StorageError(f"cannot list the folder: {exc}", url=url) from exc
        for entry in entries:
            name = storage.basename(str(entry["name"]))
            names.add(name)
            if is_shard_name(name) and entry.get("type") != "directory":
                size = entry.get("size")
                sizes[name] = size if isinstance(size, int) else None
    return FolderListing(sorted(sizes), frozenset(names), sizes)


def _read_manifest(url: str, access: Access) -> SourcePart:
    contents, urls = load_manifest(url, access=access)
    return SourcePart(urls, contents.counts, manifest=url, contents=contents)


def parse_manifest(document: Any, *, base: str = "") -> ShardList:
    """A :class:`ShardList` from a parsed manifest; relative URLs are joined to ``base``."""
    contents = _manifest.parse_manifest(document)
    return ShardList(manifest_urls(contents, base=base, found_in="the manifest"), contents.counts)
