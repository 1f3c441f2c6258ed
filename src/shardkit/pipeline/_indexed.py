"""``shardkit.IndexedDataset``: random access to the samples of indexed shards.

>>> ds = IndexedDataset("data/").decode("rgb8").to_tuple("jpg", "cls")
>>> len(ds), ds[12345]
>>> loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds), num_workers=8)

Every shard needs its ``.idx`` file (``shardkit index DIR`` writes them;
:mod:`shardkit.pipeline._idxfiles` reads and checks them). ``ds[i]`` finds sample i's
shard, offset and size in the indexes, takes just those bytes (:class:`shardkit.ranges.
RangeReader`: one ``pread`` locally, or with ``copy=False`` a slice of the memory-mapped
shard; one ranged read remotely, or the local cache copy), parses them with the one
rule of index spans (:func:`shardkit.formats.index.indexed_sample`: the span must hold
exactly the indexed sample, a tar sample or one TFRecord record), and runs the same
per-sample stages as
:class:`~shardkit.pipeline._dataset.Dataset` (``decode``, ``to_tuple``, ``map``,
``map_dict``, ``map_tuple``, ``rename``; built by a ``Dataset`` so both share one
definition). Order, shuffling, batching, splitting over ranks: the sampler's and the
DataLoader's business.

It is a ``torch.utils.data.Dataset`` wherever torch is installed, without importing it
(:func:`shardkit.pipeline._torch.register_map_dataset`).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from array import array
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from .. import reader
from ..budget import limit
from ..errors import ConfigError, DataError, FormatError
from ..formats.index import check_shard_size, index_url, indexed_sample, prepared_members
from ..formats.members import MemberTable, table_sample
from ..formats.names import Format
from ..handlers import Handler, HandlerName
from ..ranges import RangeReader
from ..storage import Access, StorageOptions
from ._context import Context
from ._dataset import Dataset
from ._decode import Decode
from ._idxfiles import load_indexes
from ._source import check_stated_empty
from ._stages import MapDict, Rename, Stage, ToTuple
from ._torch import MapBase, register_map_dataset
from ._urls import resolve_source

__all__ = ["IndexedDataset"]

_TRIES = 16  # samples tried after one that the handler dropped, before giving up
_CTX = Context(seed=0, epoch=0)


@dataclasses.dataclass(frozen=True)
class _Shard:
    url: str
    format: Format
    size: int
    keys: tuple[str, ...]
    offsets: array[int]
    sizes: array[int]
    members: MemberTable | None = None  # the member table, for a tar shard whose index has one


class IndexedDataset(MapBase[Any]):
    """The samples of indexed shards, by number: ``len(ds)`` and ``ds[i]``.

    ``source`` is what :class:`~shardkit.pipeline._dataset.Dataset` takes (URLs, a folder,
    a manifest); every shard must be an uncompressed tar or TFRecord with its ``.idx``.
    ``handler`` is the policy for bad data: with ``"raise"`` (default) ``ds[i]`` raises
    it; with another policy the sample is reported and ``ds[i]`` returns the next
    readable one (i+1, i+2, ..., at most 16 tries), so a batch stays full. ``max_open``:
    shards kept open per process (with fewer than the shards a random order reads,
    shards are reopened over and over). ``copy=False``: local shards are memory-mapped
    and the fields of tar samples are memoryviews of the map (of the bytes read, for a
    remote shard) instead of ``bytes``; the map's pages then count in the process's
    resident set as it touches them. ``storage_options``, ``cache_dir``,
    ``cache_limit``, ``verify`` and ``format`` are as for ``Dataset``.
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        handler: HandlerName | Handler = "raise",
        format: Format | None = None,
        storage_options: Access | StorageOptions | None = None,
        cache_dir: str | None = None,
        cache_limit: int | str | None = None,
        verify: bool = True,
        max_open: int = 64,
        copy: bool = True,
    ) -> None:
        self._pipe = Dataset(
            source,
            handler=handler,
            format=format,
            storage_options=storage_options,
            cache_dir=cache_dir,
            cache_limit=cache_limit,
            verify=verify,
        )
        self._ranges = RangeReader(
            access=self._pipe._recipe.read.access,
            cache_dir=self._pipe._recipe.read.cache_dir,
            cache_limit=self._pipe._recipe.read.cache_limit,
            cache_check=_whole_shard,
            max_open=max_open,
        )
        self._shards: tuple[_Shard, ...] | None = None
        self._ends: list[int] = []
        self._checked: set[str] = set()
        self._stages: tuple[Stage, ...] = ()
        if not isinstance(copy, bool):
            raise TypeError(f"copy must be True or False, not {copy!r}")
        self._copy = copy
        # Views need a buffer that stays: the shard's memory map. Copies come from one
        # pread per span: as fast on a first pass, and the process's resident set does
        # not grow with every page of the shards it touched.
        self._map_local = not copy

    # ------------------------------------------------------------------ stages

    def _with(self, pipe: Dataset) -> IndexedDataset:
        new = IndexedDataset.__new__(IndexedDataset)
        new.__dict__.update(self.__dict__)
        new._pipe = pipe
        # One item at a time: decode in the calling thread (a pool per item costs more).
        new._stages = tuple(
            dataclasses.replace(s, threads=1)
            if isinstance(s, Decode)
            # each item is a stream of one: a field it lacks is bad data, not a typo
            else dataclasses.replace(s, check_fields=False)
            if isinstance(s, (ToTuple, Rename, MapDict))
            else s
            for s in pipe._recipe.stages
        )
        return new

    def decode(
        self,
        *specs: str | Callable[[str, bytes], Any],
        allow_pickle: bool = False,
        only: str | Sequence[str] | None = None,
        handler: HandlerName | Handler | None = None,
    ) -> IndexedDataset:
        """As :meth:`Dataset.decode <shardkit.Dataset.decode>`."""
        return self._with(
            self._pipe.decode(*specs, allow_pickle=allow_pickle, only=only, handler=handler)
        )

    def to_tuple(
        self, *fields: str, handler: HandlerName | Handler | None = None
    ) -> IndexedDataset:
        """As :meth:`Dataset.to_tuple <shardkit.Dataset.to_tuple>`."""
        return self._with(self._pipe.to_tuple(*fields, handler=handler))

    def map(
        self, fn: Callable[[Any], Any], *, handler: HandlerName | Handler | None = None
    ) -> IndexedDataset:
        """As :meth:`Dataset.map <shardkit.Dataset.map>`."""
        return self._with(self._pipe.map(fn, handler=handler))

    def map_dict(
        self, *, handler: HandlerName | Handler | None = None, **fns: Callable[[Any], Any]
    ) -> IndexedDataset:
        """As :meth:`Dataset.map_dict <shardkit.Dataset.map_dict>`."""
        return self._with(self._pipe.map_dict(handler=handler, **fns))

    def map_tuple(
        self, *fns: Callable[[Any], Any] | None, handler: HandlerName | Handler | None = None
    ) -> IndexedDataset:
        """As :meth:`Dataset.map_tuple <shardkit.Dataset.map_tuple>`."""
        return self._with(self._pipe.map_tuple(*fns, handler=handler))

    def rename(
        self, *, keep: bool = True, handler: HandlerName | Handler | None = None, **names: str
    ) -> IndexedDataset:
        """As :meth:`Dataset.rename <shardkit.Dataset.rename>`."""
        return self._with(self._pipe.rename(keep=keep, handler=handler, **names))

    # ------------------------------------------------------------------ access

    def _load(self) -> tuple[_Shard, ...]:
        if self._shards is None:
            read = self._pipe._recipe.read
            # The shard list only: the indexes are loaded once, here, not for counts too.
            urls = resolve_source(
                self._pipe._source, storage_options=read.access, counts=False
            ).urls
            shards = []
            indexes = load_indexes(urls, access=read.access, required=True)
            for url, index in zip(urls, indexes, strict=True):
                if index is None:  # required: never None
                    raise ConfigError(f"{url} has no index")
                if index.compressed or reader.detect_format(url, read.format)[1]:
                    raise FormatError(
                        "random access needs an uncompressed shard (gunzip it)", url=url
                    )
                shards.append(
                    _Shard(
                        url,
                        read.format or index.shard_format,
                        index.shard_bytes or 0,
                        index.keys,
                        array("q", index.offsets),
                        array("q", index.sizes),
                        prepared_members(index, url=index_url(url))
                        if read.format in (None, "tar")
                        else None,
                    )
                )
            for shard in shards:
                if not shard.keys:  # stated empty: a shard with samples is a wrong index
                    check_stated_empty(shard.url, read)
            self._ends = list(itertools.accumulate(len(s.keys) for s in shards))
            self._shards = tuple(shards)
        return self._shards

    @property
    def urls(self) -> tuple[str, ...]:
        """The shard URLs, in the order their samples are numbered."""
        return tuple(shard.url for shard in self._load())

    def __len__(self) -> int:
        """The number of samples, from the indexes."""
        self._load()
        return self._ends[-1] if self._ends else 0

    def _find(self, i: int) -> tuple[_Shard, int]:
        shards = self._load()
        n = self._ends[-1] if self._ends else 0
        i = operator.index(i)
        if not -n <= i < n:
            raise IndexError(f"sample {i} of a dataset of {n}")
        i %= n
        s = bisect.bisect_right(self._ends, i)
        return shards[s], i - (self._ends[s - 1] if s else 0)

    def locate(self, i: int) -> tuple[str, int]:
        """(shard URL, sample number in that shard) of sample ``i``."""
        shard, k = self._find(i)
        return shard.url, k

    def __getitem__(self, i: int) -> Any:
        try:
            out = self._run_stages(self.raw(i))
        except DataError as exc:
            return self._next_readable(i, exc)
        return self._next_readable(i, None) if out is _DROPPED else out

    def _next_readable(self, first: int, error: DataError | None) -> Any:
        """After sample ``first`` was bad (``error``) or dropped by a stage: the handler
        hears of it, and the next readable sample (at most 16 tries) stands in."""
        handler = self._pipe._recipe.read.handler
        if error is not None:
            handler(error)
        n = len(self)
        for step in range(1, min(_TRIES, n)):
            try:
                out = self._run_stages(self.raw((first + step) % n))
            except DataError as exc:
                handler(exc)
                continue
            if out is not _DROPPED:
                return out
        raise DataError(f"no readable sample among the {_TRIES} from sample {first}")

    def raw(self, i: int) -> dict[str, Any]:
        """Sample ``i`` as read, before any stage: ``__key__``, ``__url__``,
        ``__offset__`` and the raw bytes (or views, with ``copy=False``) of each field."""
        shard, k = self._find(i)
        url = shard.url
        if url not in self._checked:  # the shard on disk is the one that was indexed
            check_shard_size(url, shard.size, self._ranges.size(url))
            self._checked.add(url)
        offset, size = shard.offsets[k], shard.sizes[k]
        if shard.format == "tar":  # views need the memory map of a local shard
            buffer, start = self._ranges.span(url, offset, size, mapped=self._map_local)
            table = shard.members
            if (
                table is not None
                and start + size <= len(buffer)
                and table.largest <= limit("member")
            ):
                # the member table: slices, no header parsed (each checked against the bytes)
                return table_sample(buffer, table, k, base=offset - start, url=url, copy=self._copy)
        else:
            buffer, start = self._ranges.read(url, offset, size), 0
        # The one rule of every index consumer: the span holds exactly its one sample.
        sample = indexed_sample(
            buffer,
            start,
            start + size,
            format=shard.format,
            key=shard.keys[k],
            offset=offset,
            base=offset - start,
            url=url,
            copy=self._copy,
            verify=self._pipe._recipe.read.verify,
        )
        sample["__url__"] = url
        return sample

    def _run_stages(self, sample: dict[str, Any]) -> Any:
        if not self._stages:
            return sample
        items: Any = iter((sample,))
        for stage in self._stages:
            items = stage(items, _CTX)
        return next(items, _DROPPED)

    def close(self) -> None:
        """Close the shards this process has open (they reopen on the next read)."""
        self._ranges.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_checked"] = set()  # each process checks the shards it opens
        return state

    def __repr__(self) -> str:
        stages = "".join(f".{type(s).__name__.lower()}()" for s in self._stages)
        return f"IndexedDataset({self._pipe._source!r}){stages}"


_DROPPED = object()


def _whole_shard(url: str, copy: BinaryIO) -> bool:
    """Whether a cache copy of shard ``url`` is complete (as the streaming reader checks)."""
    return reader.holds_whole_shard(copy, format=reader.detect_format(url)[0])


register_map_dataset(IndexedDataset)
