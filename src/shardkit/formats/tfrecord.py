"""TFRecord framing: length-prefixed records with masked CRC32C checksums.

A TFRecord file is a plain sequence of records, each framed as::

    uint64  length          little-endian
    uint32  masked_crc32c(length bytes)
    bytes   data[length]
    uint32  masked_crc32c(data)

where ``masked_crc32c(b) = rotr15(crc32c(b)) + 0xA282EAD8 (mod 2**32)``. There is no file
header or footer. GZIP-compressed TFRecord files are the same byte stream inside gzip; wrap
the stream in :class:`gzip.GzipFile` (``mtime=0`` when writing, for reproducible bytes) and
use these functions unchanged.

A record is held whole, so its length is bounded before anything is read or sliced: by
``max_record_length`` (the format's own limit, 2 GiB) and by the budget's ``record`` limit
(:mod:`shardkit.budget`, 256 MiB, ``SHARDKIT_MAX_RECORD``; a gzip stream inflates a
record of zeros of that size from a few hundred KB), a :class:`FormatLimitError` naming
the shard and the offset. :func:`frame_record` refuses to write a record over either.

Reading checks both CRCs by default. ``verify=False`` skips only the data CRC: the length
CRC is always checked, since it is cheap and is what stops a corrupt length from being
trusted.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..budget import allow
from ..errors import ChecksumError, EncodeError, FormatError, FormatLimitError, TruncatedShardError
from ._io import read_bounded
from .limits import MAX_RECORD_LENGTH, check_limit

__all__ = [
    "RECORD_OVERHEAD",
    "buffer_records",
    "frame_record",
    "iter_records",
    "masked_crc32c",
]

RECORD_OVERHEAD = 16
"""Bytes added around each record: 8 (length) + 4 (length CRC) + 4 (data CRC)."""


_HEADER_SIZE = 12
_MASK_DELTA = 0xA282EAD8
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")

# Records at most this long are read together with their footer and the next header in a
# single read() call and sliced out; longer ones are read on their own to avoid the copy.
_SMALL_RECORD = 1 << 14


_Buffer = bytes | bytearray | memoryview


def _load_crc32c(data: _Buffer) -> int:
    """Import the ``crc32c`` module on first use and put its function in its place: the
    package's own import loads ``importlib.metadata``, ``email`` and ``argparse`` (about
    8 MB and 15 ms), which a process that only reads tar shards never needs."""
    global _crc32c
    from crc32c import crc32c

    _crc32c = crc32c
    return crc32c(data)


_crc32c: Callable[[_Buffer], int] = _load_crc32c


def masked_crc32c(data: _Buffer) -> int:
    """Return the masked CRC32C of ``data``, as stored in TFRecord files."""
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes | bytearray | memoryview) -> bytes:
    """Return ``data`` framed as one TFRecord record (``RECORD_OVERHEAD + len(data)`` bytes).

    A record over :data:`~shardkit.formats.limits.MAX_RECORD_LENGTH` or the budget's
    ``record`` limit, which readers refuse, is an :class:`EncodeError`."""
    if len(data) > MAX_RECORD_LENGTH:
        raise EncodeError(
            f"record of {len(data)} bytes is over the {MAX_RECORD_LENGTH}-byte limit "
            "(max_record_length) readers apply"
        )
    allow("record", len(data), what="a TFRecord record to write", error=EncodeError)
    length = _U64.pack(len(data))
    return b"".join(
        (length, _U32.pack(masked_crc32c(length)), data, _U32.pack(masked_crc32c(data)))
    )


def iter_records(
    stream: BinaryIO,
    *,
    url: str | None = None,
    verify: bool = True,
    max_record_length: int = MAX_RECORD_LENGTH,
    on_bad_data: Callable[[ChecksumError], object] | None = None,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, data)`` for each record of a TFRecord stream.

    ``offset`` is the byte offset of the record's start in the (uncompressed) stream. Only
    ``stream.read(n)`` is used, so pipes, sockets, HTTP bodies and ``gzip.GzipFile`` all work;
    short reads are retried until ``n`` bytes or end of stream. A record is yielded once its
    footer and the next record's 12-byte header have been read (or the stream has ended).
    A length that lies allocates nothing the stream does not fill.

    Raises :class:`TruncatedShardError` if the stream ends inside a record,
    :class:`ChecksumError` if a CRC does not match (the data CRC only when ``verify``) and
    :class:`FormatError` for a length over ``max_record_length`` (a
    :class:`FormatLimitError` over the budget's ``record`` limit); each carries ``url``
    and the ``offset`` of the record where the problem is. With ``on_bad_data``, a data
    CRC mismatch is passed to it instead and the record is yielded all the same (its
    length was good: ``verify`` goes on after it).
    """
    check_limit("max_record_length", max_record_length)
    read = stream.read
    unpack_header = _HEADER.unpack_from
    unpack_u32 = _U32.unpack_from
    crc = masked_crc32c
    offset = 0
    header = read_bounded(read, _HEADER_SIZE)
    while header:
        if len(header) < _HEADER_SIZE:
            raise TruncatedShardError(
                f"stream ends inside a record header ({len(header)} of 12 bytes)",
                url=url,
                offset=offset,
            )
        length, length_crc = unpack_header(header)
        _check_header(header, length, length_crc, max_record_length, url, offset)
        if length <= _SMALL_RECORD:
            # Data, data CRC and the next header in one call.
            want = length + 4 + _HEADER_SIZE
            buf = read(want)
            if len(buf) != want:
                buf = read_bounded(read, want, buf)
            data = buf[:length]
            footer = buf[length : length + 4]
            next_header = buf[length + 4 :]
        else:
            data = read_bounded(read, length)
            rest = read_bounded(read, 4 + _HEADER_SIZE) if len(data) == length else b""
            footer = rest[:4]
            next_header = rest[4:]
        if len(footer) != 4:
            raise TruncatedShardError(
                f"stream ends inside a record of {length} bytes", url=url, offset=offset
            )
        if verify and crc(data) != unpack_u32(footer)[0]:
            error = ChecksumError(
                f"data CRC mismatch in a record of {length} bytes", url=url, offset=offset
            )
            if on_bad_data is None:
                raise error
            on_bad_data(error)
        yield offset, data
        offset += length + RECORD_OVERHEAD
        header = next_header


