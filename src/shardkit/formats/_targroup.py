"""WebDataset's grouping of tar members into samples (:class:`Grouping`), over a stream
(:func:`iter_samples`) or over bytes in memory (:func:`buffer_samples`, and
:func:`span_sample`, the rule of one index span). The rules are described in
:mod:`shardkit.formats.tar`, their public door."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from ..errors import FormatError, TruncatedShardError
from ..handlers import Handler, reraise
from ._tarderive import TableNotes
from ._tarparse import (
    BLOCK,
    DIRECTORY,
    REGULAR_TYPES,
    Buffer,
    RawMember,
    TarScanner,
    member_limit,
    plain_header,
    plain_members,
)
from ._tarrules import odd_member, split_name
from .limits import MAX_MEMBER_SIZE

__all__ = ["Grouping", "buffer_samples", "iter_samples", "span_sample"]

_ZERO = bytes(BLOCK)


class Grouping:
    """WebDataset's grouping rule over the members of one tar stream.

    Calling it on a :class:`TarScanner` yields ``(member, key, extension, new)`` for each
    member that belongs to a sample (``new``: it starts one); extensions are lower-cased.
    Directories and root-level ``__meta__`` members pass silently; other non-regular
    members, names without a key and an extension repeated within a sample go to
    ``handler`` (a handler that returns False ends the stream). The state is kept across
    calls, so a caller may go on after a structural error (``verify``).
    """

    def __init__(self, url: str | None = None, handler: Handler = reraise) -> None:
        self.url = url
        self.handler = handler
        self.key: str | None = None
        self.exts: set[str] = set()

    def __call__(self, members: Iterable[RawMember]) -> Iterator[tuple[RawMember, str, str, bool]]:
        key, exts, handler = self.key, self.exts, self.handler
        for member in members:  # the hot loop of every tar reader: kept flat on purpose
            name = member.name
            slash = name.rfind("/") + 1
            dot = name.find(".", slash)
            if member.typeflag not in REGULAR_TYPES or dot <= slash:
                error = self._odd(member)
                if error is not None and not handler(error):
                    return
                continue
            prefix, ext = name[:dot], name[dot + 1 :].lower()
            if prefix != key:
                self.key = key = prefix
                self.exts = exts = {ext}
                yield member, prefix, ext, True
            elif ext in exts:
                error = FormatError(
                    f"duplicate extension {ext!r} in sample",
                    url=self.url,
                    offset=member.offset,
                    key=prefix,
                )
                if not handler(error):
                    return
            else:
                exts.add(ext)
                yield member, prefix, ext, False

    def _odd(self, member: RawMember) -> FormatError | None:
        """The error for a member no sample takes; None for those that pass silently."""
        name = member.name
        if member.typeflag not in REGULAR_TYPES:
            return None if member.typeflag == DIRECTORY else odd_member(member, self.url)
        if "/" not in name and name.startswith("__") and name.endswith("__"):
            return None  # webdataset's archive-level metadata members
        return FormatError(
            f"member {name!r} has no key.extension form", url=self.url, offset=member.offset
        )


def iter_samples(
    stream: BinaryIO,
    *,
    url: str | None = None,
    handler: Handler = reraise,
    max_member_size: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Group the members of a tar stream into samples (dicts of extension -> bytes).

    Each sample has ``__key__``, ``__url__`` (when ``url`` is given) and ``__offset__``,
    the byte offset of its first member's header. Bad data goes to ``handler``; a handler
    that returns False ends the shard. ``max_member_size`` is as for :func:`iter_members`.
    A stream cut short raises :class:`TruncatedShardError` after yielding every sample
    that is whole before the cut: the sample being read is yielded when the cut is in a
    member of the next one, or inside a header that does not say whose member it begins
    (as webdataset yields it), never when the cut is inside one of its own members.
    """
    members = TarScanner(stream, url=url, max_member_size=max_member_size, readahead=False)
    yield from _samples(members, members.read_data, url, handler)


