"""The member table of a tar shard without one, noted while its headers are parsed.

An indexed shard's member table (:mod:`shardkit.formats.members`) makes each read of a
sample a few slices of the mapped shard. A shard without one (no index, or an index
older than tables) is parsed; :class:`TableNotes` notes, as the parser's fast loop
(:func:`shardkit.formats._targroup.buffer_samples`) walks its plain members, what a
table needs (each sample's key, offset and extensions, each member's size), so that a
reader that keeps the table (:class:`shardkit.pipeline._idxfiles.IndexCache`) parses a
shard once per process, and every later pass over it is slicing.

Only a shard a table describes exactly gets one: the loop read every member (each
plain: one ustar header of a regular file, its checksum right, its size within the
limit; each named ``key.ext``; no extension twice in a sample) up to the end of the
archive (an end-of-archive block, or the end of the bytes), and each sample's
extensions are ones a table holds. Anything else (a GNU or PAX header, a link, a name
without a key, a member cut short, garbage) leaves the parser's member scanner to go on
and the shard without a table: it is parsed again next time, with the stream's
outcome. What is noted grows with the members really walked (one per 512 bytes of the
shard at most), never with what a header claims.
"""

from __future__ import annotations

from array import array
from operator import sub
from typing import Any

from .members import RESERVED, MemberTable

__all__ = ["TableNotes"]

_MAX_LAYOUTS = 0xFFFF  # distinct extension lists a table holds (uint16)


class TableNotes:
    """What a member table needs, noted sample by sample (see the module docs): the
    parser appends each sample's key and offset to :attr:`keys` and :attr:`offsets`,
    each member's size to :attr:`sizes`, and :meth:`close` s each sample."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.offsets = array("q")
        self.sizes = array("I")  # the parser's limit is at most MAX_MEMBER_SIZE here
        self.layout = array("H")
        self.layouts: dict[tuple[str, ...], int] = {}
        self.fits = True  # False once a sample's extensions cannot be held
        self._end = self._shard_bytes = 0

    def close(self, sample: dict[str, Any], extensions: set[str]) -> None:
        """The current sample is ``sample`` (its members' fields, in order, after
        ``__key__``, ``__url__`` and ``__offset__``), of these distinct extensions."""
        names = tuple(sample)[3:]
        found = self.layouts.get(names)
        if found is None and self.fits:
            # one a table cannot name, or too many kinds of samples
            bad = "" in names or RESERVED.intersection(names) or len(self.layouts) >= _MAX_LAYOUTS
            found = None if bad else self.layouts.setdefault(names, len(self.layouts))
        if found is None or len(names) != len(extensions):  # a field took a member's place
            self.fits = False
            return
        self.layout.append(found)

    def end(self, end: int, shard_bytes: int) -> bool:
        """The last sample ends at ``end``, in a shard of ``shard_bytes``: whether a table
        can hold the samples noted (:meth:`table` makes it)."""
        self._end, self._shard_bytes = end, shard_bytes
        return self.fits and bool(self.keys)

    def table(self) -> MemberTable:
        """The member table of the samples noted, prepared for reading and marked checked
        against the shard's bytes (it was made from them)."""
        spans = array("q", map(sub, [*self.offsets[1:], self._end], self.offsets))
        table = MemberTable(list(self.layouts), self.layout, self.sizes)
        table.prepare(self.keys, self.offsets, spans, self._shard_bytes, url=None)
        table.verified = True
        return table
