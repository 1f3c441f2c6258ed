"""The one ``.idx`` loader: every consumer of an index (``Dataset``'s sample counts,
:class:`~shardkit.pipeline._indexed.IndexedDataset`, ``verify``, the build from shards)
loads it here.

An index is untrusted input like any file read. :func:`read_index` is the one place an
``.idx`` file is opened and parsed; :func:`load_index` then checks it whole
(:func:`shardkit.formats.index.check_index`: it names its shard, each key once, spans in
order, not overlapping, inside the shard and the reader's limits) and, given the shard's
size, refuses a stale one (made for a shard of another size). :func:`load_indexes` loads
many, at most :data:`shardkit.storage.REQUESTS_IN_FLIGHT` remote ones at once.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Literal, TypeVar, cast

from .. import storage
from ..errors import ConfigError, FormatError, StorageError
from ..formats.index import (
    ShardIndex,
    check_index,
    check_shard_size,
    index_url,
    prepared_members,
)
from ..formats.members import MemberTable
from ..formats.names import INDEX_SUFFIX
from ..formats.tar import TableNotes
from ..storage import LOCAL, Access, StorageOptions

__all__ = [
    "IndexCache",
    "index_counts",
    "load_index",
    "load_indexes",
    "read_index",
    "shard_size",
]

_log = logging.getLogger(__name__)
_NONE = object()
_Table = MemberTable | TableNotes
_Kept = TypeVar("_Kept")
# An index cache entry: (stamp of the shard and index files, member table, sample count)
# (a table that fails its check against the index's spans is kept as that FormatError)
_Entry = tuple[object, _Table | FormatError | None, int | None]
#: What a Loader's worker sends its parent of a shard it read: (url, stamp, what it
#: learnt, the index's sample count or None): the notes of the table its parse found;
#: None, when it checked the index table the parent holds against the shard's bytes; or
#: the index table it loaded itself (the parent holds none) and checked; see
#: IndexCache.ship.
Shipped = tuple[str, object, TableNotes | MemberTable | None, int | None]

Sizes = Sequence[int | None] | Literal["stat"] | None
"""Shard sizes to check indexes against: one per URL (None: ask the storage), ``"stat"``
to ask the storage for each, or None to check none."""


def read_index(shard_url: str, access: Access, source: str | None = None) -> ShardIndex | None:
    """The parsed ``.idx`` file of a shard, unchecked, or None when it has none (the one
    place an index file is opened); ``source``: where its bytes are instead (a cache
    copy)."""
    url = index_url(shard_url) if source is None else source
    if not storage.url_exists(url, access):
        return None
    data = storage.read_document(url, access=access, what="index file")
    return ShardIndex.from_json(data, url=url)


def load_index(
    shard_url: str,
    *,
    storage_options: Access | StorageOptions | None = None,
    size: int | None = None,
    unchecked: Literal["raise", "ignore"] = "raise",
    source: str | None = None,
) -> ShardIndex | None:
    """The index of a shard, checked whole (see the module docs), or None when it has none;
    with ``size``, a stale index (made for a shard of another size) is a FormatError.
    ``unchecked="ignore"``: an index that fails the whole check is None (logged), for a
    caller that can read the shard through instead. ``source``: where the index's bytes
    are, when not beside the shard (a cache copy; it is checked as the shard's)."""
    index = read_index(shard_url, Access.of(storage_options), source)
    if index is None:
        return None
    try:
        check_index(index, storage.basename(shard_url), url=index_url(shard_url))
    except FormatError as exc:
        if unchecked == "raise":
            raise
        _log.warning("%s: not used, the shard is read through instead", exc)
        return None
    if size is not None:
        check_shard_size(shard_url, index.shard_bytes or 0, size)
    return index


def load_indexes(
    urls: Sequence[str],
    *,
    access: Access = LOCAL,
    sizes: Sizes = None,
    required: bool = False,
    unchecked: Literal["raise", "ignore"] = "raise",
) -> list[ShardIndex | None]:
    """:func:`load_index` for each shard (remote ones at most
    ``storage.REQUESTS_IN_FLIGHT`` at once); with ``required``, a ConfigError naming the
    first shard that has none; ``unchecked`` as for :func:`load_index`."""

    def fetch(url: str, size: int | None) -> ShardIndex | None:
        return load_index(url, storage_options=access, size=size, unchecked=unchecked)

    return _each_index(urls, fetch, access, sizes, required)


def _each_index(
    urls: Sequence[str],
    fetch: Callable[[str, int | None], _Kept | None],
    access: Access,
    sizes: Sizes,
    required: bool = False,
) -> list[_Kept | None]:
    """``fetch(url, size)`` of each shard (None: it has no index), as
    :func:`load_indexes` loads them: what is not kept is let go before the next is
    loaded."""

    def load(i: int) -> _Kept | None:
        url = urls[i]
        size = None if sizes is None or sizes == "stat" else sizes[i]
        if sizes is not None and size is None:
            size = shard_size(url, access)
        found = fetch(url, size)
        if found is None and required:
            raise ConfigError(
                f"{url} has no index ({storage.basename(index_url(url))}): "
                "run `shardkit index` on its folder first"
            )
        return found

    if len(urls) <= 1 or all(storage.is_local(url) for url in urls):
        return [load(i) for i in range(len(urls))]
    from concurrent.futures import ThreadPoolExecutor  # only remote shards need threads

    with ThreadPoolExecutor(min(storage.REQUESTS_IN_FLIGHT, len(urls))) as pool:
        return list(pool.map(load, range(len(urls))))


def index_counts(
    urls: Sequence[str],
    *,
    access: Access = LOCAL,
    listed: Collection[str] | None = None,
    sizes: Sizes = "stat",
    cache: IndexCache | None = None,
) -> tuple[int, ...] | None:
    """Per-shard sample counts from the ``.idx`` files beside ``urls``, when every shard
    has one, else None. ``listed``: the names in the shards' folder, when it was listed
    (else the first shard's index is looked for, and the others only if it is there).
    Each index is loaded by :func:`load_indexes` and checked against its shard's size:
    a bad or stale one raises FormatError. ``cache``: the reader's :class:`IndexCache`
    (local shards only: a remote one's index is not read through), which keeps each
    index's member table, so that reading the shard in this process does not load its
    index again."""
    if not urls or any(storage.is_executing(url) for url in urls):
        return None
    if listed is not None:
        if not all(storage.basename(index_url(url)) in listed for url in urls):
            return None
    elif not storage.url_exists(index_url(urls[0]), access):
        return None  # a list without indexes costs one look
    kept = cache if cache is not None and all(map(storage.is_local, urls)) else None

    def samples(url: str, size: int | None) -> int | None:
        if kept is not None and kept.has_room(url):  # (the reader looks it up there)
            return kept.samples(url, access, size)
        index = load_index(url, storage_options=access, size=size)
        return None if index is None else index.samples  # one index is held at a time

    found = _each_index(urls, samples, access, sizes)
    counts = [count for count in found if count is not None]
    return tuple(counts) if len(counts) == len(urls) else None


def shard_size(url: str, access: Access) -> int:
    """A shard's size in bytes, as its storage states it."""
    if storage.is_local(url):
        return os.stat(storage.local_path(url)).st_size
    fs, path = storage.filesystem(url, access)
    return int(fs.size(path))


class IndexCache:
    """The member tables (:mod:`shardkit.formats.members`) of the shards one reader
    opens, each index loaded and checked once per process (:func:`load_index`; the
    shard list's counts fill it, :func:`index_counts`), the table kept with
    its verdict against the shard's bytes, at most ``limit`` samples' worth, the least
    recently used let go first. A local shard's entry holds while neither it nor its
    index changes (size, mtime, inode), a cached remote shard's while neither copy is
    replaced (size, inode); a remote one's read without a cache for the run (a cache
    copy read is checked against the size the table was made for). An index without a
    table (an older one) is remembered as such. A shard without a table (no index, or an
    older one) gets the table its second parse notes (:meth:`keeper`), made from the
    notes when it is next read; one whose members a table cannot describe is parsed
    each time. It belongs to one process: a pickled copy (a DataLoader worker's) starts
    empty."""

    def __init__(self, limit: int = 1 << 22) -> None:
        self.limit = limit
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._held = 0
        self._missed: dict[str, object] = {}  # url -> stamp, of shards read without a table
        self._read: dict[str, object] = {}  # url -> stamp, of shards parsed once already
        self._shipped: list[Shipped] | None = None  # a Loader worker's notes (ship())
        # A shipping worker's index tables not yet checked against their shard's bytes:
        # (stamp, table, loaded here: the parent does not hold it)
        self._checking: dict[str, tuple[object, MemberTable, bool]] = {}
        self._loaded: set[str] = set()  # urls whose index this process loaded itself

    def ship(self) -> None:
        """Note the table of each shard read without one at its first parse, and hold the
        notes for :meth:`shipped` (in a :class:`~shardkit.Loader`'s worker: its parent
        keeps them, :meth:`adopt`, so that the next epoch's workers, forked from it, slice
        those shards; a worker process lives one epoch, and reads a shard once)."""
        if self._shipped is None:
            self._shipped = []
            self._loaded = set()  # what this process held at its start, its parent holds

    def shipped(self) -> list[Shipped]:
        """The notes held since the last call (see :meth:`ship`), and the index tables
        checked against their shard's bytes since (as ``(url, stamp, None, None)``)."""
        for url, (stamp, table, loaded) in list(self._checking.items()):
            if table.verified:
                del self._checking[url]
                if self._shipped is not None:
                    entry = self._entries.get(url)
                    count = entry[2] if entry is not None and entry[0] == stamp else None
                    self._shipped.append((url, stamp, table if loaded else None, count))
        if not self._shipped:
            return []
        out, self._shipped = self._shipped, []
        return out

    def adopt(self, shipped: Iterable[Shipped]) -> None:
        """Keep the tables of a worker's notes (:meth:`shipped`), made now, once, for the
        processes forked from this one; a shard changed since (its stamp) is left out."""
        for url, stamp, notes, count in shipped:
            entry = self._entries.get(url)
            held = entry if entry is not None and entry[0] == stamp else None
            if notes is None or isinstance(notes, MemberTable):  # an index table checked
                if held is not None and isinstance(held[1], MemberTable):
                    held[1].verified = True  # against the bytes (this one's, or the same)
                elif held is None and notes is not None:  # (one the worker loaded itself)
                    notes.verified = True
                    self._keep(url, (stamp, notes, count))
            elif not isinstance(notes, TableNotes):
                raise TypeError(f"adopt() takes a worker's table notes, not {notes!r}")
            elif held is None or held[1] is None:
                self._keep(url, (stamp, notes.table(), count))

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["limit"])  # type: ignore[misc]

    def get(self, url: str, access: Access, cache_dir: str | None = None) -> MemberTable | None:
        """The member table of ``url``'s checked index; None when it has no index or its
        index has no table (FormatError for a bad or stale one, as :func:`load_index`). A
        local shard without a table (no index, or an older one) has the table a parse
        found, once it has been read twice (:meth:`keeper`). With ``cache_dir``, a remote
        shard's table comes from its copies there (:func:`_files`), as a local shard's
        does; None while the shard is not cached."""
        found = self._entry(url, access, cache_dir, None)
        if found is None:
            return None
        path, stamp, entry = found
        table = None if entry is None else entry[1]
        if isinstance(table, FormatError):
            raise table.with_traceback(None)  # (each raise starts its own)
        if table is None and path is not None:  # a table its parse finds is kept
            self._missed[url] = stamp
        elif self._shipped is not None and isinstance(table, MemberTable) and not table.verified:
            # its check against the bytes is shipped, with the table where the parent has
            # none (counts from a manifest: the parent loaded no index)
            self._checking[url] = (stamp, table, url in self._loaded)
        return cast("MemberTable | None", table)

    def has_room(self, url: str) -> bool:
        """Whether ``url`` is kept already or the cache holds less than its limit (the
        counts fill it that far: past it, an index counted would only push out another
        before it is read)."""
        return url in self._entries or self._held < self.limit

    def samples(self, url: str, access: Access, size: int | None) -> int | None:
        """The sample count of ``url``'s checked index (None when it has none), its table
        kept for :meth:`get`; ``size``: a remote shard's size, to refuse a stale index
        (a local shard's is taken from the file)."""
        found = self._entry(url, access, None, size)
        entry = None if found is None else found[2]
        if entry is None:
            return None
        if entry[2] is None:  # a table its parse noted: the index itself counts
            index = load_index(url, storage_options=access, size=size)
            return None if index is None else index.samples
        return entry[2]

    def _entry(
        self, url: str, access: Access, cache_dir: str | None, size: int | None
    ) -> tuple[str | None, object, _Entry | None] | None:
        """(the shard's local file or None, its stamp, its entry or None when it has no
        index); None when a local shard's file (or a remote one's cache copy) is not
        there."""
        stamp: object = None
        path = source = None
        if storage.is_local(url) or cache_dir is not None:
            files = _files(url, access, cache_dir)
            if files is None:
                return None
            path, source, stamp = files
            size = stamp[0]
        entry = self._entries.get(url)
        if entry is not None and entry[0] == stamp:
            self._entries.move_to_end(url)
            if isinstance(entry[1], TableNotes):  # what a parse noted: the table, made once
                entry = (stamp, entry[1].table(), entry[2])  # (None: a table cannot
                self._keep(url, entry)  # describe the shard)
            return path, stamp, entry
        if source is None and path is not None:  # a local file (or copy) without an index
            return path, stamp, None
        index = load_index(url, storage_options=access, size=size, source=source)
        if index is None:
            return path, stamp, None
        self._loaded.add(url)
        try:
            table: _Table | FormatError | None = prepared_members(index, url=index_url(url))
        except FormatError as exc:  # the count stands; reading the shard refuses it
            table = exc
        entry = (stamp, table, index.samples)
        self._keep(url, entry)
        return path, stamp, entry

    def keeper(self, url: str) -> Callable[[TableNotes], None] | None:
        """Where the member table a parse of ``url`` finds goes (``read_shard(on_table=)``:
        its notes, made into the table when :meth:`get` next gives it), after
        :meth:`get` gave none for it. None for a shard whose table would not be kept (a
        remote shard read without a cache), and the first time a shard is read: the
        notes cost a parse a tenth more, worth it once a shard is read again (a second
        epoch), not for a single pass."""
        stamp = self._missed.pop(url, _NONE)
        if stamp is _NONE:
            return None
        if self._shipped is None and self._read.get(url, _NONE) != stamp:
            self._read[url] = stamp
            return None
        old = self._entries.get(url)
        count = old[2] if old is not None and old[0] == stamp else None

        def keep(notes: TableNotes) -> None:
            self._keep(url, (stamp, notes, count))
            if self._shipped is not None:
                self._shipped.append((url, stamp, notes, count))

        return keep

    def _keep(self, url: str, entry: _Entry) -> None:
        old = self._entries.pop(url, None)
        if old is not None:
            self._held -= _held(old[1])
        self._entries[url] = entry
        self._held += _held(entry[1])
        while self._held > self.limit and len(self._entries) > 1:
            _, (_, dropped, _) = self._entries.popitem(last=False)
            self._held -= _held(dropped)


