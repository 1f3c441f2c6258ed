"""The samples a viewer shows: by number, a page at a time, filtered, with statistics.

A source with an ``.idx`` file for every shard is read by random access
(:class:`~shardkit.pipeline._indexed.IndexedDataset`): any page costs the reads of its own
samples, and a key filter runs over the index keys without reading a sample. Without
indexes the samples are read forward from the start (a later shard is started directly
once the number of its first sample is known).

What is kept is bounded in bytes, not samples: the samples read last, whole while they
hold little copied memory (a field of a local tar shard is a view of the memory-mapped
shard: page cache, not the process's own memory); of a larger sample only
its key, label, field names and small fields, so a page of big samples costs one sample
at a time and a sample page reads its sample again. A local tar shard is read by index
with ``copy=False`` too: a grid page touches headers and labels, not every field.

A local shard is memory-mapped while it is read: if it is overwritten in place
(truncated) the process would die of SIGBUS when it touches a page past the new end. Its
size, modification time and inode are noted when it is first read and checked before
every request that reads or shows its samples: a shard that changed is a
:class:`ShardChangedError` (the server answers 409), never a crash.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ... import storage
from ...errors import ConfigError, FormatError, ShardkitError
from ...formats.names import MANIFEST_NAME
from ...reader import detect_format, read_shard
from ...storage import LOCAL, Access
from .._inputs import ShardRef, read_manifest
from ..stats import Stats, stats
from ..tsv import label_text

__all__ = ["Catalog", "Entry", "Page", "ShardChangedError"]

_KEPT = 512  # samples kept (each whole or as its summary; a view pins its shard's map)
CACHE_BYTES = 64 << 20  # copied field bytes kept, at most
_SMALL = 64 << 10  # a field up to this size stays in a sample's summary
_FILTERS = 16  # filter scans kept (their matches so far)


@dataclass(frozen=True)
class Entry:
    """One sample: its number, key, shard, byte offset and fields (raw values)."""

    index: int
    key: str
    url: str
    offset: int | None
    fields: dict[str, Any]
    whole: bool = True  # False: a summary (fields over 64 KiB are Omitted)
    label: str | None = None  # the label, when a summary holds it


@dataclass(frozen=True)
class Omitted:
    """A field a summary does not hold: its size."""

    size: int


class ShardChangedError(ShardkitError):
    """A shard changed on disk while the viewer had it open."""


@dataclass(frozen=True)
class Page:
    """The samples of one page, whether more follow, and the matches known so far."""

    entries: list[Entry]
    more: bool
    total: int | None  # samples that match, when known


@dataclass
class _Scan:
    """The samples matching one filter, found so far, and where the search goes on."""

    matches: list[int] = field(default_factory=list)
    next: int = 0
    done: bool = False


class Catalog:
    """The samples of ``source`` (anything :class:`shardkit.Dataset` takes), by number.

    Thread-safe: one lock serializes reads (the server's threads share one catalog).
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        label: str | None = "cls",
        access: Access = LOCAL,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        from ...pipeline import resolve_source

        self.source = source
        self.label = label
        self._access = access
        shards = resolve_source(source, storage_options=access)
        self.urls = shards.urls
        self._manifest = _manifest_url(source, access)
        self.classes = (
            read_manifest(self._manifest, storage_options=access).classes if self._manifest else {}
        )
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()  # the stats read on their own: pages go on
        self._kept: OrderedDict[int, tuple[Entry, int]] = OrderedDict()  # with its cost
        self._kept_bytes = 0
        self._cache_bytes = cache_bytes
        self._opened: dict[str, tuple[int, int, int]] = {}  # local shard -> size, mtime, inode
        self._scans: OrderedDict[tuple[str, str], _Scan] = OrderedDict()
        self._starts: dict[int, int] = {0: 0}  # shard number -> number of its first sample
        self._stream: Iterator[Entry] | None = None
        self._position = 0  # the number of the sample self._stream yields next
        self._stats: Stats | None = None
        self._stats_read: dict[str, tuple[int, int, int]] = {}  # like _opened, for stats
        self._indexed, self._keys, self._ends, self.note = self._open_indexed()
        self.total: int | None = self._ends[-1] if self._ends else shards.total
        if self._indexed is None:
            self._sample(0)  # a source that does not read fails now, not in the browser

    def _open_indexed(self) -> tuple[Any, list[str], list[int], str | None]:
        from ...pipeline import IndexedDataset, load_indexes

        try:
            loaded = load_indexes(self.urls, access=self._access, required=True)
            indexes = [index for index in loaded if index is not None]  # required: all there
            # copy=False: a local shard's fields are views of its mapping (a grid page
            # touches the headers and labels, not every sample's bytes).
            dataset = IndexedDataset(list(self.urls), storage_options=self._access, copy=False)
            len(dataset)  # loads and checks the indexes
        except (ConfigError, FormatError) as exc:
            return None, [], [], f"reading forward from the first shard: {exc}"
        keys = [key for index in indexes for key in index.keys]
        ends = list(itertools.accumulate(index.samples for index in indexes))
        return dataset, keys, ends, None

    @property
    def indexed(self) -> bool:
        """Whether samples are read by random access (every shard has its index)."""
        return self._indexed is not None

    def sample(self, index: int) -> Entry | None:
        """Sample ``index`` (whole), or None past the end."""
        with self._lock:
            self._check_unchanged()
            return self._sample(index)

    def page(self, number: int, size: int, *, key: str = "", label: str = "") -> Page:
        """Page ``number`` (from 0) of ``size`` samples whose key holds ``key`` and whose
        label is ``label`` (empty: any)."""
        with self._lock:
            self._check_unchanged()
            if not key and not label:
                first = number * size
                entries = [e for i in range(first, first + size) if (e := self._summary(i))]
                return Page(entries, self._summary(first + size) is not None, self.total)
            scan = self._scan(key, label, (number + 1) * size + 1)
            chosen = scan.matches[number * size : (number + 1) * size]
            entries = [e for i in chosen if (e := self._summary(i))]
            more = len(scan.matches) > (number + 1) * size
            return Page(entries, more, len(scan.matches) if scan.done else None)

    def label_of(self, entry: Entry) -> str:
        """The sample's label as text (a class name where the manifest names one)."""
        if self.label is None:
            return ""
        if entry.label is not None:
            return entry.label
        return label_text(entry.fields, self.label, self.classes)

    def stats(self) -> Stats:
        """Statistics over every sample (read once, on first use, then kept while no
        local shard changed on disk since: else a :class:`ShardChangedError`)."""
        with self._stats_lock:
            if self._stats is None:
                for url in self.urls:
                    _note(self._stats_read, url)
                refs = [
                    ShardRef(url, *detect_format(url), manifest=self._manifest) for url in self.urls
                ]
                self._stats = stats(refs, label=self.label, storage_options=self._access)
            _raise_if_changed(self._stats_read)  # before this read, or since
            return self._stats

    def close(self) -> None:
        with self._lock:
            if self._indexed is not None:
                self._indexed.close()
            self._stream = None

    # ------------------------------------------------------------------ reading

    def _sample(self, index: int) -> Entry | None:
        """Sample ``index`` whole (read again when only its summary is kept)."""
        if index < 0:
            return None
        kept = self._kept.get(index)
        if kept is not None and kept[0].whole:
            self._kept.move_to_end(index)
            return kept[0]
        if self._indexed is not None:
            if index >= len(self._keys):
                return None
            self._note_open(self._indexed.locate(index)[0])
            entry: Entry | None = _entry(index, self._indexed.raw(index))
        else:
            entry = self._forward(index)
        if entry is not None:
            self._keep(entry)
        return entry

    def _summary(self, index: int) -> Entry | None:
        """Sample ``index`` as kept: whole or its summary (what a grid tile shows)."""
        kept = self._kept.get(index)
        if kept is not None:
            self._kept.move_to_end(index)
            return kept[0]
        entry = self._sample(index)
        return None if entry is None else self._kept.get(index, (entry, 0))[0]

    def _keep(self, entry: Entry) -> None:
        """Keep ``entry`` whole while it is small next to the cache, else its summary;
        the oldest go first past the cache's bytes (or ``_KEPT`` samples)."""
        cost = _copied(entry.fields)
        if cost > self._cache_bytes // 8:
            fields = {
                name: Omitted(_size(value)) if _copied(value) > _SMALL else value
                for name, value in entry.fields.items()
            }
            label = self.label_of(entry)
            entry = Entry(entry.index, entry.key, entry.url, entry.offset, fields, False, label)
            cost = _copied(fields)
        old = self._kept.pop(entry.index, None)
        self._kept_bytes += cost - (old[1] if old else 0)
        self._kept[entry.index] = (entry, cost)
        while self._kept and (self._kept_bytes > self._cache_bytes or len(self._kept) > _KEPT):
            self._kept_bytes -= self._kept.popitem(last=False)[1][1]

    def _forward(self, index: int) -> Entry | None:
        if self._stream is None or index < self._position:
            shard = max(s for s, start in self._starts.items() if start <= index)
            self._stream, self._position = self._samples_from(shard), self._starts[shard]
        for entry in self._stream:
            self._position = entry.index + 1
            if entry.index == index:
                return entry
            self._keep(entry)
        self.total = self._position
        self._stream = None
        return None

    # ------------------------------------------------------------------ changes on disk

    def _note_open(self, url: str) -> None:
        _note(self._opened, url)

    def _check_unchanged(self) -> None:
        """Raise :class:`ShardChangedError` when a shard read so far changed on disk (a
        memory-mapped shard cut short would crash the process when touched)."""
        _raise_if_changed(self._opened)

    def _samples_from(self, shard: int) -> Iterator[Entry]:
        number = self._starts[shard]
        for s in range(shard, len(self.urls)):
            self._starts[s] = number
            self._note_open(self.urls[s])
            # copy=False: a local tar's fields are views of its mapping, not copies.
            for raw in read_shard(self.urls[s], storage_options=self._access, copy=False):
                yield _entry(number, raw)
                number += 1
        self._starts[len(self.urls)] = number

    # ------------------------------------------------------------------ filtering

    def _scan(self, key: str, label: str, wanted: int) -> _Scan:
        scan = self._scans.pop((key, label), None) or _Scan()
        self._scans[(key, label)] = scan
        while len(self._scans) > _FILTERS:
            self._scans.popitem(last=False)
        while not scan.done and len(scan.matches) < wanted:
            index = self._next_candidate(scan.next, key)
            if index is None:
                scan.done = True
                break
            scan.next = index + 1
            if label:
                entry = self._summary(index)
                if entry is None:
                    scan.done = True
                    break
                if self.label_of(entry) != label or key not in entry.key:
                    continue
            elif not self._keys:
                entry = self._summary(index)
                if entry is None:
                    scan.done = True
                    break
                if key not in entry.key:
                    continue
            scan.matches.append(index)
        return scan

    def _next_candidate(self, start: int, key: str) -> int | None:
        """The first sample from ``start`` that may match: by the index keys when there
        are indexes, else simply ``start`` (the sample itself is read to check)."""
        if not self._keys:
            return start
        for index in range(start, len(self._keys)):
            if key in self._keys[index]:
                return index
        return None

    def shard_of(self, entry: Entry) -> int | None:
        """The number of the shard holding ``entry`` (in the source's order)."""
        if self._ends:
            return bisect.bisect_right(self._ends, entry.index)
        return self.urls.index(entry.url) if entry.url in self.urls else None


def _entry(index: int, raw: dict[str, Any]) -> Entry:
    fields = {k: v for k, v in raw.items() if not k.startswith("__")}
    offset = raw.get("__offset__")
    return Entry(
        index,
        str(raw.get("__key__", "")),
        str(raw.get("__url__", "")),
        offset if isinstance(offset, int) else None,
        dict(sorted(fields.items())),
    )


def _note(seen: dict[str, tuple[int, int, int]], url: str) -> None:
    """Note a local shard's size, modification time and inode as it is first read."""
    if url not in seen and storage.is_local(url):
        with contextlib.suppress(OSError):  # the read says what is wrong
            seen[url] = _identity(url)


def _raise_if_changed(seen: dict[str, tuple[int, int, int]]) -> None:
    """Raise :class:`ShardChangedError` when a shard noted in ``seen`` changed on disk."""
    for url, then in seen.items():
        try:
            now = _identity(url)
        except OSError:
            now = (-1, 0, 0)
        if now != then:
            size = "gone" if now[0] < 0 else f"{then[0]:,} -> {now[0]:,} bytes"
            raise ShardChangedError(
                f"{url} changed on disk while the viewer had it open ({size}); "
                "restart the viewer to read it again"
            )


def _identity(url: str) -> tuple[int, int, int]:
    info = os.stat(storage.local_path(url))
    return info.st_size, info.st_mtime_ns, info.st_ino


def _size(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, (list, tuple)):
        return 8 * len(value) + sum(_size(item) for item in value)
    return 64


def _copied(value: Any) -> int:
    """The bytes of ``value`` held in this process's own memory (a view of a memory-mapped
    shard holds none: its pages are the page cache's)."""
    if isinstance(value, memoryview) and isinstance(value.obj, mmap.mmap):
        return 0
    if isinstance(value, dict):
        return sum(_copied(item) for item in value.values())
    return _size(value)


def _manifest_url(source: str | Sequence[str], access: Access) -> str | None:
    """The manifest a source names or holds, if any (its class names label the samples)."""
    if not isinstance(source, str) or storage.is_executing(source):
        return None
    if source.lower().endswith(".json"):
        return source
    if storage.is_local(source):
        path = os.path.join(storage.local_path(source), MANIFEST_NAME)
        return path if os.path.isfile(path) else None
    if not source.endswith("/"):
        return None
    url = storage.join(source, MANIFEST_NAME)
    try:
        fs, path = storage.filesystem(url, access)
        return url if fs.exists(path) else None
    except (ShardkitError, OSError):
        return None