def buffer_samples(
    buffer: Buffer,
    *,
    start: int = 0,
    end: int | None = None,
    base: int = 0,
    url: str | None = None,
    handler: Handler = reraise,
    max_member_size: int | None = None,
    copy: bool = True,
    on_table: Callable[[TableNotes], object] | None = None,
) -> Iterator[dict[str, Any]]:
    """:func:`iter_samples` over tar bytes in memory: ``buffer[start:end]`` (an ``mmap``
    of a local shard, say), through :meth:`TarScanner.over_buffer`, with the same rules,
    limits and errors. ``base`` is the shard offset of ``buffer[0]``. With ``copy=False``
    the fields are memoryviews of ``buffer`` (no copy; they keep it alive) instead of
    ``bytes``.

    ``on_table``: for a whole shard (the buffer, from 0), called with what makes its
    member table (:class:`~shardkit.formats._tarderive.TableNotes`) when the parse
    found every member plain to the end of the archive, before the last sample is
    yielded: a reader that keeps it need not parse the shard again."""
    # the arguments are checked now, as the scanner that may take over later checks them
    TarScanner.over_buffer(buffer, start=start, end=end, url=url, max_member_size=max_member_size)
    stop = len(buffer) if end is None else end
    # a member table holds sizes of up to MAX_MEMBER_SIZE (uint32)
    whole = not start and not base and stop == len(buffer)
    whole = whole and member_limit(max_member_size) <= MAX_MEMBER_SIZE
    noted = (TableNotes(), on_table) if on_table is not None and whole else None
    return _buffer_samples(buffer, start, stop, base, url, handler, max_member_size, copy, noted)


def _buffer_samples(
    buffer: Buffer,
    pos: int,
    end: int,
    base: int,
    url: str | None,
    handler: Handler,
    max_member_size: int | None,
    copy: bool,
    noted: tuple[TableNotes, Callable[[TableNotes], object]] | None = None,
) -> Iterator[dict[str, Any]]:
    """Plain members (:func:`plain_header`) grouped as :class:`Grouping` groups them;
    from the first member that is not plain, is cut short, or that the grouping would
    report or skip, the scanner over the buffer takes over, with the same grouping
    state: whatever the shard holds, the outcome is :func:`iter_samples`'s. With
    ``noted``, the samples are noted for a member table, handed on when they reach the
    end of the archive (see :func:`buffer_samples`)."""
    view = None if copy else memoryview(buffer)
    key: str | None = None
    exts: set[str] = set()
    current: dict[str, Any] | None = None
    notes = None if noted is None else noted[0]
    limit = member_limit(max_member_size)  # the scanner's, looked up once
    while end - pos >= BLOCK:
        plain = plain_header(buffer[pos : pos + BLOCK], limit)
        if plain is None:
            break
        name, size = plain
        data = pos + BLOCK
        after = data + size + (-size % BLOCK)
        parts = split_name(name)
        if after > end or parts is None:
            break
        prefix, ext = parts[0], parts[1].lower()
        if prefix != key:
            if current is not None:
                yield current
            key, exts = prefix, {ext}
            current = {"__key__": prefix, "__url__": url, "__offset__": base + pos}
            if notes is not None:
                notes.sample(prefix, pos)
        elif ext in exts:
            break
        else:
            exts.add(ext)
        current[ext] = buffer[data : data + size] if view is None else view[data : data + size]  # type: ignore[index]
        if notes is not None:
            notes.member(ext, size)
        pos = after
    if (
        noted is not None
        and current is not None
        and (pos == end or buffer[pos : pos + BLOCK] == _ZERO)
    ):
        notes, on_table = noted  # the archive ends here: every member was plain
        if notes.end(pos, len(buffer)):
            on_table(notes)
    members = TarScanner.over_buffer(
        buffer, start=pos, end=end, base=base, url=url, max_member_size=max_member_size
    )
    grouping = Grouping(url, handler)
    grouping.key, grouping.exts = key, exts
    read = members.read_data if copy else members.read_view
    yield from _samples(members, read, url, handler, grouping, current)