def buffer_records(
    buffer: bytes | mmap.mmap,
    *,
    url: str | None = None,
    verify: bool = True,
    max_record_length: int = MAX_RECORD_LENGTH,
) -> Iterator[tuple[int, bytes]]:
    """:func:`iter_records` over records in memory (a memory-mapped local shard): each
    record's data is a slice, nothing is read; the same checks (both CRCs, the length
    limit before anything is sliced) and the same errors."""
    check_limit("max_record_length", max_record_length)
    unpack_header = _HEADER.unpack_from
    unpack_u32 = _U32.unpack_from
    crc = masked_crc32c
    offset, end = 0, len(buffer)
    while offset < end:
        if end - offset < _HEADER_SIZE:
            raise TruncatedShardError(
                f"stream ends inside a record header ({end - offset} of 12 bytes)",
                url=url,
                offset=offset,
            )
        header = buffer[offset : offset + _HEADER_SIZE]
        length, length_crc = unpack_header(header)
        _check_header(header, length, length_crc, max_record_length, url, offset)
        start = offset + _HEADER_SIZE
        if end - start < length + 4:
            raise TruncatedShardError(
                f"stream ends inside a record of {length} bytes", url=url, offset=offset
            )
        data = buffer[start : start + length]
        if verify and crc(data) != unpack_u32(buffer, start + length)[0]:
            raise ChecksumError(
                f"data CRC mismatch in a record of {length} bytes", url=url, offset=offset
            )
        yield offset, data
        offset = start + length + 4


def _check_header(
    header: bytes | bytearray,
    length: int,
    length_crc: int,
    limit: int,
    url: str | None,
    offset: int,
) -> None:
    if masked_crc32c(header[:8]) != length_crc:
        raise ChecksumError("length CRC mismatch in record header", url=url, offset=offset)
    if length > limit:
        raise FormatError(
            f"record length {length} exceeds the limit of {limit} bytes "
            "(max_record_length: raise it to read this shard)",
            url=url,
            offset=offset,
        )
    allow(
        "record", length, what="a TFRecord record", error=FormatLimitError, url=url, offset=offset
    )
