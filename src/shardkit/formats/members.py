"""The member table of a tar shard's index: what makes reading a sample a few slices.

An index (:mod:`shardkit.formats.index`) lists each sample's span. Its member table says
what the span holds, for shards whose every member is a plain ustar member (one 512-byte
header, then the data padded to 512 bytes, as shardkit's writer writes them)::

    "members": {
      "layouts": [["cls", "txt"], ...],   # each distinct extension list, in member order
      "layout": "AAAAAAAA...",             # per sample: its layout (uint16)
      "sizes": "AQAAAOsDAAAB..."          # per member: its data size (uint32)
    }

(the numbers as little-endian arrays in base64: compact, and quick to load without a
Python object per number).
So member ``j`` of a sample starts ``512`` bytes after the end (padding included) of
member ``j - 1`` (or of the span's start), and the members fill the span exactly.
Nothing else is stored: offsets follow from sizes, so members cannot overlap or leave
their span, and the table is checked whole against the index's spans
(:meth:`MemberTable.prepare`: distinct lower-case extensions, each size within the
reader's member limit, the members filling each span exactly). Against the shard's
bytes, :func:`verify_members` checks each member's header names the listed key and
extension and holds the listed size (a cheap comparison, not a parse: header checksums
are not checked), once per shard and process for streaming reads, per sample for random
access. A table that fails either check is refused with a FormatError naming the index
or the shard; an index without a table (written before it existed) still reads, by the
parser.
"""

from __future__ import annotations

import base64
import bisect
import functools
import itertools
import re
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import add, and_, eq, ne, sub
from typing import Any

from ..errors import FormatError
from ._tarparse import BLOCK, Buffer, checksum_ok, plain_members
from ._tarrules import split_name
from .limits import MAX_MEMBER_SIZE
from .names import decode_name, encode_name

__all__ = [
    "MemberTable",
    "TableBuilder",
    "check_end",
    "sample_members",
    "slice_samples",
    "table_sample",
    "verify_members",
]

#: Fields of a sample dict that no member may fill.
RESERVED = frozenset({"__key__", "__url__", "__offset__"})
_HEAD = ("__key__", "__url__", "__offset__")
_ZERO_BLOCK = bytes(BLOCK)
_MAX_SIZE = 0xFFFFFFFF  # a member size the table holds (uint32)
_MAX_LAYOUTS = 0xFFFF  # distinct layouts in one table (uint16)
# In keys each followed by NUL: one that split_name would not give back from KEY.EXT.
_DOTTED = re.compile(r"\.[^\0/]*\0")  # a dot in a key's last part


