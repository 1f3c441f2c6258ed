"""A low-level tar scanner for the tools: raw headers, big reads, seeks, resync.

:func:`shardkit.formats.tar.iter_members` is the reader for samples; the tools need more:
the raw header bytes of each member (``cat`` copies members byte for byte), reading in big
chunks or seeking over data it does not need (``verify``, ``index``, ``stats`` only look at
headers), and going on after a corrupt header (``verify`` reports every problem). The
header rules (checksums, GNU long names, PAX, base-256 sizes) are those of
:mod:`shardkit.formats.tar`, whose parsing helpers this module reuses.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator
from typing import BinaryIO, NamedTuple
from zlib import adler32

from ..errors import FormatError, TruncatedShardError
from ..formats import tar as _tar
from ..formats.tar import BLOCK, _header_name, _octal, _parse_pax

__all__ = ["REGULAR_TYPES", "RawMember", "TarScanner", "sample_members"]

_ZERO = bytes(BLOCK)
_MAX_MEMBER = 1 << 40
_MAX_META = 1 << 20
_META_TYPES = b"LKxg"
REGULAR_TYPES = frozenset(b"0\x007")

Write = Callable[[memoryview], object]


def _checksum_ok(header: bytes | bytearray) -> bool:
    """The tar header checksum rule, fast: adler32's low half is 1 + the byte sum of a
    block of at most 256 bytes (it cannot wrap), so three C calls replace a Python sum
    over the header without its checksum field."""
    try:
        expected = int(header[148:154], 8)  # "%06o\0 ", as tar and tarfile write it
    except ValueError:
        return _tar._checksum_ok(bytes(header))
    total = (
        (adler32(header[:148]) & 0xFFFF)
        + (adler32(header[156:412]) & 0xFFFF)
        + (adler32(header[412:]) & 0xFFFF)
        + 253  # 8 spaces for the checksum field (256), minus the three adler32 start values
    )
    return total == expected or _tar._checksum_ok(bytes(header))


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
    def end(self) -> int:
        """Offset just after the member's data and padding."""
        return self.start + len(self.header) + self.size + (-self.size % BLOCK)


