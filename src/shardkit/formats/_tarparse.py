"""The one tar member parser: headers, size limits, and the raw bytes around each member.

:class:`TarScanner` reads a tar stream member by member. It understands ustar, GNU (long
names, base-256 sizes) and PAX headers; checks each header's checksum; and applies the
limits from the header, before anything of the member is read: a regular member over the
budget's ``member`` limit (:mod:`shardkit.budget`; ``max_member_size=`` sets the caller's
own instead), a PAX / GNU long-name payload over 1 MiB, any other member over 1 TiB is a
:class:`FormatError` (a :class:`FormatLimitError` for the member limits). It never allocates what a
header claims, only what the stream really holds: its buffer grows with the bytes read.

After each member it yields, the caller may :meth:`~TarScanner.read_data`,
:meth:`~TarScanner.copy_member` (raw bytes, headers included) or do nothing (the data is
skipped, by a seek where ``seek=True`` and the stream is a regular file). On top of that
the tools keep whole samples in the buffer (:meth:`~TarScanner.keep_from`,
:meth:`~TarScanner.copy_range`), go on after a corrupt header (:meth:`~TarScanner.resync`)
or past a member over the limit, and look at the end-of-archive blocks.

``readahead=True`` (the tools) reads the stream in big chunks; ``readahead=False`` (the
sample reader) reads only what it parses, member data straight into its own bytes, and
never past the end-of-archive blocks (a gzip stream's trailer is checked afterwards).

:meth:`TarScanner.over_buffer` walks members already in memory (``bytes``, a
``bytearray``, an ``mmap``: a memory-mapped local shard, or the span of one sample read
by ``pread``): the buffer *is* the scanner's buffer, so the same code applies the same
header rules, limits and errors, with nothing read or copied but the member data it
returns (:meth:`~TarScanner.read_data`), or none at all (:meth:`~TarScanner.read_view`).
"""

from __future__ import annotations

import io
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple
from zlib import adler32

from ..budget import allow, limit, refuse
from ..errors import FormatError, FormatLimitError, TruncatedShardError
from ._io import read_bounded
from .limits import MAX_SKIPPED_SIZE, MAX_TAR_META_SIZE, check_limit

__all__ = [
    "BLOCK",
    "DIRECTORY",
    "REGULAR_TYPES",
    "RawMember",
    "TarScanner",
    "Write",
    "member_kind",
    "member_limit",
    "plain_header",
    "plain_members",
]

BLOCK = 512
_ZERO = bytes(BLOCK)
REGULAR_TYPES = frozenset(b"0\x007")
_META_TYPES = frozenset(b"LKxg")  # GNU long name / long link, PAX extended / global header
DIRECTORY = 0x35
_KINDS = {
    0x31: "hard link",
    0x32: "symlink",
    0x33: "char device",
    0x34: "block device",
    0x36: "fifo",
}
_SMALL = 1 << 14  # without read-ahead, members up to this size are read with the next header
_PIECE = 1 << 20  # without read-ahead, the largest single read into the buffer

Write = Callable[[memoryview], object]
#: What :meth:`TarScanner.over_buffer` walks: objects whose slices are ``bytes``.
Buffer = bytes | bytearray | mmap.mmap


class _Exhausted:
    """The stream behind a scanner over a buffer: nothing more to read."""

    def read(self, n: int = -1) -> bytes:
        return b""

    def readinto(self, view: memoryview) -> int:
        return 0


_NO_MORE = _Exhausted()


def member_limit(max_member_size: int | None) -> int:
    """The largest regular member a reader takes: ``max_member_size`` where the caller
    gives one, else the budget's ``member`` limit (``SHARDKIT_MAX_MEMBER``). Looked up
    once per shard: the per-member check is a compare."""
    if max_member_size is None:
        return limit("member")
    return check_limit("max_member_size", max_member_size)


def member_kind(typeflag: int) -> str:
    """A readable name for a non-regular member type."""
    return _KINDS.get(typeflag, f"type {chr(typeflag)!r}")


# --------------------------------------------------------------------------- header fields


def _octal(field: bytes | bytearray) -> int:
    if field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        return -value if field[0] & 0x40 else value
    text = bytes(field).split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _checksum_slow(header: bytes) -> bool:
    stored = header[148:156].split(b"\0", 1)[0].strip()
    if not stored:
        return False
    try:
        expected = int(stored, 8)
    except ValueError:
        return False
    unsigned = sum(header) - sum(header[148:156]) + 256
    if unsigned == expected:
        return True
    # Some old writers summed signed chars; accept that too (as tarfile does).
    signed = sum(b - 256 if b > 127 else b for b in header[:148] + header[156:]) + 256
    return signed == expected


