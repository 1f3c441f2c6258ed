"""``cat``: concatenate the samples of many shards into one stream or file.

Tar shards going to a tar output (stdout or one file) are copied member by member, byte
for byte (headers included), without decoding or re-encoding a sample; only the
end-of-archive blocks between shards are dropped, and one pair ends the output. A local
shard with a member table in its index (:mod:`shardkit.tools._tablecopy`) is copied as
runs of whole samples, byte ranges of the file, no header parsed; others member by
member, by their headers (:class:`~shardkit.formats.tar.TarScanner`): the same bytes.
Other combinations (TFRecord in or out, ``shuffle``) go sample by sample.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..formats.names import Format
from ..formats.tar import Grouping, TarScanner
from ..handlers import Handler, reraise
from ..pipeline import IndexCache
from ._inputs import Inputs, ShardRef, as_refs, gzip_errors, iter_samples, open_shard
from ._outputs import Output
from ._settings import ToolOptions, ToolRun, WriteOptions
from ._tablecopy import Copy, TableShard, copy_chunks, table_of

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["cat", "iter_cat", "shuffle_buffer"]


def _check_counts(count: int | None, skip: int, shuffle: int) -> None:
    for name, value in (("count", count), ("skip", skip), ("shuffle", shuffle)):
        if value is not None and (isinstance(value, bool) or value < 0):
            raise ConfigError(f"{name} must be a non-negative integer, not {value!r}")


def shuffle_buffer(
    samples: Iterable[dict[str, Any]], size: int, *, seed: int = 0
) -> Iterator[dict[str, Any]]:
    """Shuffle through a buffer of ``size`` samples, deterministically for a ``seed``."""
    rng = random.Random(seed)
    buffer: list[dict[str, Any]] = []
    for sample in samples:
        if len(buffer) < size:
            buffer.append(sample)
            continue
        i = rng.randrange(size)
        yield buffer[i]
        buffer[i] = sample
    rng.shuffle(buffer)
    yield from buffer


def iter_cat(
    inputs: Inputs,
    *,
    count: int | None = None,
    skip: int = 0,
    shuffle: int = 0,
    seed: int = 0,
    handler: Handler = reraise,
    **options: Unpack[ToolOptions],
) -> Iterator[dict[str, Any]]:
    """The samples of ``inputs`` (raw bytes fields): skip ``skip``, shuffle through a
    buffer of ``shuffle`` samples (0: keep the order), then take ``count``.
    ``storage_options``, ``progress``: see :class:`~shardkit.tools._settings.ToolOptions`
    (``progress`` hears of each input shard done)."""
    run = ToolRun.of("iter_cat", options, writes=False)
    _check_counts(count, skip, shuffle)
    return _cat(as_refs(inputs, run.access), run, count, skip, shuffle, seed, handler)


def _cat(
    refs: list[ShardRef],
    run: ToolRun,
    count: int | None,
    skip: int,
    shuffle: int,
    seed: int,
    handler: Handler = reraise,
) -> Iterator[dict[str, Any]]:
    samples: Iterator[dict[str, Any]] = iter_samples(run.track(refs), handler=handler)
    if skip:
        samples = islice(samples, skip, None)
    if shuffle:
        samples = shuffle_buffer(samples, shuffle, seed=seed)
    if count is not None:
        samples = islice(samples, count)
    return samples


def cat(
    inputs: Inputs,
    output: str = "-",
    *,
    count: int | None = None,
    skip: int = 0,
    shuffle: int = 0,
    seed: int = 0,
    format: Format | None = None,
    **options: Unpack[WriteOptions],
) -> int:
    """Write the samples of ``inputs`` to ``output`` (``-``, a file, or a shard pattern);
    returns the number of samples written. See :func:`iter_cat` for the options, and
    :class:`~shardkit.tools._settings.WriteOptions` for ``storage_options``, ``hash``,
    ``on_shard`` (gets each file written: its size and ``hash`` digest) and ``progress``
    (each input shard read)."""
    run = ToolRun.of("cat", options)
    _check_counts(count, skip, shuffle)
    refs = as_refs(inputs, run.access)
    with Output(output, run, format=format) as out:
        if out.raw is not None and not shuffle:
            window = _Window(skip, count)
            indexes = IndexCache(limit=0)  # one shard's member table held at a time
            for ref in run.track(refs):
                if window.done:
                    break
                _copy_shard(ref, out, window, indexes)
        else:
            for sample in _cat(refs, run, count, skip, shuffle, seed):
                out.write(sample)
    return out.samples


@dataclass
class _Window:
    """Which samples to keep: skip the first ``skip``, then keep ``count`` (None: all)."""

    skip: int
    count: int | None

    @property
    def done(self) -> bool:
        return self.count is not None and self.count <= 0

    def take(self) -> bool:
        if self.skip:
            self.skip -= 1
            return False
        if self.count is not None:
            self.count -= 1
        return True

    def run(self, first: int, stop: int) -> tuple[int, int]:
        """:meth:`take` for samples ``first`` to ``stop`` at once: the part kept."""
        skipped = min(self.skip, stop - first)
        self.skip -= skipped
        first += skipped
        if self.count is not None:
            stop = min(stop, first + self.count)
            self.count -= stop - first
        return first, stop


def _copy_shard(ref: ShardRef, out: Output, window: _Window, indexes: IndexCache) -> None:
    if ref.format != "tar":
        for sample in iter_samples([ref]):
            if window.done:
                return
            if window.take():
                out.write(sample)
        return
    table = table_of(ref, indexes)
    if table is not None:
        with table:
            _copy_table(table, out, window)
        return
    raw, stream = open_shard(ref)
    try:
        members = TarScanner(stream, url=ref.url)
        with gzip_errors(ref.url):
            try:
                _copy_members(members, out, window)
            finally:
                members.flush_copy()
    finally:
        if not ref.stdin:
            raw.close()


def _copy_members(members: TarScanner, out: Output, window: _Window) -> None:
    """Copy whole samples' members to ``out.raw``, checking what a reader would check."""
    write = out.raw.write if out.raw is not None else None
    if write is None:  # pragma: no cover - callers only come here with a raw stream
        raise ConfigError("raw copy needs a tar stream output")
    copying = False
    for _member, key, _ext, new in Grouping(members.url)(members):  # the hot loop
        if new:
            if window.done:
                return
            copying = window.take()
            if copying:
                out.raw_sample(key)
        if copying:
            members.copy_member(write)


def _copy_table(shard: TableShard, out: Output, window: _Window) -> None:
    """Copy the samples of ``shard`` that ``window`` keeps, runs of them as ranges."""

    def add(first: int, stop: int, copy: Copy) -> bool:
        start, end = window.run(first, stop)
        if end > start:
            keys, sizes = shard.keys[start:end], shard.sizes(start, end)
            out.raw_run(keys, sizes, functools.partial(copy, start - first, end - first))
        return not window.done

    copy_chunks(shard, add)
