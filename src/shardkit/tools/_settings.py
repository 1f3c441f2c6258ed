"""One tool run's settings, resolved once at the tool's door (:meth:`ToolRun.of`).

The tools that run over input shards take the same keywords, defined once here:
:class:`ToolOptions` (``storage_options=``, fsspec's options for remote URLs;
``progress=``, a callback that hears of each input shard done) and, for those that
write, :class:`WriteOptions` (``hash=``, each file's digest algorithm; ``on_shard=``, a
callback that gets each file written). The door turns them into one :class:`ToolRun`,
which the tool's parts take instead of the keywords one by one: the shards it reads
carry its :class:`~shardkit.storage.Access` (:class:`~shardkit.tools._inputs.ShardRef`),
its output reports through it (:class:`~shardkit.tools._outputs.Output`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, cast

from ..digest import DEFAULT_HASH, HashName
from ..formats.record import ShardInfo
from ..storage import LOCAL, Access, StorageOptions
from ._progress import ShardCount, ToolProgressFn, counted

__all__ = ["DEFAULT_RUN", "OnShard", "ToolOptions", "ToolRun", "WriteOptions"]

T = TypeVar("T")

OnShard = Callable[[ShardInfo], None]
"""Gets each file a tool writes (its size and digest), once it is committed."""


class ToolOptions(TypedDict, total=False):
    """The keywords of every tool that runs over input shards."""

    storage_options: Access | StorageOptions | None
    progress: ToolProgressFn | None


class WriteOptions(ToolOptions, total=False):
    """The keywords of every tool that writes shards."""

    hash: HashName
    on_shard: OnShard | None


_KEYWORDS = {  # TypedDict keys, for the check at run time
    writes: frozenset(cast(Any, keywords).__optional_keys__)
    for writes, keywords in ((False, ToolOptions), (True, WriteOptions))
}


@dataclass(frozen=True)
class ToolRun:
    """A tool run's settings: how storage is reached, where progress and each file
    written are reported, and the digest of each file written."""

    access: Access = LOCAL
    progress: ToolProgressFn | None = None
    hash: HashName = DEFAULT_HASH
    on_shard: OnShard | None = None

    @classmethod
    def of(cls, tool: str, options: Mapping[str, Any], *, writes: bool = True) -> ToolRun:
        """The run of ``tool`` given its ``**options`` (:class:`WriteOptions`, or
        :class:`ToolOptions` for a tool that ``writes`` nothing); any other keyword is a
        TypeError, as for any function."""
        known = _KEYWORDS[writes]
        for name in options:
            if name not in known:
                raise TypeError(f"{tool}() got an unexpected keyword argument {name!r}")
        return cls(
            Access.of(options.get("storage_options")),
            options.get("progress"),
            options.get("hash", DEFAULT_HASH),
            options.get("on_shard"),
        )

    def track(self, items: Iterable[T]) -> Iterable[T]:
        """``items`` (input shards), each reported done to :attr:`progress` as the next
        one is asked for (as is without a callback)."""
        if self.progress is None:
            return items
        total = len(items) if isinstance(items, Sized) else None
        return counted(items, ShardCount(total, self.progress))


DEFAULT_RUN = ToolRun()
"""A run with the defaults: local access (fsspec's environment), no reports."""
