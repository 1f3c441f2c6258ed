"""What a build reports: progress snapshots, the result, the shards (no heavy imports)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..formats.record import ShardRecord

__all__ = ["BuildProgress", "BuildResult", "ProgressFn"]


@dataclass(frozen=True)
class BuildProgress:
    """A progress snapshot, passed to the ``progress`` callback a few times a second."""

    samples: int  # samples written (including those of resumed tasks)
    skipped: int  # items skipped so far
    total: int | None  # items to process (None for a one-pass iterable)
    bytes: int  # input bytes processed
    shards: int  # final shards committed
    elapsed: float  # seconds since the build started


@dataclass(frozen=True)
class BuildResult:
    """What :func:`shardkit.build` produced."""

    out: str
    manifest: str
    shards: list[ShardRecord]
    samples: int
    skipped: list[tuple[str, str]]
    resumed_tasks: int
    seconds: float
    fetch: dict[str, int] = field(default_factory=dict)  # http(s) downloads by outcome
    # How many items were skipped: ``skipped`` holds the first 1,000 (by path), the
    # output's ``skipped.jsonl`` every one (-1: as many as ``skipped`` holds).
    skipped_count: int = -1

    def __post_init__(self) -> None:
        if self.skipped_count < 0:
            object.__setattr__(self, "skipped_count", len(self.skipped))

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)


ProgressFn = Callable[[BuildProgress], None]