class MemberTable:
    """One index's member table (see the module docs); :meth:`prepare` checks it against
    the index's spans and keeps where each member's data lies."""

    def __init__(
        self, layouts: Sequence[Sequence[str]], layout: Sequence[int], sizes: Sequence[int]
    ) -> None:
        self.layouts = tuple(tuple(names) for names in layouts)
        self.layout = layout if isinstance(layout, array) else array("H", layout)
        self.sizes = sizes if isinstance(sizes, array) else array("I", sizes)
        #: its largest member: a reader slices by the table only when the member limit
        #: takes it (else it parses, and refuses that member as the parse does)
        self.largest = max(self.sizes, default=0)
        # What :meth:`prepare` keeps, all a reader needs of the index (compact: arrays, and
        # the keys as one string, so that a cached table holds few Python objects)
        self.shard_bytes = 0
        self.end = 0  # where the last sample ends
        self.offsets = array("q")  # per sample: its span's offset
        self.data = array("q")  # per member: its data's shard offset
        self.first = array("q")  # per sample: its first member; one past the last at the end
        self.runs: list[tuple[int, int, int]] = []  # (first sample, end sample, layout)
        self.run_starts: list[int] = []  # each run's first sample
        self._keys = ""  # every key, each followed by NUL (no tar name holds one)
        self._key_at = array("q")  # per sample: where its key starts in _keys; then the end
        self.verified = False  # checked against the shard's bytes (streaming reads)

    def keys(self, start: int, stop: int) -> list[str]:
        """The keys of samples ``start`` to ``stop``."""
        if start >= stop:
            return []
        return self._keys[self._key_at[start] : self._key_at[stop] - 1].split("\0")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemberTable):
            return NotImplemented
        return (self.layouts, self.layout, self.sizes) == (other.layouts, other.layout, other.sizes)

    __hash__ = None  # type: ignore[assignment]

    def to_doc(self) -> dict[str, Any]:
        return {
            "layouts": [[encode_name(ext) for ext in names] for names in self.layouts],
            "layout": _pack(self.layout, "H"),
            "sizes": _pack(self.sizes, "I"),
        }

    @classmethod
    def from_doc(cls, doc: Any) -> MemberTable:
        """The table of an index document's ``members``; ValueError/TypeError if malformed."""
        if not isinstance(doc, dict):
            raise TypeError("members is not an object")
        layouts = [[decode_name(_text(ext)) for ext in names] for names in _list(doc["layouts"])]
        return cls(layouts, _unpack(doc["layout"], "H"), _unpack(doc["sizes"], "I"))

    def check(self, samples: int, *, url: str | None) -> None:
        """The cheap part of the check, done on every load (no Python per sample): the
        layouts are extension lists a sample can have, one per sample, the sizes as many
        as the layouts hold. :meth:`prepare` checks the rest before a read uses it."""

        def bad(message: str) -> FormatError:
            return FormatError(f"bad index member table: {message}", url=url)

        if len(self.layout) != samples:
            raise bad(f"{len(self.layout)} layouts for {samples} samples")
        for names in self.layouts:
            if not names or len(set(names)) != len(names):
                raise bad(f"layout {list(names)!r} is empty or repeats an extension")
            for ext in names:
                if not ext or ext != ext.lower() or ext in RESERVED or "/" in ext:
                    raise bad(f"extension {ext!r} is not one a member name can give")
        if samples and max(self.layout) >= len(self.layouts):
            raise bad(f"a sample has layout {max(self.layout)}, there are {len(self.layouts)}")
        counts = [len(names) for names in self.layouts]
        members = sum(map(counts.__getitem__, self.layout))
        if members != len(self.sizes):
            raise bad(f"{len(self.sizes)} member sizes, the layouts hold {members}")
        if self.largest > MAX_MEMBER_SIZE:
            raise bad(f"a member of {self.largest} bytes is over the reader's limit")

    def prepare(
        self,
        keys: Sequence[str],
        offsets: Sequence[int],
        spans: Sequence[int],
        shard_bytes: int,
        *,
        url: str | None,
    ) -> None:
        """Check the table against the index's spans (see the module docs) and keep where
        each member's data lies; a FormatError naming ``url`` (the index) if it lies."""

        def bad(message: str) -> FormatError:
            return FormatError(f"bad index member table: {message}", url=url)

        if self.first:
            return  # prepared before
        self.check(len(offsets), url=url)
        # Each key the one its members' names give, as a parse would (a key whose last
        # part holds a dot would split a member name elsewhere: another key, other fields).
        joined = "\0".join(keys) + "\0" if keys else ""
        if (
            joined.count("\0") != len(keys)
            or "/\0" in joined  # no last part
            or "\0\0" in joined
            or joined.startswith("\0")
            or ("." in joined and _DOTTED.search(joined))
        ):
            key = next(k for k in keys if "\0" in k or split_name(k + ".x") != (k, "x"))
            raise bad(f"key {key!r} is not what its members' names give (the tar naming rule)")
        # No Python per member: each member takes a header block and its padded data;
        # the running total of those, shifted to each sample's offset, is where its data
        # starts, and each sample's members must add up to its span.
        counts = [len(names) for names in self.layouts]
        per_sample = array("q", map(counts.__getitem__, self.layout))
        first = array("q", itertools.accumulate(per_sample, initial=0))
        padded = map(and_, map(add, self.sizes, repeat(2 * BLOCK - 1)), repeat(-BLOCK))
        total = array("q", itertools.accumulate(padded, initial=0))  # blocks before member m
        at_first = array("q", map(total.__getitem__, first))
        filled = map(sub, at_first[1:], at_first[:-1])
        if not all(map(eq, filled, spans)):
            filled_each = zip(filled_list(at_first), spans, strict=True)
            i = next(i for i, (x, y) in enumerate(filled_each) if x != y)
            raise bad(
                f"the members of sample {i} do not fill its span ({spans[i]} bytes at {offsets[i]})"
            )
        # The samples back to back from byte 0, as a parse finds them: a table is written
        # only for a shard of plain members, and a gap would hide a sample the stream has.
        sample_at = array("q", offsets)
        if sample_at != at_first[:-1]:
            pairs = enumerate(zip(sample_at, at_first[:-1], strict=True))
            i = next(i for i, (a, b) in pairs if a != b)
            where = f"where sample {i - 1} ends" if i else "at the shard's first byte"
            raise bad(f"sample {i} (at {sample_at[i]}) does not start {where}")
        data = array("q", map(add, total[:-1], repeat(BLOCK)))
        layout = self.layout
        starts = [0, *itertools.compress(itertools.count(1), map(ne, layout[1:], layout))]
        starts = starts if layout else []
        bounds = [*starts, len(offsets)]
        self.runs = [(a, b, self.layout[a]) for a, b in itertools.pairwise(bounds)]
        self.run_starts = starts
        self.data, self.first = data, first
        self.offsets, self.shard_bytes = sample_at, shard_bytes
        self.end = at_first[-1]  # where the last sample ends
        self._keys = joined
        lengths = map(add, map(len, keys), repeat(1))
        self._key_at = array("q", itertools.accumulate(lengths, initial=0))


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("a member table field is not a list")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("an extension is not a string")
    return value


