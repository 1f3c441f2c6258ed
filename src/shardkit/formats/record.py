"""The shard record: one shard's name, sample count, size and digest.

What a writer commits, a build's worker writes (a part, or a shard it assembles), the
build's journal keeps and its manifest lists, and what :func:`shardkit.build` returns:
one type from the writer to the manifest. The digest is ``ALGO:HEX``
(:mod:`shardkit.digest`), ``""`` when nothing was hashed (``hash="none"``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ShardRecord"]


@dataclass(frozen=True)
class ShardRecord:
    """One complete shard (or build part): its file name, samples, bytes and digest."""

    name: str
    samples: int
    bytes: int
    digest: str
