"""Turning finished tasks into final shards, in plan order (two strategies).

Both are fed task results strictly in plan order by the driver, and both can pick up
after a crash from what the journal recorded.

:class:`Renamer` (sizes known up front: pass-through of listed files). Each task already
wrote whole shards (its parts); committing renames them to ``{prefix}-{index:06d}`` in
order. No byte is copied.

:class:`Assembler` (sizes unknown up front: resized images, Python samples, URLs). Tasks
are small chunks of items, so every worker stays busy whatever the shard size; each
chunk's samples sit back to back in one part file, with their sizes in the task result.
The assembler copies samples into the current shard and starts a new one exactly where
``max_count`` or ``max_size`` says, then deletes parts it has fully used. Copying costs
one more pass over the output, small next to decoding and resizing.

Both work through the output's :class:`~.store.Store`: in an object store a rename is a
server-side copy and a delete. The Assembler serves a local OUT; an object-store OUT is
assembled by the workers instead (:mod:`.assembly`), so no shard byte passes through the
driver.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ..errors import StorageError
from ..formats.tar import END_OF_ARCHIVE
from .journal import Journal
from .manifest import ShardRecord
from .options import BuildOptions
from .store import LocalStore, ObjectStore, Pending
from .worker import TaskResult

__all__ = ["Assembler", "Renamer"]

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
                ok = ok and any(matches(name, part.bytes, part.sha256) for name in where)
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
            self.shards.append(ShardRecord(final, part.samples, part.bytes, part.sha256))

    def finish(self) -> None:
        """Nothing left to do: every shard was renamed as its task came in."""


class Assembler:
    """Copy chunk parts' samples into shards cut exactly by ``max_count``/``max_size``."""

    def __init__(
        self, store: AnyStore, journal: Journal, final_name: Namer, options: BuildOptions
    ) -> None:
        self.store = store
        self.journal = journal
        self.final_name = final_name
        self.max_count = options.max_count
        self.max_size = options.size_limit
        self.trailer = END_OF_ARCHIVE if options.format == "tar" else b""
        self.shards: list[ShardRecord] = []
        self.start = 0  # first chunk still needed
        self._skip = 0  # samples of chunk ``start`` already in committed shards
        self._used: list[str] = []  # parts fully copied, to delete after a commit
        self._pending: Pending | None = None
        self._count = self._size = 0
        self._hash = hashlib.sha256()

    def resume(self) -> list[int]:
        """Keep the verified prefix of committed shards; returns chunks to run again."""
        matches = self.store.matcher()
        for record in self.journal.shards:
            shard = ShardRecord(
                record["name"], record["samples"], record["bytes"], record["sha256"]
            )
            if not matches(shard.name, shard.bytes, shard.sha256):
                break
            self.shards.append(shard)
            self.start, self._skip = record["end"]
        self.journal.keep_shards(len(self.shards))
        return [
            task
            for task, result in self.journal.done.items()
            if task >= self.start
            and not all(matches(p.name, p.bytes, p.sha256) for p in result.parts)
        ]

    def add(self, result: TaskResult) -> None:
        skip, self._skip = self._skip, 0
        if not result.parts:
            return
        name = result.parts[0].name
        with self._reading(name) as source:
            if skip:
                source.seek(sum(result.sizes[:skip]))
            for offset, size in enumerate(result.sizes[skip:], start=skip):
                if self._count and (
                    self._count >= self.max_count
                    or self._size + size + len(self.trailer) > self.max_size
                ):
                    self._commit((result.index, offset))
                self._append(_read_exactly(source, size, self.store.join(name)))
        self._used.append(name)

    @contextlib.contextmanager
    def _reading(self, name: str) -> Iterator[BinaryIO]:
        try:
            source = self.store.open_read(name)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(
                f"cannot read: {exc.strerror or exc}", url=self.store.join(name)
            ) from exc
        with source:
            yield source

    def _append(self, data: bytes) -> None:
        with self._writing():
            if self._pending is None:
                self._pending = self.store.create(self.final_name(len(self.shards)))
                self._count = self._size = 0
                self._hash = hashlib.sha256()
            self._pending.write(data)
        self._hash.update(data)
        self._count += 1
        self._size += len(data)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an OSError (a full disk) into a StorageError, dropping the shard in progress."""
        try:
            yield
        except OSError as exc:
            url = self._pending.url if self._pending is not None else self.store.url
            self.abort()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=url) from exc

    def _commit(self, end: tuple[int, int]) -> None:
        pending = self._pending
        if pending is None:
            return
        with self._writing():
            pending.write(self.trailer)
            pending.commit()  # a failed commit leaves nothing behind
        self._pending = None
        self._hash.update(self.trailer)
        name = self.final_name(len(self.shards))
        shard = ShardRecord(
            name, self._count, self._size + len(self.trailer), self._hash.hexdigest()
        )
        self.shards.append(shard)
        self.journal.record_shard({**_record(shard), "end": list(end)})
        self.store.remove(self._used)
        self._used = []

    def finish(self) -> None:
        """Commit the last shard."""
        self._commit((1 << 62, 0))

    def abort(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.discard()


def _read_exactly(source: BinaryIO, size: int, url: str) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise StorageError(f"part ended early: {len(data)} of {size} bytes", url=url)
    return data


def _record(shard: ShardRecord) -> dict[str, Any]:
    return dataclasses.asdict(shard)
