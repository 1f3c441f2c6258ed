"""The tar writer: plain ustar, byte-reproducible (fixed mtime, owner and mode), refusing
what the reader would refuse (:func:`encode_sample`, :class:`TarWriter`), and the build's
fast path of the same bytes (:func:`tar_chunks`). The rules are described in
:mod:`shardkit.formats.tar`, their public door."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

from ..budget import allow, limit
from ..errors import EncodeError
from ._tarparse import BLOCK
from ._tarrules import check_key_order
from .limits import MAX_MEMBER_SIZE, MAX_NAME_BYTES

__all__ = ["END_OF_ARCHIVE", "Members", "TarWriter", "encode_sample", "tar_chunks", "tar_sample"]

END_OF_ARCHIVE = bytes(2 * BLOCK)
_ZERO_BLOCK = bytes(BLOCK)

_USTAR = b"ustar\x0000"
_MODE = b"0000444\0"
_OWNER = b"0000000\0"
_DEV = b"0000000\0"


def _size_field(size: int) -> bytes:
    if size < 8**11:
        return b"%011o\0" % size
    return b"\x80" + size.to_bytes(11, "big")  # GNU base-256 for members over 8 GiB


def _header(name: bytes, prefix: bytes, size: int, mtime: bytes, typeflag: bytes) -> bytes:
    head = b"".join(
        (
            name.ljust(100, b"\0"),
            _MODE,
            _OWNER,
            _OWNER,
            _size_field(size),
            mtime,
            b"        ",
            typeflag,
            bytes(100),
            _USTAR,
            bytes(64),
            _DEV,
            _DEV,
            prefix.ljust(155, b"\0"),
            bytes(12),
        )
    )
    checksum = b"%06o\0 " % sum(head)
    return head[:148] + checksum + head[156:]


def _name_headers(name: bytes, size: int, mtime: bytes) -> bytes:
    if len(name) <= 100:
        return _header(name, b"", size, mtime, b"0")
    if len(name) <= 256:
        cut = name.rfind(b"/", 0, 156)
        if cut > 0 and len(name) - cut - 1 <= 100:
            return _header(name[cut + 1 :], name[:cut], size, mtime, b"0")
    payload = name + b"\0"
    long_header = _header(b"././@LongLink", b"", len(payload), mtime, b"L")
    return (
        long_header
        + payload
        + bytes(-len(payload) % BLOCK)
        + _header(name[:100], b"", size, mtime, b"0")
    )


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise EncodeError(f"__key__ must be a str, not {type(key).__name__}")
    if not key:
        raise EncodeError("empty __key__: every sample needs a non-empty key")
    last = key.rsplit("/", 1)[-1]
    if not last:
        raise EncodeError("__key__ ends with '/': its last component is empty", key=key)
    if "." in last:
        raise EncodeError(
            "__key__ has a dot in its last path component: readers would split it there "
            "(replace the dot, e.g. with '_')",
            key=key,
        )
    if key.startswith("/") or "\0" in key or ".." in key.split("/"):
        raise EncodeError("__key__ must be a relative path without '..' or NUL", key=key)
    return key


def _check_ext(ext: str, seen: set[str], key: str) -> None:
    """Refuse an extension readers would reject: empty, with '/' or NUL, or the same as
    another one of the sample once lower-cased (readers lower-case extensions)."""
    if not ext or "/" in ext or "\0" in ext:
        raise EncodeError(
            f"bad extension {ext!r}: it must be non-empty and contain no '/' or NUL", key=key
        )
    lower = ext.lower()
    if lower in seen:
        raise EncodeError(
            f"extension {ext!r} repeats another one of the sample once lower-cased "
            "(readers lower-case extensions)",
            key=key,
        )
    seen.add(lower)


def _check_member(name: bytes, size: int, key: str) -> None:
    """Refuse a member the reader's limits refuse: over the member table's and the
    writers' :data:`~shardkit.formats.limits.MAX_MEMBER_SIZE`, or over the budget's
    ``member`` limit (:mod:`shardkit.budget`), so a shard written reads back."""
    if size > MAX_MEMBER_SIZE:
        raise EncodeError(
            f"field of {size} bytes is over the {MAX_MEMBER_SIZE}-byte member limit "
            "(max_member_size) readers apply",
            key=key,
        )
    what = f"tar member {name.decode('utf-8', 'replace')[:200]!r} to write"
    allow("member", size, what=what, error=EncodeError, key=key)
    if len(name) > MAX_NAME_BYTES:
        raise EncodeError(
            f"member name of {len(name)} bytes is over the {MAX_NAME_BYTES}-byte limit "
            "readers apply to names",
            key=key[:100],
        )


def encode_sample(sample: Mapping[str, Any], *, mtime: int = 0) -> bytes:
    """The tar bytes of one sample: a header and padded data per field, in dict order.

    Values must already be bytes or str (run :func:`shardkit.codecs.encode_sample`
    first for anything else). Dunder keys other than ``__key__`` are not written.
    """
    key = _check_key(sample.get("__key__"))
    mtime_field = b"%011o\0" % mtime
    parts: list[bytes] = []
    seen: set[str] = set()
    for ext, value in sample.items():
        if ext.startswith("__") and ext.endswith("__"):
            continue
        _check_ext(ext, seen, key)
        name = f"{key}.{ext}".encode("utf-8", "surrogateescape")
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, bytes):
            if not isinstance(value, (bytearray, memoryview)):
                raise EncodeError(
                    f"field {ext!r} is {type(value).__name__}, not bytes or str: "
                    "encode it first (shardkit.codecs.encode_sample)",
                    key=key,
                )
            _check_member(name, memoryview(value).nbytes, key)  # before copying it
            value = bytes(value)
        _check_member(name, len(value), key)
        parts.append(_name_headers(name, len(value), mtime_field))
        parts.append(value)
        pad = -len(value) % BLOCK
        if pad:
            parts.append(_ZERO_BLOCK[:pad])
    if not parts:
        raise EncodeError("sample has no fields to write", key=key)
    return b"".join(parts)


class TarWriter:
    """Write samples to one tar stream (webdataset's ``TarWriter``, byte-reproducible).

    ``write(sample)`` takes a dict of bytes/str fields (use ``encode=True`` to run the
    codecs registry on other values first). ``close()`` writes the end-of-archive blocks
    but does not close the stream unless ``close_stream=True``.
    """

    def __init__(
        self, stream: BinaryIO, *, encode: bool = False, mtime: int = 0, close_stream: bool = False
    ) -> None:
        self._stream = stream
        self._encode = encode
        self._mtime = mtime
        self._close_stream = close_stream
        self._last_key: str | None = None
        self.count = 0
        self.size = 0
        self._closed = False

    def encode(self, sample: Mapping[str, Any]) -> bytes:
        """Check and encode one sample without writing it."""
        if self._encode:
            from ..codecs import encode_sample as encode_fields

            sample = encode_fields(sample)
        data = encode_sample(sample, mtime=self._mtime)
        check_key_order(self._last_key, sample["__key__"])
        return data

    def write_encoded(self, key: str, data: bytes) -> int:
        """Append bytes from :meth:`encode`; returns their size."""
        self._stream.write(data)
        self._last_key = key
        self.count += 1
        self.size += len(data)
        return len(data)

    def write(self, sample: Mapping[str, Any]) -> int:
        """Encode and append one sample; returns the bytes written."""
        return self.write_encoded(sample["__key__"], self.encode(sample))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stream.write(END_OF_ARCHIVE)
        self.size += len(END_OF_ARCHIVE)
        if self._close_stream:
            self._stream.close()

    def __enter__(self) -> TarWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- fast path

_BIG = 4096  # data larger than this is written from its own buffer, not copied
_ZEROS = bytes(BLOCK)
# The fixed fields of a ustar header around name (0:100) and size (124:136); the checksum
# field (148:156) counts as eight spaces while summing.
_MID = b"0000444\x000000000\x000000000\x00"
_TAIL = b"00000000000\x00" + b" " * 8 + b"0" + bytes(100) + b"ustar\x0000" + bytes(64)
_TAIL += b"0000000\x000000000\x00" + bytes(155 + 12)
_FIXED_SUM = sum(_MID) + sum(_TAIL)


# One header: name (NUL-padded to 100), size field, checksum field; the rest is fixed.
_BEFORE_SUM = _TAIL[:12]  # mtime, before the checksum field
_AFTER_SUM = _TAIL[20:]
_NULS = [bytes(100 - n) for n in range(101)]  # what pads a name of n bytes to 100
_PADS = [_ZEROS[: -n % BLOCK] for n in range(BLOCK)]  # what pads data of n % 512 bytes
#: The extensions and data sizes of a sample's members, in order.
Members = tuple[list[str], list[int]]
_SUFFIXES: dict[str, tuple[bytes, int]] = {}  # extension -> ".ext" encoded, its byte sum


def _suffix(ext: str) -> tuple[bytes, int]:
    suffix = _SUFFIXES.get(ext)
    if suffix is None:
        encoded = b"." + ext.encode("utf-8", "surrogateescape")
        suffix = (encoded, sum(encoded))
        if len(_SUFFIXES) < 256:
            _SUFFIXES[ext] = suffix
    return suffix


def tar_chunks(key: str, fields: Sequence[tuple[str, bytes]]) -> tuple[list[bytes], int]:
    """The tar members of one sample as chunks to write, and their total size.

    Large data goes out as it is (no copy); headers, padding and small fields are joined
    into as few chunks as possible, to keep ``writev`` and hash calls few.
    """
    chunks, total, _ = tar_sample(key, fields)
    return chunks, total


def tar_sample(
    key: str, fields: Sequence[tuple[str, bytes]]
) -> tuple[list[bytes], int, Members | None]:
    """:func:`tar_chunks`, and the members' extensions and data sizes when every member
    is one plain ustar header named ``KEY.EXT`` (the name as a reader decodes it), then
    its data (None otherwise): what a member table records without parsing the bytes
    (:meth:`shardkit.formats.members.TableBuilder.add_fields`)."""
    chunks: list[bytes] = []
    small: list[bytes] = []
    total = 0
    stem = key.encode("utf-8", "surrogateescape")
    stem_sum = _FIXED_SUM + sum(stem)
    exts: list[str] = []
    sizes: list[int] = []
    plain = "\0" not in key and (key.isascii() or stem.decode("utf-8", "surrogateescape") == key)
    cap = min(MAX_MEMBER_SIZE, limit("member"))
    for ext, data in fields:
        suffix, suffix_sum = _suffix(ext)
        name = stem + suffix
        size = len(data)
        if len(name) > 100 or size > cap:  # the reference checks limits
            small.append(encode_sample({"__key__": key, ext: data}))
            total += len(small[-1])
            plain = False
            continue
        if not ext.isascii() or "\0" in ext:
            plain = False  # a reader might decode the name otherwise: the table parses it
        exts.append(ext)
        sizes.append(size)
        size_field = b"%011o\x00" % size
        checksum = b"%06o\x00 " % (stem_sum + suffix_sum + sum(size_field))
        small += (name, _NULS[len(name)], _MID, size_field, _BEFORE_SUM, checksum, _AFTER_SUM)
        if size > _BIG:
            chunks.append(b"".join(small))
            chunks.append(data)
            small = []
        else:
            small.append(data)
        pad = size % BLOCK
        if pad:
            small.append(_PADS[pad])
        total += BLOCK + size + (-size % BLOCK)
    if small:
        chunks.append(b"".join(small))
    return chunks, total, (exts, sizes) if plain else None