def filled_list(at_first: array[int]) -> list[int]:
    """Each sample's bytes, as its members take them (for the error message)."""
    return [b - a for a, b in itertools.pairwise(at_first)]


def _pack(numbers: array[int], code: str) -> str:
    packed = array(code, numbers)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def _unpack(text: Any, code: str) -> array[int]:
    if not isinstance(text, str):
        raise TypeError("a member table array is not a base64 string")
    raw = base64.b64decode(text, validate=True)
    numbers = array(code)
    if len(raw) % numbers.itemsize:
        raise ValueError("a member table array is not whole numbers")
    numbers.frombytes(raw)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers


def sample_members(data: Buffer, key: str) -> tuple[tuple[str, ...], list[int]] | None:
    """(extensions, sizes) of the members of one encoded tar sample (a writer's), or None
    when a table cannot describe it (a member that is not plain, or named otherwise than
    ``key.ext`` with distinct extensions a sample dict can hold): its shard then gets an
    index without a table."""
    members = plain_members(data, 0, len(data), MAX_MEMBER_SIZE)
    if not members:
        return None
    exts: list[str] = []
    sizes = []
    for name, _, size in members:
        parts = split_name(name)
        if parts is None or parts[0] != key:
            return None
        exts.append(parts[1].lower())
        sizes.append(size)
        if size > _MAX_SIZE:
            return None
    if len(set(exts)) != len(exts) or RESERVED.intersection(exts):
        return None
    return tuple(exts), sizes


def table_sample(
    buffer: Buffer, table: MemberTable, i: int, *, base: int, url: str, copy: bool = True
) -> dict[str, Any]:
    """Sample ``i`` from a buffer holding its span (``base``: the shard offset of
    ``buffer[0]``), its members checked against their headers first
    (:func:`verify_members`): random access by the member table."""
    verify_members(buffer, table, i, i + 1, url=url, base=base, checksums=True)
    get = buffer.__getitem__ if copy else memoryview(buffer).__getitem__
    m = table.first[i]
    (key,) = table.keys(i, i + 1)
    sample: dict[str, Any] = {"__key__": key, "__url__": url, "__offset__": table.offsets[i]}
    for j, ext in enumerate(table.layouts[table.layout[i]]):
        at = table.data[m + j] - base
        sample[ext] = get(slice(at, at + table.sizes[m + j]))
    return sample


