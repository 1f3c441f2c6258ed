"""Progress of a tool over its input shards: one report per shard to a ``progress=``
callback (as :func:`shardkit.build` reports to its own); the CLI draws it as a bar.

A tool that reads its shards itself wraps them in
:meth:`~shardkit.tools._settings.ToolRun.track` (:func:`counted`): each time the next shard
is asked for, the one before it is done and reported, and the last one when the iteration
ends. One whose shards run as cluster tasks (``proc --engine ray|dask``) counts each as
its result arrives (:class:`ShardCount`, which :func:`counted` counts with too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ShardCount", "ToolProgress", "ToolProgressFn", "counted"]

T = TypeVar("T")


@dataclass(frozen=True)
class ToolProgress:
    """A snapshot after each input shard: ``shards`` done of ``total`` (None: unknown),
    seconds ``elapsed``."""

    shards: int
    total: int | None
    elapsed: float


ToolProgressFn = Callable[[ToolProgress], None]


class ShardCount:
    """Shards done of ``total``, each reported to ``report`` as it is counted (None:
    counts without reporting)."""

    def __init__(self, total: int | None, report: ToolProgressFn | None) -> None:
        self.total = total
        self.shards = 0
        self._progress = report
        self._started = time.monotonic()

    def done(self, shards: int = 1) -> None:
        """``shards`` more are done: one report."""
        self.shards += shards
        if self._progress is not None:
            elapsed = time.monotonic() - self._started
            self._progress(ToolProgress(self.shards, self.total, elapsed))


def counted(items: Iterable[T], count: ShardCount) -> Iterator[T]:
    """``items`` (shards), each counted done in ``count`` as the next one is asked for."""
    for item in items:
        yield item  # resumed when the next one is asked for: this one is done
        count.done()
