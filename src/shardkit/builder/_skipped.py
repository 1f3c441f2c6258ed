"""What a build skipped: counted and sorted in bounded memory, listed in ``skipped.jsonl``.

The manifest scales with what was built, not with what was skipped: it holds the number of
items skipped (``skipped_count``) and the first :data:`IN_MANIFEST` of them (by path,
then reason); the whole list is ``skipped.jsonl`` beside it (one ``{"path", "reason"}``
object per line, in the same order, written atomically before the manifest). The driver
holds at most :data:`_BUDGET` skipped items at a time: more go to sorted runs in the
build's spill folder (:mod:`.spill`), merged as the file is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from ..formats.names import encode_name
from ._spill import Sorter, Spill
from ._store import Store

__all__ = ["IN_MANIFEST", "SKIPPED_NAME", "Skipped", "SkippedLog", "bounded", "write_skipped"]

SKIPPED_NAME = "skipped.jsonl"
IN_MANIFEST = 1000  # skipped items listed in the manifest itself (and in BuildResult)
_MAX_TEXT = 4096  # characters of a path or a reason kept: each line stays bounded
_WRITE = 1 << 20  # bytes of lines gathered per write
_BUDGET = 1 << 15  # skipped items held in memory at once (then sorted runs on disk)

Skipped = tuple[str, str]  # (path, reason)


def bounded(text: str) -> str:
    """``text``, cut to :data:`_MAX_TEXT` characters (marked) if longer."""
    if len(text) <= _MAX_TEXT:
        return text
    return f"{text[:_MAX_TEXT]}... ({len(text)} characters)"


class SkippedLog:
    """The skipped items of one build, in any number: :meth:`append` as they come,
    :meth:`sorted` once at the end. The spill folder is the build's, or one of its own
    (made only if it spills, removed by :meth:`close`)."""

    def __init__(self, spill: Spill | None = None) -> None:
        self._own = spill is None
        self._spill = spill if spill is not None else Spill()
        self._sorter = Sorter(self._spill, _BUDGET)

    def __len__(self) -> int:
        return self._sorter.count

    def append(self, item: Skipped) -> None:
        path, reason = item
        self._sorter.add((bounded(str(path)), bounded(str(reason))))

    def extend(self, items: Iterable[Skipped]) -> None:
        for item in items:
            self.append(item)

    def sorted(self) -> Iterator[Skipped]:
        """Every item appended, by path then reason (one pass)."""
        return self._sorter.sorted()

    def close(self) -> None:
        if self._own:
            self._spill.close()


def write_skipped(store: Store, items: Iterator[Skipped]) -> tuple[list[Skipped], int]:
    """Write ``items`` to ``skipped.jsonl`` in ``store`` (atomically; nothing when there
    are none; names made safe as the manifest makes them); returns the first
    :data:`IN_MANIFEST` of them and how many there were."""
    first: list[Skipped] = []
    count = 0
    file = None
    lines: list[bytes] = []
    held = 0
    try:
        for path, reason in items:
            if file is None:
                file = store.create(SKIPPED_NAME)
            doc = {"path": encode_name(path), "reason": encode_name(reason)}
            line = json.dumps(doc, ensure_ascii=False).encode("utf-8") + b"\n"
            lines.append(line)
            held += len(line)
            if held >= _WRITE:
                file.write(b"".join(lines))
                lines, held = [], 0
            if count < IN_MANIFEST:
                first.append((path, reason))
            count += 1
        if file is not None:
            file.write(b"".join(lines))
            file.commit()
    except BaseException:
        if file is not None:
            file.discard()
        raise
    return first, count