def span_sample(
    buffer: Buffer,
    start: int,
    end: int,
    *,
    base: int = 0,
    url: str | None = None,
    max_member_size: int | None = None,
    copy: bool = True,
) -> dict[str, Any]:
    """The one sample whose members fill ``buffer[start:end]``: an index entry's span
    (:mod:`shardkit.formats.index`), read on its own. ``base`` is the shard offset of
    ``buffer[0]``; ``copy`` is as for :func:`buffer_samples`.

    A :class:`FormatError` naming the shard offset (bad data, but nothing here goes to a
    handler: the span is one sample, whole or not at all) when the span runs past the
    end of the buffer (the shard), holds no sample, members of a second sample, a
    member cut at its end (:class:`TruncatedShardError`), bad data within the sample,
    or anything after its last member."""
    where = base + start
    if end > len(buffer):
        raise TruncatedShardError(
            f"the indexed span ({end - start} bytes) runs past the end of the shard "
            f"({base + len(buffer)} bytes)",
            url=url,
            offset=where,
        )
    plain = plain_members(buffer, start, end, member_limit(max_member_size))
    if plain is not None:
        found = _plain_sample(buffer, plain, url, where, copy)
        if found is not None:
            return found
    members = TarScanner.over_buffer(
        buffer, start=start, end=end, base=base, url=url, max_member_size=max_member_size
    )
    samples = _samples(members, members.read_data if copy else members.read_view, url, reraise)
    sample = next(samples, None)
    if sample is None:
        raise FormatError("no sample at the indexed offset", url=url, offset=where)
    other = next(samples, None)
    if other is not None:
        raise FormatError(
            f"the indexed span holds members of another sample too ({other['__key__']!r} "
            f"at offset {other['__offset__']})",
            url=url,
            offset=where,
            key=sample["__key__"],
        )
    if members.end_blocks or members.offset != base + end:
        raise FormatError(
            f"the indexed span goes on after the sample's last member (to {base + end})",
            url=url,
            offset=where,
            key=sample["__key__"],
        )
    return sample


def _plain_sample(
    buffer: Buffer, members: list[tuple[str, int, int]], url: str | None, offset: int, copy: bool
) -> dict[str, Any] | None:
    """The sample of plain members (:func:`plain_members`) when they are one sample as
    :class:`Grouping` would see it, with nothing to report: every name ``key.ext`` with
    the same key, no extension twice. None otherwise: the generic path decides."""
    key = None
    sample: dict[str, Any] = {}
    view = memoryview(buffer) if not copy else None
    for name, at, size in members:
        parts = split_name(name)
        if parts is None:
            return None
        prefix, ext = parts[0], parts[1].lower()
        if key is None:
            key = prefix
            sample = {"__key__": key, "__url__": url, "__offset__": offset}
        elif prefix != key or ext in sample:
            return None
        sample[ext] = buffer[at : at + size] if view is None else view[at : at + size]
    return sample if key is not None else None


def _withhold(exc: Exception, current: dict[str, Any] | None) -> None:
    """Name on ``exc`` the fields of the sample it leaves partial, which is not handed
    out (:attr:`FormatError.withheld`; a raw gzip error carries them to the reader that
    turns it into a FormatError)."""
    if current is not None:
        exc.withheld = tuple(k for k in current if not k.startswith("__"))  # type: ignore[attr-defined]


def _samples(
    members: TarScanner,
    read: Callable[[], Any],
    url: str | None,
    handler: Handler,
    grouping: Grouping | None = None,
    current: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """The grouping of :func:`iter_samples`, over any scanner, fields from ``read``;
    ``grouping`` and ``current`` carry on from members already grouped."""
    if grouping is None:
        grouping = Grouping(url, handler)
    try:
        for member, key, ext, new in grouping(members):
            if new:
                if current is not None:
                    yield current
                current = {"__key__": key, "__url__": url, "__offset__": member.offset}
            current[ext] = read()  # type: ignore[index]
    except TruncatedShardError as exc:
        # Cut inside a member of the next sample, or inside a header whose member is not
        # known (webdataset yields the sample then too): the sample read so far is whole.
        if current is not None and exc.key != current["__key__"]:
            yield current
        else:
            _withhold(exc, current)
        raise
    except Exception as exc:  # a gzip stream cut or corrupt under the tar stream
        _withhold(exc, current)
        raise
    if current is not None:
        yield current
