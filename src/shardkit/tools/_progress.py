"""Progress of a tool over its input shards: one report per shard to a ``progress=``
callback (as :func:`shardkit.build` reports to its own); the CLI draws it as a bar.

A tool wraps the shards it reads in :func:`track`: each time the next shard is asked for,
the one before it is done and reported, and the last one when the iteration ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ToolProgress", "ToolProgressFn", "track"]

T = TypeVar("T")


@dataclass(frozen=True)
class ToolProgress:
    """A snapshot after each input shard: ``shards`` done of ``total`` (None: unknown),
    seconds ``elapsed``."""

    shards: int
    total: int | None
    elapsed: float


ToolProgressFn = Callable[[ToolProgress], None]


def track(items: Iterable[T], progress: ToolProgressFn | None) -> Iterable[T]:
    """``items`` (shards), reporting each one done to ``progress`` (as is without one)."""
    if progress is None:
        return items
    return _tracked(items, progress)


def _tracked(items: Iterable[T], progress: ToolProgressFn) -> Iterator[T]:
    total = len(items) if isinstance(items, Sized) else None
    started = time.monotonic()
    for done, item in enumerate(items, 1):
        yield item  # resumed when the next one is asked for: this one is done
        progress(ToolProgress(done, total, time.monotonic() - started))
