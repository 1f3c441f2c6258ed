"""The cut rule: when a shard is full.

Every writer of shards asks the one :class:`Cut` before adding a sample: the
:class:`~shardkit.writer.ShardWriter`, ``split``'s byte-copying path, the build's plan (which
cuts listed files into shard tasks before any is read), its part writer and its shard
assembly (which cut what the workers wrote). So a shard is full in the same place
whichever of them writes it, and the same inputs and limits give the same bytes.

The rule: a shard that holds ``count`` samples in ``size`` bytes is closed before a sample
of ``add`` bytes joins it when it already holds ``max_count`` samples, or when the sample
would take the closed file (``trailer`` included: a tar's end-of-archive blocks) over
``max_size`` bytes. An empty shard always takes the sample, so a sample larger than
``max_size`` stands alone in its shard. ``None`` means no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import Size, check_int, parse_size

__all__ = [
    "BUILD_MAX_COUNT",
    "BUILD_MAX_SIZE",
    "WRITER_MAX_COUNT",
    "WRITER_MAX_SIZE",
    "Cut",
]

WRITER_MAX_COUNT = 100_000
"""``ShardWriter`` and the tools' shard patterns: webdataset's ``maxcount``."""
WRITER_MAX_SIZE = 3 << 30
"""``ShardWriter`` and the tools' shard patterns: 3 GiB (webdataset's ``maxsize`` is 3e9)."""
BUILD_MAX_COUNT = 10_000
"""``build``: smaller shards, so that many workers and data-loader processes share them."""
BUILD_MAX_SIZE = 250_000_000
"""``build``: 250 MB."""


@dataclass(frozen=True, slots=True, init=False)
class Cut:
    """``max_count`` samples and ``max_size`` bytes per shard (``None``: no limit);
    ``trailer``: bytes every shard ends with, counted in its size."""

    max_count: int | None
    max_size: int | None
    trailer: int

    def __init__(
        self, max_count: int | None = None, max_size: Size | None = None, *, trailer: int = 0
    ) -> None:
        if max_count is not None:
            check_int(max_count, "max_count")
        size = None if max_size is None else parse_size(max_size, name="max_size")
        object.__setattr__(self, "max_count", max_count)
        object.__setattr__(self, "max_size", size)
        object.__setattr__(self, "trailer", trailer)

    def full(self, count: int, size: int, add: int) -> bool:
        """Whether a shard holding ``count`` samples in ``size`` bytes must be closed before
        a sample of ``add`` bytes joins it."""
        return self.over(count, size + add + self.trailer)

    def over(self, count: int, final: int) -> bool:
        """Whether a shard holding ``count`` samples must be closed rather than take a
        sample after which, closed, it would be ``final`` bytes (trailer included)."""
        if not count:
            return False
        if self.max_count is not None and count >= self.max_count:
            return True
        return self.max_size is not None and final > self.max_size
