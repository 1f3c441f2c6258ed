"""Turning finished tasks into final shards, in plan order, when sizes are known up front.

:class:`Renamer` (pass-through of listed files): each task already wrote whole shards (its
parts, cut by the plan and the part writer with the one cut rule); committing renames them
to ``{prefix}-{index:06d}`` in order. No byte is copied. It is fed task results strictly in
plan order by the driver, and picks up after a crash from what the journal recorded. It
works through the output's :class:`~.store.Store`: in an object store a rename is a
server-side copy and a delete.

Where sizes are not known up front (resized images, Python samples, URLs), tasks are
chunks and the workers assemble the shards (:mod:`.assembly`), into a local folder or an
object store alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from .journal import Journal
from .manifest import ShardRecord
from .store import LocalStore, ObjectStore
from .worker import TaskResult

__all__ = ["Namer", "Renamer"]

Namer = Callable[[int], str]
AnyStore = LocalStore | ObjectStore


class Renamer:
    """Commit tasks whose parts are already whole shards, by renaming them in order."""

    def __init__(self, store: AnyStore, journal: Journal, final_name: Namer) -> None:
        self.store = store
        self.journal = journal
        self.final_name = final_name
        self.shards: list[ShardRecord] = []
        self.start = 0

    def resume(self) -> list[int]:
        """Check recorded tasks' files (part or final name); returns tasks to run again."""
        done, redo = self.journal.done, []
        matches = self.store.matcher()
        index, contiguous = 0, True
        for task in range(max(done, default=-1) + 1):
            result = done.get(task)
            if result is None:
                contiguous = False
                continue
            ok = True
            for part in result.parts:
                where = [part.name]
                if contiguous:  # final indices are known only after an unbroken prefix
                    where.append(self.final_name(index))
                ok = ok and any(matches(name, part.bytes, part.digest) for name in where)
                index += 1
            if not ok:
                redo.append(task)
        return redo

    def add(self, result: TaskResult) -> None:
        for part in result.parts:
            final = self.final_name(len(self.shards))
            # A missing part was renamed before an interruption (resume verified it).
            with contextlib.suppress(FileNotFoundError):
                self.store.rename(part.name, final)
            self.shards.append(ShardRecord(final, part.samples, part.bytes, part.digest))

    def finish(self) -> None:
        """Nothing left to do: every shard was renamed as its task came in."""
