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
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ..errors import StorageError
from ..formats.tar import END_OF_ARCHIVE
from .journal import Journal
from .manifest import ShardRecord
from .options import BuildOptions
from .worker import TaskResult

__all__ = ["Assembler", "Renamer", "file_matches"]

Namer = Callable[[int], str]


def file_matches(path: str, size: int, sha256: str) -> bool:
    """Whether ``path`` exists with exactly this size and sha256."""
    try:
        if os.path.getsize(path) != size:
            return False
        digest = hashlib.sha256()
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    except OSError:
        return False
    return digest.hexdigest() == sha256


class Renamer:
    """Commit tasks whose parts are already whole shards, by renaming them in order."""

    def __init__(self, out: str, journal: Journal, final_name: Namer) -> None:
        self.out = out
        self.journal = journal
        self.final_name = final_name
        self.shards: list[ShardRecord] = []
        self.start = 0

    def resume(self) -> list[int]:
        """Check recorded tasks' files (part or final name); returns tasks to run again."""
        done, redo = self.journal.done, []
        index, contiguous = 0, True
        for task in range(max(done, default=-1) + 1):
            result = done.get(task)
            if result is None:
                contiguous = False
                continue
            ok = True
            for part in result.parts:
                where = [os.path.join(self.out, part.name)]
                if contiguous:  # final indices are known only after an unbroken prefix
                    where.append(os.path.join(self.out, self.final_name(index)))
                ok = ok and any(file_matches(p, part.bytes, part.sha256) for p in where)
                index += 1
            if not ok:
                redo.append(task)
        return redo

    def add(self, result: TaskResult) -> None:
        for part in result.parts:
            final = self.final_name(len(self.shards))
            source = os.path.join(self.out, part.name)
            if os.path.exists(source):  # else renamed before an interruption (verified)
                os.replace(source, os.path.join(self.out, final))
            self.shards.append(ShardRecord(final, part.samples, part.bytes, part.sha256))

    def finish(self) -> None:
        """Nothing left to do: every shard was renamed as its task came in."""


class Assembler:
    """Copy chunk parts' samples into shards cut exactly by ``max_count``/``max_size``."""

    def __init__(
        self, out: str, journal: Journal, final_name: Namer, options: BuildOptions
    ) -> None:
        self.out = out
        self.journal = journal
        self.final_name = final_name
        self.max_count = options.max_count
        self.max_size = options.size_limit
        self.trailer = END_OF_ARCHIVE if options.format == "tar" else b""
        self.shards: list[ShardRecord] = []
        self.start = 0  # first chunk still needed
        self._skip = 0  # samples of chunk ``start`` already in committed shards
        self._used: list[str] = []  # part files fully copied, to delete after a commit
        self._stream: BinaryIO | None = None
        self._tmp = ""
        self._count = self._size = 0
        self._hash = hashlib.sha256()

    def resume(self) -> list[int]:
        """Keep the verified prefix of committed shards; returns chunks to run again."""
        for record in self.journal.shards:
            shard = ShardRecord(
                record["name"], record["samples"], record["bytes"], record["sha256"]
            )
            if not file_matches(os.path.join(self.out, shard.name), shard.bytes, shard.sha256):
                break
            self.shards.append(shard)
            self.start, self._skip = record["end"]
        return [
            task
            for task, result in self.journal.done.items()
            if task >= self.start
            and not all(
                file_matches(os.path.join(self.out, p.name), p.bytes, p.sha256)
                for p in result.parts
            )
        ]

    def add(self, result: TaskResult) -> None:
        skip, self._skip = self._skip, 0
        if not result.parts:
            return
        part = os.path.join(self.out, result.parts[0].name)
        with open(part, "rb") as source:
            if skip:
                source.seek(sum(result.sizes[:skip]))
            for offset, size in enumerate(result.sizes[skip:], start=skip):
                if self._count and (
                    self._count >= self.max_count
                    or self._size + size + len(self.trailer) > self.max_size
                ):
                    self._commit((result.index, offset))
                self._append(source.read(size))
        self._used.append(part)

    def _append(self, data: bytes) -> None:
        with self._writing():
            if self._stream is None:
                name = self.final_name(len(self.shards))
                self._tmp = os.path.join(self.out, f".{name}.tmp-{os.getpid()}")
                self._stream = open(self._tmp, "wb")  # noqa: SIM115
                self._count = self._size = 0
                self._hash = hashlib.sha256()
            self._stream.write(data)
        self._hash.update(data)
        self._count += 1
        self._size += len(data)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an OSError (a full disk) into a StorageError, dropping the shard in progress."""
        try:
            yield
        except OSError as exc:
            self.abort()
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=self._tmp) from exc

    def _commit(self, end: tuple[int, int]) -> None:
        stream = self._stream
        if stream is None:
            return
        with self._writing():
            stream.write(self.trailer)
            stream.close()
        self._stream = None
        self._hash.update(self.trailer)
        name = self.final_name(len(self.shards))
        os.replace(self._tmp, os.path.join(self.out, name))
        shard = ShardRecord(
            name, self._count, self._size + len(self.trailer), self._hash.hexdigest()
        )
        self.shards.append(shard)
        self.journal.record_shard({**_record(shard), "end": list(end)})
        for part in self._used:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)
        self._used = []

    def finish(self) -> None:
        """Commit the last shard."""
        self._commit((1 << 62, 0))

    def abort(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(OSError):  # what it could not flush is dropped anyway
                stream.close()
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)


def _record(shard: ShardRecord) -> dict[str, Any]:
    return dataclasses.asdict(shard)
