"""Where every document's tokens are: token shards or a Megatron ``.bin``/``.idx`` pair.

A :class:`TokenTable` maps document ``d`` to a slice of one of its *pools* (a token
array: a token sample's tokens member, or a whole Megatron ``.bin``), memory-mapped, so
loading a table reads the tar headers and the lengths, never the tokens.
:class:`TokenSource` names where a table comes from; it is what crosses to a DataLoader
worker (the table is made again there, on first use).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, FormatError
from ..formats.megatron import check_bin_size, parse_index
from ..formats.names import INDEX_SUFFIX
from ..formats.tar import buffer_samples
from ..formats.tokens import decode_group
from ..storage import is_local, local_path, open_regular

__all__ = ["TokenSource", "TokenTable"]


@dataclass
class TokenTable:
    """Document ``d`` is ``pools[pool[d]][start[d] : start[d] + length[d]]``."""

    pools: list[np.ndarray[Any, Any]]
    pool: np.ndarray[Any, Any]
    start: np.ndarray[Any, Any]
    length: np.ndarray[Any, Any]

    @property
    def documents(self) -> int:
        return len(self.length)

    @property
    def tokens(self) -> int:
        return int(self.length.sum(dtype=np.int64))

    def document(self, d: int) -> np.ndarray[Any, Any]:
        """The tokens of document ``d`` (a view)."""
        s = int(self.start[d])
        return self.pools[int(self.pool[d])][s : s + int(self.length[d])]


class TokenSource:
    """The token shards at ``urls``, or the Megatron pair of ``megatron`` (a ``.bin``)."""

    def __init__(self, urls: tuple[str, ...] = (), megatron: str | None = None) -> None:
        self.urls = urls
        self.megatron = megatron
        self._table: TokenTable | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"urls": self.urls, "megatron": self.megatron, "_table": None}

    def names(self) -> list[str]:
        """What a resume state of a pipeline over this source names."""
        found = [self.megatron] if self.megatron else list(self.urls)
        return [u.rstrip("/").rsplit("/", 1)[-1] for u in found]

    @property
    def table(self) -> TokenTable:
        if self._table is None:
            self._table = _megatron(self.megatron) if self.megatron else _shards(self.urls)
        return self._table


def _local(url: str, what: str) -> str:
    if not is_local(url):
        raise ConfigError(
            f"pack() reads {what} on local disk, memory-mapped: {url} is remote "
            "(copy it, or read it with a cache_dir)"
        )
    return local_path(url)


def _map(path: str, url: str) -> mmap.mmap | bytes:
    """``path`` memory-mapped, through the reading door (a regular file only)."""
    with open_regular(path, url=url) as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _shards(urls: tuple[str, ...]) -> TokenTable:
    pools: list[np.ndarray[Any, Any]] = []
    lengths: list[np.ndarray[Any, Any]] = []
    for url in urls:
        buffer = _map(_local(url, "token shards"), url)
        for sample in buffer_samples(buffer, url=url, copy=False):
            tokens, counts = decode_group(sample, url=url)
            pools.append(tokens)
            lengths.append(counts)
    if not pools:
        raise FormatError("no token samples in the dataset", url=urls[0] if urls else None)
    if len({pool.dtype for pool in pools}) > 1:
        raise FormatError(
            "its token shards hold two token dtypes (tokens.u16 and tokens.u32): read the "
            "builds apart, or build them again with one tokenizer",
            url=urls[0],
        )
    length = np.concatenate(lengths).astype(np.int64)
    pool = np.repeat(np.arange(len(pools), dtype=np.int64), [len(c) for c in lengths])
    start = np.zeros(len(length), dtype=np.int64)
    first = 0
    for counts in lengths:  # each group's documents start at 0 of its pool
        n = len(counts)
        if n > 1:
            np.cumsum(counts[:-1], dtype=np.int64, out=start[first + 1 : first + n])
        first += n
    return TokenTable(pools, pool, start, length)


def _megatron(url: str) -> TokenTable:
    stem = url[: -len(".bin")]
    index = parse_index(
        _map(_local(stem + INDEX_SUFFIX, "a Megatron .idx"), stem + INDEX_SUFFIX),
        url=stem + INDEX_SUFFIX,
    )
    data = _map(_local(url, "a Megatron .bin"), url)
    check_bin_size(index, len(data), url=url)
    itemsize = np.dtype(index.dtype).itemsize
    tokens = np.frombuffer(data, dtype=index.dtype, count=index.end // itemsize)
    pool = np.zeros(len(index.lengths), dtype=np.int64)
    return TokenTable([tokens], pool, index.starts, index.lengths)