class TableBuilder:
    """The member table of a shard being written or indexed, sample by sample."""

    def __init__(self) -> None:
        self.layouts: dict[tuple[str, ...], int] = {}
        self.layout: list[int] = []
        self.sizes: list[int] = []
        self._known: dict[tuple[str, ...], tuple[str, ...] | None] = {}  # see add_fields

    def add(self, key: str, data: Buffer) -> TableBuilder | None:
        """Note one encoded sample; None when a table cannot describe it (then the shard's
        index has none)."""
        found = sample_members(data, key)
        if found is None:
            return None
        exts, sizes = found
        self.layout.append(self.layouts.setdefault(exts, len(self.layouts)))
        if len(self.layouts) > _MAX_LAYOUTS:
            return None
        self.sizes.extend(sizes)
        return self

    def add_fields(
        self, key: str, exts: Sequence[str], sizes: Sequence[int]
    ) -> TableBuilder | None:
        """:meth:`add` for a sample that the writer made of plain members named
        ``KEY.EXT`` (``exts``, in order) holding ``sizes`` bytes
        (:func:`shardkit.formats.tar.tar_sample`): the same table as parsing its bytes
        gives, from what the writer knows already."""
        names = tuple(exts)
        if names in self._known:
            found = self._known[names]
        else:
            found = self._known[names] = _layout(names)
        last = key[key.rfind("/") + 1 :]
        if found is None or not last or "." in last or max(sizes, default=0) > _MAX_SIZE:
            return None  # what split_name or the table cannot take
        self.layout.append(self.layouts.setdefault(found, len(self.layouts)))
        if len(self.layouts) > _MAX_LAYOUTS:
            return None
        self.sizes.extend(sizes)
        return self

    def build(self) -> MemberTable:
        return MemberTable(list(self.layouts), self.layout, self.sizes)


def _layout(exts: Sequence[str]) -> tuple[str, ...] | None:
    """The layout a table records for members named ``KEY.EXT`` (``exts``, key without a
    dot in its last part), as :func:`sample_members` finds it; None where it has none."""
    lower = tuple(ext.lower() for ext in exts)
    if not lower or any("/" in ext for ext in exts):  # "/" moves the first-dot split
        return None
    if len(set(lower)) != len(lower) or RESERVED.intersection(lower):
        return None
    return lower


def check_end(buffer: Buffer, table: MemberTable, *, url: str) -> None:
    """FormatError (naming the shard) unless the table's last sample ends the archive: the
    shard ends there, or an end-of-archive block follows. A member after it would be more
    samples to a parse, and dropped by a read by the table (an index that lies by leaving
    samples out, its shard size edited to match)."""
    end = table.end
    after = buffer[end : end + BLOCK]
    if len(after) and after != _ZERO_BLOCK:
        raise FormatError(
            f"the shard goes on after its index's last sample (at {end}), with no end of "
            "archive there (stale index?); run `shardkit index` again",
            url=url,
            offset=end,
        )


def verify_members(
    buffer: Buffer,
    table: MemberTable,
    start: int,
    stop: int,
    *,
    url: str,
    base: int = 0,
    checksums: bool = False,
) -> None:
    """FormatError (naming the shard) unless each member of samples ``start`` to ``stop``
    has, in the shard's bytes, a plain header naming its key and extension and holding
    its size: a stale or lying table never gives another sample's bytes. ``base`` is the
    shard offset of ``buffer[0]``. The members are compared in bulk first
    (:func:`_all_as_listed`); ``checksums`` (random access, a sample at a time) checks
    each member by the rules instead, its header checksum too."""
    first, data, sizes, layouts, layout = (
        table.first,
        table.data,
        table.sizes,
        table.layouts,
        table.layout,
    )
    if not checksums and _all_as_listed(buffer, table, start, stop, base):
        return
    for i, key in enumerate(table.keys(start, stop), start):  # find it, and say what it is
        prefix = key + "."
        m = first[i]
        for ext in layouts[layout[i]]:
            at = data[m] - BLOCK
            header = buffer[at - base : at - base + BLOCK]
            end = header.find(0, 0, 100)
            name = header[: end if end >= 0 else 100].decode("utf-8", "surrogateescape")
            if not name.startswith(prefix) or name[len(prefix) :].lower() != ext:
                found = split_name(name)
                raise FormatError(
                    f"the index says sample {key!r}, the shard has "
                    f"{name if found is None else found[0]!r} here (stale index?): its "
                    f"member table lists {prefix}{ext}; run `shardkit index` again",
                    url=url,
                    offset=at,
                    key=key,
                )
            if not _plain_as_listed(header, sizes[m]):
                raise FormatError(
                    f"member {name!r} is not the plain member of {sizes[m]} bytes the index's "
                    "member table lists (bad header checksum, type or size field)",
                    url=url,
                    offset=at,
                    key=key,
                )
            m += 1


