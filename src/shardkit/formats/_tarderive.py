"""The member table of a tar shard without one, noted while its headers are parsed.

An indexed shard's member table (:mod:`shardkit.formats.members`) makes each read of a
sample a few slices of the mapped shard. A shard without one (no index, or an index
older than tables) is parsed; :class:`TableNotes` notes, as the parser's fast loop
(:func:`shardkit.formats._targroup.buffer_samples`) walks its plain members, what a
table needs (each sample's key, offset and extensions, each member's size), so that a
reader that keeps the table (:class:`shardkit.pipeline._idxfiles.IndexCache`, which
asks for notes from a shard's second read in a process on) stops parsing the shard, and
every later pass over it is slicing.

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

from .members import RESERVED, MemberTable

__all__ = ["TableNotes"]

_MAX_LAYOUTS = 0xFFFF  # distinct extension lists a table holds (uint16)
_STEP = 1 << 13  # samples whose extension lists are gathered at once


class TableNotes:
    """What a member table needs, noted as the parser walks (see the module docs): each
    sample's key and offset (:meth:`sample`), each member's extension and size
    (:meth:`member`); the table is made from them later (:meth:`table`), so that a
    single pass pays only for the notes."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.offsets = array("q")
        self.firsts = array("q")  # per sample: its first member
        self.exts: list[str] = []
        self._names: dict[str, str] = {}  # each extension once: a member holds a reference
        self.sizes = array("I")  # the parser's limit is at most MAX_MEMBER_SIZE here
        self._end = self._shard_bytes = 0

    def sample(self, key: str, offset: int) -> None:
        """A sample ``key`` starts at ``offset``."""
        self.keys.append(key)
        self.offsets.append(offset)
        self.firsts.append(len(self.sizes))

    def member(self, ext: str, size: int) -> None:
        """The current sample has a member of ``size`` bytes, extension ``ext``
        (lower-cased; not one of the sample's earlier members')."""
        self.exts.append(self._names.setdefault(ext, ext))
        self.sizes.append(size)

    def end(self, end: int, shard_bytes: int) -> bool:
        """The last sample ends at ``end``, in a shard of ``shard_bytes``: whether any
        sample was noted."""
        self._end, self._shard_bytes = end, shard_bytes
        return bool(self.keys)

    def table(self) -> MemberTable | None:
        """The member table of the samples noted, prepared for reading and marked
        checked against the shard's bytes (it was made from them); None when a table
        cannot hold them (an empty extension, one a sample dict reserves, too many
        kinds of samples)."""
        ids: dict[tuple[str, ...], int] = {}
        layout = array("H")
        firsts = self.firsts
        bounds = array("q", firsts[1:])
        bounds.append(len(self.sizes))
        for at in range(0, len(firsts), _STEP):  # a step at a time: few tuples held at once
            cut = map(slice, firsts[at : at + _STEP], bounds[at : at + _STEP])
            layouts = list(map(tuple, map(self.exts.__getitem__, cut)))
            for names in dict.fromkeys(layouts):
                if names not in ids:
                    if len(ids) >= _MAX_LAYOUTS or "" in names or RESERVED.intersection(names):
                        return None
                    ids[names] = len(ids)
            layout.extend(map(ids.__getitem__, layouts))
        spans = array("q", map(sub, [*self.offsets[1:], self._end], self.offsets))
        table = MemberTable(list(ids), layout, self.sizes)
        table.prepare(self.keys, self.offsets, spans, self._shard_bytes, url=None)
        table.verified = True
        return table
