"""Each shard's downloads by outcome (a list's http(s) URLs, :mod:`.fetch`), counted as
the build's results are cut into shards in plan order, and a finished manifest's total."""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any

from ._worker import TaskResult

__all__ = ["FetchTally", "fetched"]


class FetchTally:
    """Each shard's downloads by outcome, counted as results are cut in plan order.

    Shards hold the packed samples in plan order, so a download's place among them (its
    task's offset plus its index in the task) names its shard; one skipped after the last
    sample counts in the last shard. A download waits only until a cut passes its place,
    so what is held grows with one shard, not with the items."""

    def __init__(self) -> None:
        self.ends: list[int] = []  # samples up to the end of each shard cut so far
        self.counts: list[dict[str, int]] = []
        self.offset = 0  # samples packed by the results added
        self.waiting: deque[tuple[int, str]] = deque()

    def add(self, result: TaskResult, cut: list[int]) -> None:
        """Count ``result`` (the next in plan order); ``cut``: samples of each shard cut."""
        self._extend(cut)
        self.waiting.extend((self.offset + index, category) for index, category in result.fetch)
        self.offset += sum(part.samples for part in result.parts)
        while self.waiting and self.ends and self.waiting[0][0] < self.ends[-1]:
            self._count(*self.waiting.popleft())

    def by_shard(self, cut: list[int]) -> list[dict[str, int]]:
        """The counts, once every shard is cut."""
        self._extend(cut)
        while self.waiting:
            self._count(*self.waiting.popleft())
        return [dict(sorted(c.items())) for c in self.counts]

    def _extend(self, cut: list[int]) -> None:
        for samples in cut[len(self.ends) :]:
            self.ends.append((self.ends[-1] if self.ends else 0) + samples)
            self.counts.append({})

    def _count(self, place: int, category: str) -> None:
        counts = self.counts[min(bisect.bisect_right(self.ends, place), len(self.ends) - 1)]
        counts[category] = counts.get(category, 0) + 1


def fetched(manifest: dict[str, Any]) -> dict[str, int]:
    """A manifest's total of downloads by outcome ({} when it has none, or a bad one)."""
    total = manifest.get("fetch")
    total = total.get("total") if isinstance(total, dict) else None
    if not isinstance(total, dict):
        return {}
    return {str(k): v for k, v in total.items() if isinstance(v, int)}