def _all_as_listed(buffer: Buffer, table: MemberTable, start: int, stop: int, base: int) -> bool:
    """Whether every member of samples ``start`` to ``stop`` has, in its header, the name
    ``key.ext`` then NUL, type ``0`` and the size field ``%011o`` of its listed size:
    compared in bulk, by ``map`` over the table's arrays, no Python per member (header
    checksums are not summed here). False says only that one differs (an upper-case
    extension, another writer's fields, or a lie): :func:`verify_members` then checks
    each member by the rules."""
    first, layouts = table.first, table.layouts
    f, g = first[start], first[stop]
    get = buffer.__getitem__
    data = table.data[f:g]

    def fields(a: int, b: int) -> Iterator[bytes]:
        starts = map(add, data, repeat(a - BLOCK - base))
        stops = map(add, data, repeat(b - BLOCK - base))
        return map(get, map(slice, starts, stops))  # type: ignore[arg-type]

    ids = table.layout[start:stop]
    counts = map(len, map(layouts.__getitem__, ids))
    keys = itertools.chain.from_iterable(map(repeat, table.keys(start, stop), counts))
    exts = itertools.chain.from_iterable(map(_dotted, map(layouts.__getitem__, ids)))
    names = list(map(str.encode, map(add, keys, exts), repeat("utf-8"), repeat("surrogateescape")))
    heads = array("q", map(add, data, repeat(-BLOCK - base)))
    found = map(get, map(slice, heads, map(add, heads, map(len, names))))
    return (
        all(map(eq, found, names))  # type: ignore[arg-type]
        and all(map(eq, fields(124, 136), map(b"%011o\0".__mod__, table.sizes[f:g])))
        and all(map(eq, fields(156, 157), repeat(b"0")))
    )


@functools.lru_cache(maxsize=256)
def _dotted(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f".{name}\0" for name in names)


def _plain_as_listed(header: bytes | bytearray, size: int) -> bool:
    """Whether a header is a plain regular file's (type ``0``, no name prefix), of
    ``size`` bytes, with a right checksum."""
    try:
        stated = int(header[124:135], 8)
    except ValueError:
        return False
    return header[156] == 0x30 and not header[345] and stated == size and checksum_ok(header)


def _column(get: Callable[[slice], Any], starts: array[int], sizes: array[int]) -> Iterator[Any]:
    """One field of a run of samples: ``get(slice(start, start + size))`` of each."""
    return map(get, map(slice, starts, map(add, starts, sizes)))


def slice_samples(
    buffer: Buffer, table: MemberTable, start: int, stop: int, *, url: str | None, copy: bool = True
) -> Iterator[dict[str, Any]]:
    """Samples ``start`` to ``stop`` of a shard as slices of ``buffer`` (the mapped shard),
    as the parser would yield them (``__key__``, ``__url__``, ``__offset__``, then each
    member by extension, in member order): ``bytes``, or with ``copy=False`` memoryviews.
    No Python runs per member or per sample: a run of samples with one layout is built by
    ``map`` and ``zip`` over the table's arrays, and the runs are chained (an iterator,
    not a generator: no frame is resumed per sample)."""
    get = buffer.__getitem__ if copy else memoryview(buffer).__getitem__
    runs = table.runs
    first_run = bisect.bisect_right(table.run_starts, start) - 1  # the run holding start
    chosen = itertools.takewhile(lambda run: run[0] < stop, runs[max(first_run, 0) :])
    return itertools.chain.from_iterable(
        _run_samples(get, table, max(a, start), min(b, stop), lid, url) for a, b, lid in chosen
    )


def _run_samples(
    get: Callable[[slice], Any], table: MemberTable, a: int, b: int, lid: int, url: str | None
) -> Iterator[dict[str, Any]]:
    """Samples ``a`` to ``b`` (all of one layout, ``lid``) as dicts of ``get``'s slices."""
    names = _HEAD + table.layouts[lid]
    n = len(names) - len(_HEAD)
    data, sizes, first = table.data, table.sizes, table.first
    f, g = first[a], first[b]
    columns = [_column(get, data[f + j : g : n], sizes[f + j : g : n]) for j in range(n)]
    rows = zip(table.keys(a, b), repeat(url), table.offsets[a:b], *columns)
    return map(dict, map(zip, repeat(names), rows))