def _files(
    url: str, access: Access, cache_dir: str | None
) -> tuple[str, str | None, tuple[Any, ...]] | None:
    """(the shard's local file, its index's or None, a stamp of both) for a local shard,
    or with ``cache_dir`` a remote one's cache copies; None when the shard's file is not
    there. A remote shard not yet cached is about to be read (and cached) as a stream:
    its index is fetched into the cache now (:func:`shardkit.storage.refresh_copy`), so
    that the next read of the shard takes the mapped path; a failure to fetch it is
    logged, and the shard is read without it."""
    local = storage.is_local(url)
    cached = None if local else cache_dir
    # A cache copy's index is kept beside it, as a local shard's is (evicted with it).
    path = storage.local_path(url) if cached is None else storage.cache_path(url, cached)
    index = path + INDEX_SUFFIX
    try:
        shard = os.stat(path)
    except OSError:
        if cached is not None:
            _fetch_index(url, access, index)
        return None
    try:
        found = os.stat(index)
        indexed: tuple[int, ...] | None = (found.st_size, found.st_mtime_ns, found.st_ino)
    except OSError:  # none (or none to be had): the shard's own headers tell
        indexed = None
    # A cache copy's mtime is its last use (the cache's LRU clock); a new copy is a new
    # file (renamed into place): its inode tells it.
    stamp = (shard.st_size, shard.st_mtime_ns if local else None, shard.st_ino, indexed)
    return path, (None if indexed is None else index), stamp


def _fetch_index(url: str, access: Access, path: str) -> None:
    try:
        storage.refresh_copy(index_url(url), path, access=access, what="index file")
    except (StorageError, OSError) as exc:
        _log.warning("%s: index not cached, the shard is read without it: %s", url, exc)


def _held(table: _Table | FormatError | None) -> int:
    return len(table.offsets) if isinstance(table, (MemberTable, TableNotes)) else 0
