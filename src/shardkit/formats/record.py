"""The shard record: one shard's name, sample count, size and digest.

What a writer commits, a build's worker writes (a part, or a shard it assembles), the
build's journal keeps and its manifest lists, and what :func:`shardkit.build` returns:
one type from the writer to the manifest. The digest is ``ALGO:HEX``
(:mod:`shardkit.digest`), ``""`` when nothing was hashed (``hash="none"``).

:class:`ShardInfo` is the record a writer reports (``ShardWriter``, the tools, ``split``,
``map_shards``): the same record, with where the shard is (``url``) and its number in the
writer's run (``index``). What a manifest *states* of a shard (any of samples, bytes and
digest may be missing) is :class:`shardkit.formats.manifest.ManifestShard`; a tool's input
(:class:`shardkit.tools._inputs.ShardRef`) carries that statement rather than copies of it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ShardInfo", "ShardRecord"]


@dataclass(frozen=True)
class ShardRecord:
    """One complete shard (or build part): its file name, samples, bytes and digest."""

    name: str
    samples: int
    bytes: int
    digest: str


@dataclass(frozen=True)
class ShardInfo(ShardRecord):
    """A committed shard as its writer reports it: the record (``name`` is the file's name)
    plus its ``url`` and its ``index``, the shard's number in the writer's run."""

    url: str
    index: int

    @classmethod
    def at(cls, url: str, samples: int, bytes: int, digest: str, index: int) -> ShardInfo:
        """The record of the shard at ``url`` (its name is the URL's last component)."""
        return cls(url.rstrip("/").rsplit("/", 1)[-1], samples, bytes, digest, url, index)