def checksum_ok(header: bytes | bytearray) -> bool:
    """The tar header checksum rule, fast: adler32's low half is 1 + the byte sum of a
    block of at most 256 bytes (it cannot wrap), so three C calls replace a Python sum
    over the header without its checksum field."""
    try:
        expected = int(header[148:154], 8)  # "%06o\0 ", as tar and tarfile write it
    except ValueError:
        return _checksum_slow(bytes(header))
    total = (
        (adler32(header[:148]) & 0xFFFF)
        + (adler32(header[156:412]) & 0xFFFF)
        + (adler32(header[412:]) & 0xFFFF)
        + 253  # 8 spaces for the checksum field (256), minus the three adler32 start values
    )
    return total == expected or _checksum_slow(bytes(header))


def plain_header(header: bytes | bytearray, limit: int) -> tuple[str, int] | None:
    """The common case of the header rules, fast: ``(name, size)`` of a plain ustar
    header of a regular file (type ``0``, no name prefix, size and checksum fields as
    tar writes them, the checksum right, the size within ``limit``); None for any other
    header, which the generic path (:meth:`TarScanner._any_member`) reads, or refuses
    with the error it deserves."""
    if header[156] != 0x30 or header[345] or header[135] not in (0, 0x20):
        return None
    try:
        expected = int(header[148:154], 8)
        size = int(header[124:135], 8)
    except ValueError:
        return None
    total = (
        (adler32(header[:148]) & 0xFFFF)
        + (adler32(header[156:412]) & 0xFFFF)
        + (adler32(header[412:]) & 0xFFFF)
    )
    if total + 253 != expected or not 0 <= size <= limit:
        return None
    end = header.find(0, 0, 100)
    return header[: end if end >= 0 else 100].decode("utf-8", "surrogateescape"), size


def plain_members(
    buffer: Buffer, start: int, end: int, limit: int
) -> list[tuple[str, int, int]] | None:
    """``(name, data offset, size)`` of each member of ``buffer[start:end]`` when every
    header is plain (:func:`plain_header`) and the members, padding included, fill the
    bytes exactly; None otherwise, and :meth:`TarScanner.over_buffer` reads them (and
    says what is wrong, if anything is)."""
    members = []
    pos = start
    while pos < end:
        if end - pos < BLOCK:
            return None
        plain = plain_header(buffer[pos : pos + BLOCK], limit)
        if plain is None:
            return None
        name, size = plain
        data = pos + BLOCK
        pos = data + size + (-size % BLOCK)
        members.append((name, data, size))
    return members if pos == end else None