class TarScanner:
    """Iterate over the members of a tar stream; after each one, the caller may
    :meth:`read_data`, :meth:`copy_member` or do nothing (the data is then skipped, by a seek
    where ``seek=True`` and the stream is a regular file)."""

    def __init__(
        self,
        stream: BinaryIO,
        *,
        url: str | None = None,
        chunk_size: int = 1 << 22,
        seek: bool = False,
    ) -> None:
        self._stream = stream
        self._read = stream.read
        self._readinto = getattr(stream, "readinto", None)
        self.url = url
        self._chunk = chunk_size
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

    @property
    def offset(self) -> int:
        """Offset of the next unread byte, from the start of the stream."""
        return self._base + self._pos

    # -- buffer
    def _fill(self, n: int) -> bool:
        """Make ``n`` bytes available at the position; False if the stream ends first.

        The bytes from the position on (from the :meth:`keep_from` offset, if earlier) move
        to the front of the buffer; pending copies are written out first."""
        avail = self._len - self._pos
        if avail >= n:
            return True
        self.flush_copy()
        keep = self._pos if self._keep is None else min(self._keep, self._pos)
        held = self._len - keep
        need = self._pos - keep + n
        buf = self._buf
        size = max(self._chunk, need)
        if len(buf) < size:
            buf = self._buf = bytearray(size) if not held else buf + bytes(size - len(buf))
        buf[:held] = buf[keep : self._len]
        self._base += keep
        self._pos -= keep
        if self._keep is not None:
            self._keep -= keep
        while held < need:
            got = self._read_into(buf, held)
            if not got:
                break
            held += got
        self._len = held
        return held >= need

    def _read_into(self, buf: bytearray, at: int) -> int:
        if self._readinto is not None:
            with memoryview(buf) as view:
                return int(self._readinto(view[at:]) or 0)
        chunk = self._read(len(buf) - at)
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
        if write is None and self._keep is not None:  # kept bytes stay in the buffer
            got = n if self._fill(n) else self._len - self._pos
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
        # The common case (a plain ustar header for a regular file, checksum as tar writes
        # it) is inlined here: this loop runs once per member and dominates small samples.
        while True:
            if self._pending:
                self._take(None)
            pos = self._pos
            if self._len - pos >= BLOCK:
                header = self._buf[pos : pos + BLOCK]
                if header[156] == 0x30 and not header[345]:
                    try:
                        expected = int(header[148:154], 8)
                        size = int(header[124:135], 8)
                    except ValueError:
                        expected = size = -1
                    total = (
                        (adler32(header[:148]) & 0xFFFF)
                        + (adler32(header[156:412]) & 0xFFFF)
                        + (adler32(header[412:]) & 0xFFFF)
                    )
                    if total + 253 == expected and size >= 0:
                        end = header.find(0, 0, 100)
                        name = header[: end if end >= 0 else 100].decode("utf-8", "surrogateescape")
                        self._member = member = RawMember(
                            self._base + pos, name, 0x30, header, size
                        )
                        self._pos = pos + BLOCK
                        self._pending = size + (-size % BLOCK)
                        yield member
                        continue
            found = self._any_member()
            if found is None:
                return
            yield found

    def _finish_member(self) -> None:
        if self._pending:
            self._take(None)

    def _take(self, write: Write | None) -> None:
        pending, self._pending = self._pending, 0
        if self._consume(pending, write) < pending:
            member = self._member
            raise TruncatedShardError(
                "shard ends inside a tar member", url=self.url, offset=member and member.start
            )

    def read_data(self) -> bytes:
        """The current member's data (consumes it)."""
        member = self._member
        if member is None or not self._pending:
            return b""
        pos, size = self._pos, member.size
        if self._pending <= self._len - pos:
            self._pos += self._pending
            self._pending = 0
            return bytes(self._buf[pos : pos + size])
        parts: list[bytes] = []
        self._take(lambda view: parts.append(bytes(view)))
        return b"".join(parts)[:size]

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

    def member_bytes(self) -> bytes:
        """The current member, headers, data and padding, as one bytes object."""
        member = self._member
        if member is None:
            return b""
        start = member.start - self._base
        if start >= 0 and self._pending <= self._len - self._pos:
            end = self._pos + self._pending
            self._pos, self._pending = end, 0
            with memoryview(self._buf) as view:
                return view[start:end].tobytes()
        parts = [bytes(member.header)]
        self._take(lambda view: parts.append(bytes(view)))
        return b"".join(parts)

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
            raise TruncatedShardError("shard ends inside a tar header", url=self.url, offset=start)
        return bytes(self._buf[self._pos : self._pos + BLOCK])

    def _any_member(self) -> RawMember | None:
        start = self.offset
        parts: list[bytes] = []
        long_name: str | None = None
        pax: dict[str, str] = {}
        while True:
            header = self._header()
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
            payload = self._meta_payload(size)
            parts.append(payload[1])
            if typeflag == 0x4C:
                long_name = payload[0].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            elif typeflag == 0x78:
                pax = _parse_pax(payload[0], self.url, self.offset - len(payload[1]))
        self._pos += BLOCK
        parts.append(header)
        name = pax.get("path") or long_name or _header_name(header)
        raw = parts[0] if len(parts) == 1 else b"".join(parts)
        self._member = RawMember(start, name, typeflag, raw, size)
        self._pending = size + (-size % BLOCK)
        return self._member

    def _parse(self, header: bytes, pax: dict[str, str]) -> tuple[int, int]:
        offset = self.offset
        if not _checksum_ok(header):
            raise FormatError(
                "bad tar header checksum (not a tar file, or corrupt)", url=self.url, offset=offset
            )
        try:
            size = int(pax["size"]) if "size" in pax else _octal(header[124:136])
        except ValueError:
            raise FormatError("bad size field in tar header", url=self.url, offset=offset) from None
        typeflag = header[156]
        limit = _MAX_META if typeflag in _META_TYPES else _MAX_MEMBER
        if size < 0 or size > limit:
            raise FormatError(f"absurd member size {size}", url=self.url, offset=offset)
        return size, typeflag

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
        if self._fill(BLOCK) and self._buf[self._pos : self._pos + BLOCK] == _ZERO:
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
            if block[257:262] == b"ustar" and _checksum_ok(block):
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
    import stat

    return info.st_size - position if stat.S_ISREG(info.st_mode) else None


def sample_members(scanner: TarScanner) -> Iterator[tuple[RawMember, str, bool]]:
    """(member, sample key, whether it starts a new sample) for each regular member.

    Raises as the reader does: for non-regular members (directories and root-level
    ``__meta__`` members pass silently), names without a key, and an extension repeated
    within a sample.
    """
    key: str | None = None
    exts: set[str] = set()
    for member in scanner:
        name = member.name
        slash = name.rfind("/") + 1
        dot = name.find(".", slash)
        if member.typeflag not in REGULAR_TYPES or dot <= slash:
            _odd_member(name, member.typeflag, scanner.url, member.start)
            continue
        prefix, ext = name[:dot], name[dot + 1 :].lower()
        new = prefix != key
        if new:
            key, exts = prefix, set()
        elif ext in exts:
            raise FormatError(
                f"duplicate extension {ext!r} in sample",
                url=scanner.url,
                offset=member.start,
                key=prefix,
            )
        exts.add(ext)
        yield member, prefix, new


def _odd_member(name: str, typeflag: int, url: str | None, offset: int) -> None:
    """Raise as the reader does for members it rejects; directories and ``__meta__`` pass."""
    if typeflag not in REGULAR_TYPES:
        if typeflag != 0x35:
            raise FormatError(f"non-regular member {name!r}", url=url, offset=offset)
    elif "/" in name or not (name.startswith("__") and name.endswith("__")):
        raise FormatError(f"member {name!r} has no key.extension form", url=url, offset=offset)
