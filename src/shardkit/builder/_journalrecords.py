"""The typed records a build journal keeps, and their JSON: one finished task
(:class:`~shardkit.builder._worker.TaskResult`: its parts as shard records, what it
skipped, its counts) and one shard assembled from chunks (:class:`AssembledShard`).
:mod:`shardkit.builder._journal` is their door."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..digest import entry_digest, parse_digest
from ..formats.record import ShardRecord
from ._worker import TaskResult

__all__ = ["AssembledShard", "decode_result", "encode_result"]


@dataclass(frozen=True)
class AssembledShard:
    """A journal's record of one shard assembled from chunks: the shard, its number, and
    the position in the plan where it ends ((task, sample), :data:`.assembly.FINAL` for
    the last)."""

    shard: ShardRecord
    index: int
    end: tuple[int, int]

    def encode(self) -> dict[str, Any]:
        shard = self.shard
        return {
            "name": shard.name,
            "samples": shard.samples,
            "bytes": shard.bytes,
            "digest": shard.digest,
            "index": self.index,
            "end": list(self.end),
        }

    @classmethod
    def decode(cls, obj: Mapping[str, Any], position: int) -> AssembledShard:
        """A record read back (``position``: its place, the number of a record without
        one); ValueError, KeyError or TypeError when it is not one."""
        shard = ShardRecord(
            str(obj["name"]), int(obj["samples"]), int(obj["bytes"]), entry_digest(obj)
        )
        end = obj["end"]
        return cls(shard, int(obj.get("index", position)), (int(end[0]), int(end[1])))


def encode_result(result: TaskResult) -> dict[str, Any]:
    record = {
        "task": result.index,
        "parts": [[p.name, p.samples, p.bytes, p.digest] for p in result.parts],
        "skipped": result.skipped,
        "classes": [[k, v] for k, v in sorted(result.class_counts.items())],
        "input_bytes": result.input_bytes,
        "sizes": result.sizes,
        "fetch": result.fetch,
    }
    if result.keys:  # only a Python dataset's samples give their keys
        record["keys"] = result.keys
    if result.totals:  # absent from a sample build's records
        record["totals"] = dict(sorted(result.totals.items()))
    return record


def decode_result(obj: dict[str, Any]) -> TaskResult:
    return TaskResult(
        index=int(obj["task"]),
        parts=[ShardRecord(str(n), int(s), int(b), parse_digest(h)) for n, s, b, h in obj["parts"]],
        skipped=[(str(p), str(r)) for p, r in obj["skipped"]],
        class_counts={int(k): int(v) for k, v in obj["classes"]},
        input_bytes=int(obj["input_bytes"]),
        sizes=[int(n) for n in obj["sizes"]],
        fetch=[(int(n), str(what)) for n, what in obj.get("fetch", [])],
        totals={str(k): int(v) for k, v in obj.get("totals", {}).items()},
        keys=[str(k) for k in obj.get("keys", [])],
    )