def _parse_pax(data: bytes, url: str | None, offset: int) -> dict[str, str]:
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        try:
            length = int(data[pos:space])
        except ValueError:
            raise FormatError("malformed PAX header record", url=url, offset=offset) from None
        if length <= 0 or pos + length > len(data):
            raise FormatError("malformed PAX header record", url=url, offset=offset)
        keyword, _, value = data[space + 1 : pos + length - 1].partition(b"=")
        records[keyword.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _header_name(header: bytes | bytearray) -> str:
    name = bytes(header[:100]).split(b"\0", 1)[0]
    if header[257:262] == b"ustar" and header[345] != 0:
        prefix = bytes(header[345:500]).split(b"\0", 1)[0]
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _key_of(name: str) -> str | None:
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    return name[:dot] if dot > slash else None


def _cut_key(partial: bytes) -> str | None:
    """The key named by a header cut short, when what is left says: its name field whole
    and its ustar prefix field whole or unused. None when that is not known."""
    size = len(partial)
    if size <= 345:  # the name field, or whether the prefix field holds more of the name
        return None
    if size < 500 and partial[257:262] == b"ustar" and partial[345] != 0:
        return None  # the prefix field is cut
    return _key_of(_header_name(partial.ljust(BLOCK, b"\0")))


class RawMember(NamedTuple):
    """A member whose header(s) have been read; its data comes next in the stream."""

    start: int  # offset of its first header block (long-name / PAX headers included)
    name: str
    typeflag: int
    header: bytes | bytearray  # the raw header blocks, from ``start`` up to the data
    size: int

    @property
    def regular(self) -> bool:
        return self.typeflag in REGULAR_TYPES

    @property
    def offset(self) -> int:
        """Offset of the member's own header (after any long-name / PAX headers)."""
        return self.start + len(self.header) - BLOCK

    @property
    def end(self) -> int:
        """Offset just after the member's data and padding."""
        return self.start + len(self.header) + self.size + (-self.size % BLOCK)


class TarScanner:
    """Iterate over the members of a tar stream (see the module docs)."""

    def __init__(
        self,
        stream: BinaryIO,
        *,
        url: str | None = None,
        chunk_size: int = 1 << 22,
        seek: bool = False,
        readahead: bool = True,
        max_member_size: int | None = None,
    ) -> None:
        self._stream = stream
        self._read = stream.read
        self._readinto = getattr(stream, "readinto", None)
        self.url = url
        self.max_member_size = member_limit(max_member_size)
        self._budgeted = max_member_size is None  # a refusal names SHARDKIT_MAX_MEMBER
        self._chunk = chunk_size if readahead else min(chunk_size, _PIECE)
        self._ahead = readahead
        self._buf = bytearray()  # reused across reads; _len bytes of it are valid
        self._len = 0
        self._pos = 0
        self._base = 0  # stream offset of _buf[0]
        self._pending = 0  # data + padding of the current member still to consume
        self._member: RawMember | None = None
        self.end_blocks = 0  # zero blocks at the end: 2 in a well-formed archive
        # Members being copied are written as one range of the buffer when it is replaced.
        self._copy: Write | None = None
        self._copy_from = 0
        self._copy_end = 0
        self._keep: int | None = None  # buffer index from which bytes must stay
        self._limit = _file_limit(stream) if seek else None
        self._fixed = False  # over a buffer (over_buffer): nothing to read or move

    @classmethod
    def over_buffer(
        cls,
        buffer: Buffer,
        *,
        start: int = 0,
        end: int | None = None,
        base: int = 0,
        url: str | None = None,
        max_member_size: int | None = None,
    ) -> TarScanner:
        """A scanner over the members of ``buffer[start:end]``, in memory already.

        ``base`` is the shard offset of ``buffer[0]`` (0 for a mapping of the whole
        shard; the span's offset for a span read on its own), so offsets in members and
        errors are shard offsets. The rules, limits and errors are the stream's: the
        bytes end at ``end`` as a stream would (a member cut there is a
        :class:`TruncatedShardError`). A ``memoryview`` is refused (its slices are not
        ``bytes``): pass the object it views, and ``start``/``end``."""
        if isinstance(buffer, memoryview):
            raise TypeError(
                "over_buffer() takes bytes, a bytearray or an mmap (slices of a memoryview "
                "are not bytes): pass the object it views and start=/end="
            )
        size = len(buffer)
        end = size if end is None else end
        if not 0 <= start <= end <= size:
            raise ValueError(f"bytes {start}..{end} are not inside a buffer of {size}")
        scanner = cls(_NO_MORE, url=url, readahead=False, max_member_size=max_member_size)  # type: ignore[arg-type]
        scanner._buf = buffer  # type: ignore[assignment]
        scanner._pos, scanner._len, scanner._base = start, end, base
        scanner._fixed = True
        return scanner

    @property
    def offset(self) -> int:
        """Offset of the next unread byte, from the start of the stream."""
        return self._base + self._pos

    @property
    def in_member(self) -> bool:
        """Whether a member's header was read and its data is still ahead: after a
        FormatError, the header was sound (a member over the size limit), and iterating
        again would skip its data."""
        return self._pending > 0

    # -- buffer
    def _fill(self, n: int, ahead: bool = True) -> bool:
        """Make ``n`` bytes available at the position; False if the stream ends first.

        The bytes from the position on (from the :meth:`keep_from` offset, if earlier) move
        to the front of the buffer; pending copies are written out first. With read-ahead
        the buffer is filled as far as it goes; the buffer grows with what is read (at
        most doubling what it holds), never with ``n`` alone."""
        if self._len - self._pos >= n:
            return True
        if self._fixed:
            return False
        self.flush_copy()
        keep = self._pos if self._keep is None else min(self._keep, self._pos)
        held = self._len - keep
        need = self._pos - keep + n
        want = need + self._chunk if self._ahead and ahead else need
        buf = self._buf
        if keep:
            buf[:held] = buf[keep : self._len]
            self._base += keep
            self._pos -= keep
            if self._keep is not None:
                self._keep -= keep
        while held < need:
            if held == len(buf):
                grown = bytearray(min(want, max(self._chunk, 2 * held)))
                grown[:held] = buf[:held]
                buf = self._buf = grown
            got = self._read_into(buf, held, min(len(buf), want) - held)
            if not got:
                break
            held += got
        self._len = held
        return held >= need

    def _read_into(self, buf: bytearray, at: int, n: int) -> int:
        if self._readinto is not None:
            with memoryview(buf) as view:
                return int(self._readinto(view[at : at + n]) or 0)
        chunk = self._read(n)
        buf[at : at + len(chunk)] = chunk
        return len(chunk)

    def _consume(self, n: int, write: Write | None) -> int:
        """Pass ``n`` bytes to ``write`` (or drop them); returns how many were there."""
        pos = self._pos
        avail = self._len - pos
        if n <= avail:
            if write is not None:
                write(memoryview(self._buf)[pos : pos + n])
            self._pos = pos + n
            return n
        keep = self._keep is not None
        if write is None and (keep or (not self._ahead and n < _SMALL)):
            # kept bytes stay in the buffer; without read-ahead, a short skip (padding) is
            # read together with the next header
            self._fill(n if keep else n + BLOCK)
            got = min(n, self._len - self._pos)
            self._pos += got
            return got
        self.flush_copy()
        if write is not None and avail:
            write(memoryview(self._buf)[pos : self._len])
        done = avail
        self._base += self._len
        self._len = self._pos = 0
        if write is None and self._limit is not None:
            return done + self._seek(n - done)
        while done < n:
            chunk = self._read(min(n - done, self._chunk))
            if not chunk:
                break
            if write is not None:
                write(memoryview(chunk))
            done += len(chunk)
            self._base += len(chunk)
        return done

    def _seek(self, n: int) -> int:
        limit = self._limit if self._limit is not None else 0
        room = max(0, min(n, limit - self._base))
        self._stream.seek(room, io.SEEK_CUR)
        self._base += room
        return room

    # -- members
    def __iter__(self) -> Iterator[RawMember]:
        # The common case (plain_header) first: this loop runs once per member and
        # dominates small samples.
        limit = self.max_member_size
        while True:
            if self._pending:
                self._take(None)
            pos = self._pos
            if self._len - pos >= BLOCK:
                header = self._buf[pos : pos + BLOCK]
                plain = plain_header(header, limit)
                if plain is not None:
                    name, size = plain
                    self._member = member = RawMember(self._base + pos, name, 0x30, header, size)
                    self._pos = pos + BLOCK
                    self._pending = size + (-size % BLOCK)
                    yield member
                    continue
            found = self._any_member()
            if found is None:
                return
            yield found

    def _take(self, write: Write | None) -> None:
        pending, self._pending = self._pending, 0
        if self._consume(pending, write) < pending:
            raise self._truncated()

    def _truncated(self) -> TruncatedShardError:
        member = self._member
        return TruncatedShardError(
            "shard ends inside a tar member",
            url=self.url,
            offset=member and member.offset,
            key=member and _key_of(member.name),
        )

    def read_data(self) -> bytes:
        """The current member's data (consumes it)."""
        member = self._member
        if member is None or not self._pending:
            return b""
        size, pending = member.size, self._pending
        if pending > self._len - self._pos and not self._ahead and pending < _SMALL:
            self._fill(pending + BLOCK)  # a small member: its data and the next header
        pos = self._pos
        if pending <= self._len - pos:
            self._pos += pending
            self._pending = 0
            with memoryview(self._buf) as view:
                return view[pos : pos + size].tobytes()
        if self._keep is not None:
            parts: list[bytes] = []
            self._take(lambda view: parts.append(bytes(view)))
            return b"".join(parts)[:size]
        return self._read_direct(member, size, pending)

    def read_view(self) -> memoryview:
        """The current member's data as a view of the buffer, without a copy (consumes
        it); only for a scanner :meth:`over_buffer`, whose buffer the view keeps alive
        (an ``mmap`` cannot be closed while a view of it exists)."""
        if not self._fixed:
            raise ValueError("read_view() needs a scanner over a buffer (over_buffer)")
        member = self._member
        pos, pending = self._pos, self._pending
        if member is None or not pending:
            return memoryview(b"")
        if pending > self._len - pos:
            self.read_data()  # cut short: raises TruncatedShardError as a stream does
        self._pos = pos + pending
        self._pending = 0
        return memoryview(self._buf)[pos : pos + member.size]

    def _read_direct(self, member: RawMember, size: int, pending: int) -> bytes:
        """Read a member's data that is not in the buffer straight into its own bytes."""
        self.flush_copy()
        pos, avail = self._pos, self._len - self._pos
        head = bytes(self._buf[pos : pos + min(avail, size)]) if avail else b""
        self._base += self._len
        self._len = self._pos = 0
        left = size - len(head)
        data = read_bounded(self._read, left) if left > 0 else b""
        self._base += len(data)
        if len(data) < left:
            self._pending = 0
            raise self._truncated()
        self._pending = pending - max(avail, size)
        if not self._ahead:  # the padding now (a member is whole with it), and the next header
            self._fill(self._pending + BLOCK)
            if self._len - self._pos < self._pending:
                self._pending = 0
                raise self._truncated()
            self._pos += self._pending
            self._pending = 0
        return head + data if head else data

    def copy_member(self, write: Write) -> None:
        """Copy the current member, headers, data and padding, as raw bytes to ``write``.

        Consecutive members copied to the same ``write`` go out as one range of the read
        buffer, in one call, when the buffer is replaced or :meth:`flush_copy` is called."""
        member = self._member
        if member is None:
            return
        start = member.start - self._base
        if self._copy is not write or self._copy_end != start:
            self.flush_copy()
            if start < 0:  # its headers came in an earlier buffer
                write(memoryview(member.header))
                start = self._pos
            self._copy, self._copy_from = write, start
        if self._pending <= self._len - self._pos:
            self._pos += self._pending
            self._pending = 0
            self._copy_end = self._pos
        else:  # a member larger than the buffer: write what is pending, then stream it
            self._copy_end = self._pos
            self._take(write)

    def keep_from(self, offset: int | None) -> None:
        """Keep the stream's bytes from ``offset`` (not before the buffer's start) in the
        buffer, member data included, until told otherwise (None)."""
        self._keep = None if offset is None else max(0, offset - self._base)

    def copy_range(self, start: int, end: int, write: Write) -> None:
        """Copy stream bytes ``[start, end)``, still in the buffer (see :meth:`keep_from`),
        to ``write``; contiguous ranges for the same ``write`` go out in one call."""
        first, last = start - self._base, end - self._base
        if first < 0 or last > self._len:
            raise ValueError(f"bytes {start}..{end} are not in the buffer any more")
        if self._copy is not write or self._copy_end != first:
            self.flush_copy()
            self._copy, self._copy_from = write, first
        self._copy_end = last

    def flush_copy(self) -> None:
        """Write the range of copied members still held in the buffer."""
        write = self._copy
        if write is not None:
            self._copy = None
            if self._copy_end > self._copy_from:
                write(memoryview(self._buf)[self._copy_from : self._copy_end])

    def _header(self) -> bytes | None:
        start = self.offset
        if not self._fill(BLOCK):
            if self._pos == self._len:
                return None
            partial = bytes(self._buf[self._pos : self._len])
            raise TruncatedShardError(
                "shard ends inside a tar header", url=self.url, offset=start, key=_cut_key(partial)
            )
        return bytes(self._buf[self._pos : self._pos + BLOCK])

    def _any_member(self) -> RawMember | None:
        start = self.offset
        parts: list[bytes] = []
        long_name: str | None = None
        pax: dict[str, str] = {}
        chain = 0  # payload bytes of the extended headers so far, bounded by the budget
        while True:
            try:
                header = self._header()
            except TruncatedShardError as exc:
                if parts:  # its name was in the extended headers before it
                    name = pax.get("path", long_name)
                    exc.key = None if name is None else _key_of(name)
                raise
            if header is None or header == _ZERO:
                if parts:
                    raise TruncatedShardError(
                        "extended header with no member after it", url=self.url, offset=start
                    )
                if header is not None:
                    self._end_of_archive()
                return None
            size, typeflag = self._parse(header, pax)
            if typeflag not in _META_TYPES:
                break
            chain += size
            what = "a chain of extended tar headers (PAX, GNU long name)"
            allow("tar_chain", chain, what=what, error=FormatLimitError, url=self.url, offset=start)
            payload = self._meta_payload(size)
            parts.append(payload[1])
            if typeflag == 0x4C:
                long_name = payload[0].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif typeflag == 0x78:
                pax = _parse_pax(payload[0], self.url, self.offset - len(payload[1]))
        if "path" in pax:
            name = pax["path"]
        else:
            name = long_name if long_name is not None else _header_name(header)
        parts.append(header)
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        self._member = member = RawMember(start, name, typeflag, raw, size)
        self._pos += BLOCK
        self._pending = size + (-size % BLOCK)
        self._check_size(member)
        return member

    def _parse(self, header: bytes, pax: dict[str, str]) -> tuple[int, int]:
        offset = self.offset
        if not checksum_ok(header):
            raise FormatError(
                "bad tar header checksum (not a tar file, or corrupt)", url=self.url, offset=offset
            )
        try:
            size = int(pax["size"]) if "size" in pax else _octal(header[124:136])
        except ValueError:
            raise FormatError("bad size field in tar header", url=self.url, offset=offset) from None
        if size < 0:
            raise FormatError(f"negative member size {size}", url=self.url, offset=offset)
        typeflag = header[156]
        if typeflag in _META_TYPES and size > MAX_TAR_META_SIZE:
            raise FormatError(
                f"member of {size} bytes is over the {MAX_TAR_META_SIZE}-byte limit for tar "
                f"metadata (type {chr(typeflag)!r})",
                url=self.url,
                offset=offset,
            )
        if typeflag not in REGULAR_TYPES and size > MAX_SKIPPED_SIZE:
            raise FormatError(f"absurd member size {size}", url=self.url, offset=offset)
        return size, typeflag

    def _check_size(self, member: RawMember) -> None:
        """A regular member over the member limit (:func:`member_limit`): a
        FormatLimitError from its header, naming ``SHARDKIT_MAX_MEMBER`` or the caller's
        ``max_member_size``. The scanner stays at the member: iterating again skips its
        data."""
        if not member.regular or member.size <= self.max_member_size:
            return
        url, offset, key = self.url, member.offset, _key_of(member.name)
        if self._budgeted:
            what = f"tar member {member.name!r}"
            error = FormatLimitError
            refuse("member", member.size, what=what, error=error, url=url, offset=offset, key=key)
        raise FormatLimitError(
            f"member of {member.size} bytes is over max_member_size "
            f"({self.max_member_size} bytes): raise it to read this shard",
            url=url,
            offset=offset,
            key=key,
        )

    def _meta_payload(self, size: int) -> tuple[bytes, bytes]:
        total = BLOCK + size + (-size % BLOCK)
        if not self._fill(total):
            raise TruncatedShardError(
                "shard ends inside a tar header", url=self.url, offset=self.offset
            )
        raw = bytes(self._buf[self._pos : self._pos + total])
        self._pos += total
        return raw[BLOCK : BLOCK + size], raw

    def _end_of_archive(self) -> None:
        self._pos += BLOCK
        self.end_blocks = 1
        if self._fill(BLOCK, ahead=False) and self._buf[self._pos : self._pos + BLOCK] == _ZERO:
            self._pos += BLOCK
            self.end_blocks = 2

    def resync(self) -> int | None:
        """After a bad header: move to the next block that holds a valid ustar header.

        Returns its offset, or None when the stream ends first. The current member's data
        is abandoned."""
        self.flush_copy()
        self._pending = 0
        self._member = None
        self._pos += BLOCK
        while self._fill(BLOCK):
            block = self._buf[self._pos : self._pos + BLOCK]
            if block[257:262] == b"ustar" and checksum_ok(block):
                return self.offset
            self._pos += BLOCK
        return None

    def drain(self) -> tuple[int, bool]:
        """Read to the end of the stream: (bytes left after the archive, any non-zero)."""
        self.flush_copy()
        rest = self._len - self._pos
        nonzero = self._buf.count(0, self._pos, self._len) != rest
        self._base += self._len
        self._len = self._pos = 0
        while True:
            chunk = self._read(self._chunk)
            if not chunk:
                return rest, nonzero
            rest += len(chunk)
            nonzero = nonzero or chunk.count(0) != len(chunk)


def _file_limit(stream: BinaryIO) -> int | None:
    """Bytes from the stream's position to the end of its file, if it is a seekable file."""
    try:
        info = os.fstat(stream.fileno())
        if not stream.seekable():
            return None
        position = stream.tell()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return info.st_size - position if stat.S_ISREG(info.st_mode) else None
