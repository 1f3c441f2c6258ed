"""The raw sample stream of one (rank, worker) in one epoch, following its epoch plan.

Where the plan promises an exact number of samples (``pad``/``drop``/``cycle``), the
stream yields exactly that many: a shard that ends early (bad data skipped by the
handler, or a manifest count that is too high) is reported to the handler, and the
shortfall is made up by repeating samples from the start of the stream, so ranks stay
equal even then. A segment that ends where the manifest says its shard ends reads one
sample further: a shard holding more samples than its count (which would otherwise be
dropped without a word) is a FormatError through the handler too.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import reader, storage
from ..errors import FormatError
from ..formats.names import Format
from ..handlers import Handler, reraise
from ..storage import LOCAL, Access
from ._epochs import EpochPlan, Segment, drop_front
from ._idxfiles import IndexCache
from ._urls import ShardList

__all__ = ["ReadOptions", "check_stated_empty", "open_samples", "stream_samples"]

logger = logging.getLogger(__name__)


class PassWatch(Protocol):
    def stalled(self, produced: int) -> bool: ...


@dataclass(frozen=True)
class ReadOptions:
    """How shards are opened and parsed."""

    format: Format | None = None
    handler: Handler = reraise
    verify: bool = True
    access: Access = LOCAL
    cache_dir: str | None = None
    cache_limit: int | None = None
    copy: bool = True
    indexes: IndexCache = field(default_factory=IndexCache, compare=False, repr=False)


def open_samples(url: str, options: ReadOptions) -> Generator[dict[str, Any], None, None]:
    """The raw samples of one shard (what :func:`shardkit.reader.read_shard` yields, with
    the local cache of ``options.cache_dir``). An uncompressed tar shard read from a
    local file, or from its cache copy, is read by a member table
    (:mod:`shardkit.formats.members`): slices, no header parsed. The table is its
    index's, or, for a shard without one, the one its second parse in this process noted
    (``read_shard(on_table=)``); either is made once per process (``options.indexes``).
    A remote shard's index is cached with it."""
    members = None
    kind, gz = reader.detect_format(url, options.format)
    local = storage.is_local(url)
    cached = options.cache_dir if not local and storage.url_scheme(url) else None
    if kind == "tar" and not gz and (local or cached is not None):
        try:
            members = options.indexes.get(url, options.access, cached)
        except FormatError as exc:  # a bad or stale index: the shard is refused
            return _refused(exc, options.handler)
    return reader.read_shard(
        url,
        format=options.format,
        handler=options.handler,
        verify=options.verify,
        storage_options=options.access,
        cache_dir=options.cache_dir,
        cache_limit=options.cache_limit,
        copy=options.copy,
        members=members,
        on_table=None if members is not None else options.indexes.keeper(url),
    )


def _refused(exc: FormatError, handler: Handler) -> Generator[dict[str, Any], None, None]:
    handler(exc)
    yield from ()


def _read_segment(
    urls: tuple[str, ...],
    segment: Segment,
    options: ReadOptions,
    counts: tuple[int, ...] | None = None,
) -> Iterator[Any]:
    """The samples of one segment; with ``counts``, a segment that ends at its shard's
    stated end checks that the shard ends there too (see the module docs)."""
    url = urls[segment.shard]
    samples = open_samples(url, options)
    try:
        if segment.skip:
            next(itertools.islice(samples, segment.skip, segment.skip), None)
        if segment.take is None:
            yield from samples
            return
        yield from itertools.islice(samples, segment.take)
        stated = None if counts is None else counts[segment.shard]
        if stated == segment.skip + segment.take and next(samples, None) is not None:
            options.handler(
                FormatError(
                    f"shard holds more samples than the {stated} its manifest or index states; "
                    "the rest would be dropped",
                    url=url,
                )
            )
    finally:
        samples.close()


def check_stated_empty(url: str, options: ReadOptions) -> None:
    """A shard whose index or manifest states 0 samples must hold none: reading its first
    sample reports a wrong count through the handler (never a silent skip)."""
    for _ in _read_segment((url,), Segment(0, 0, 0), options, (0,)):
        pass


def stream_samples(
    shards: ShardList,
    plan_for: Callable[[int], EpochPlan],
    options: ReadOptions,
    skip: int = 0,
    passes: int | None = 1,
    watch: PassWatch | None = None,
) -> Iterator[dict[str, Any]]:
    """The stream's samples, less the first ``skip`` (a resumed epoch).

    The shards are read ``passes`` times (pass ``i`` follows ``plan_for(i)``); a
    ``"cycle"`` plan, or ``passes=None``, reads pass after pass with no end of its own.
    ``watch.stalled(n)`` is asked after each whole pass (of ``n`` samples) of an endless
    stream; true ends it. Skipped samples are not read where the shard counts allow:
    whole segments are dropped from the plans. That is exact only when no bad data can
    have shortened a segment, so it is done under the default ``raise`` handler only.
    """
    first = plan_for(0)
    endless = first.cycle or passes is None
    indices: Iterable[int] = itertools.count() if endless else range(passes or 0)
    fast = bool(skip) and options.handler is reraise and shards.counts is not None
    items = _passes(shards, plan_for, first, indices, options, skip if fast else 0, watch)
    if skip and not fast:
        items = itertools.islice(items, skip, None)
    return items


def _passes(
    shards: ShardList,
    plan_for: Callable[[int], EpochPlan],
    first: EpochPlan,
    indices: Iterable[int],
    options: ReadOptions,
    skip: int,
    watch: PassWatch | None,
) -> Iterator[dict[str, Any]]:
    for index in indices:
        plan = plan_for(index) if index else first
        start, segments = 0, plan.segments
        if skip:
            segments, rest = drop_front(segments, skip, shards.counts)
            start, skip = skip - rest, rest
            if skip:  # this whole pass was read before
                continue
        produced = 0
        for sample in _exact(shards, plan, segments, start, options):
            produced += 1
            yield sample
        if plan.cycle and not produced and not start:
            logger.warning("no readable samples in this stream's shards: epoch ends early")
            return
        if watch is not None and not start and watch.stalled(produced):
            return


def _exact(
    shards: ShardList,
    plan: EpochPlan,
    segments: tuple[Segment, ...],
    produced: int,
    options: ReadOptions,
) -> Iterator[dict[str, Any]]:
    urls = shards.urls
    for segment in segments:
        count = 0
        for sample in _read_segment(urls, segment, options, shards.counts):
            count += 1
            yield sample
        if segment.take is not None and count < segment.take:
            options.handler(
                FormatError(
                    f"shard ended after {segment.skip + count} samples; the manifest "
                    f"promised at least {segment.skip + segment.take}",
                    url=urls[segment.shard],
                )
            )
        produced += count
    if plan.target is not None and produced < plan.target:
        yield from _refill(urls, plan.segments, plan.target - produced, options)


def _refill(
    urls: tuple[str, ...], segments: tuple[Segment, ...], missing: int, options: ReadOptions
) -> Iterator[dict[str, Any]]:
    logger.warning("repeating %d samples to keep the epoch length", missing)
    while missing:
        before = missing
        for segment in segments:
            for sample in _read_segment(urls, segment, options):
                yield sample
                missing -= 1
                if not missing:
                    return
        if missing == before:
            logger.warning("no readable samples to repeat: the epoch is %d short", missing)
            return
