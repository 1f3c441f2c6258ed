"""WebDataset tar shards: a streaming reader and a byte-reproducible writer.

The rules are webdataset's:

* A member name splits into key and extension at the FIRST dot of its last path
  component: ``a/b.c.d.jpg`` is key ``a/b``, extension ``c.d.jpg``.
* A sample is a run of consecutive members with the same key. Extensions are lower-cased
  on read. Read samples carry ``__key__`` and ``__url__``.
* Directory members and webdataset's ``__meta__`` members at the archive root are skipped;
  other non-regular members (links, devices, fifos), names without a key and duplicate
  extensions within a sample are *data errors*, passed to the ``handler`` policy.

The reader only calls ``stream.read(n)``: no seeking, so pipes and HTTP bodies work. It
understands ustar, GNU (long names, base-256 sizes) and PAX headers, so it reads what GNU
tar, Python's tarfile and webdataset write.

The writer emits plain ustar: one 512-byte header per member (a GNU long-name header only
for names over 255 bytes), fixed mtime, owner and mode, members in the sample's order. The
same samples always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, NamedTuple

from ..errors import EncodeError, FormatError, TruncatedShardError
from ..handlers import Handler, reraise

__all__ = [
    "BLOCK",
    "END_OF_ARCHIVE",
    "TarMember",
    "TarWriter",
    "encode_sample",
    "iter_members",
    "iter_samples",
    "sample_size",
    "split_name",
]

BLOCK = 512
END_OF_ARCHIVE = bytes(2 * BLOCK)
_ZERO_BLOCK = bytes(BLOCK)
_REGULAR = frozenset(b"0\x007")
# Upper bound on a header-declared size we are willing to act on (1 TiB).
_MAX_MEMBER = 1 << 40
_MAX_META = 1 << 20  # PAX / GNU long-name payloads


class TarMember(NamedTuple):
    """One regular member: its (possibly long) name, its bytes, its header's offset."""

    name: str
    data: bytes
    offset: int


def split_name(name: str) -> tuple[str, str] | None:
    """Split a member name into (key, extension) by the first-dot rule, or None."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:  # no dot, or the last component starts with one: no key
        return None
    return name[:dot], name[dot + 1 :]


# --------------------------------------------------------------------------- reading


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _octal(field: bytes) -> int:
    if field[0] & 0x80:  # GNU base-256
        value = int.from_bytes(field[1:], "big")
        return -value if field[0] & 0x40 else value
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _checksum_ok(header: bytes) -> bool:
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


def iter_members(
    stream: BinaryIO, *, url: str | None = None, handler: Handler = reraise
) -> Iterator[TarMember]:
    """Yield the regular members of a tar stream, in order.

    Structural errors (a bad header checksum, a truncated member) raise: the rest of the
    stream cannot be trusted. Non-regular members go to ``handler``.
    """
    offset = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    read = stream.read
    while True:
        header = read(BLOCK)
        if len(header) < BLOCK:
            if header:
                header += _read_exact(stream, BLOCK - len(header))
            if not header:
                return  # end of stream without end-of-archive blocks: accepted, like tar
            if len(header) < BLOCK:
                raise TruncatedShardError("shard ends inside a tar header", url=url, offset=offset)
        if header == _ZERO_BLOCK:
            return
        if not _checksum_ok(header):
            raise FormatError(
                "bad tar header checksum (not a tar file, or corrupt)", url=url, offset=offset
            )
        try:
            size = _octal(header[124:136])
        except ValueError:
            raise FormatError("bad size field in tar header", url=url, offset=offset) from None
        typeflag = header[156]
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise FormatError("bad PAX size", url=url, offset=offset) from None
        if size < 0 or size > _MAX_MEMBER:
            raise FormatError(f"absurd member size {size}", url=url, offset=offset)
        is_regular = typeflag in _REGULAR
        if not is_regular and typeflag in b"LKxg" and size > _MAX_META:
            raise FormatError(f"absurd metadata size {size}", url=url, offset=offset)
        if is_regular or typeflag in b"LKxg":
            data = read(size)
            if len(data) < size:
                data += _read_exact(stream, size - len(data))
                if len(data) < size:
                    raise TruncatedShardError(
                        "shard ends inside a tar member", url=url, offset=offset
                    )
        else:
            data = b""
            _skip(stream, size, url, offset)
        pad = -size % BLOCK
        if pad and len(_read_exact(stream, pad)) < pad:
            raise TruncatedShardError("shard ends inside a tar member", url=url, offset=offset)
        member_offset = offset
        offset += BLOCK + size + pad
        if typeflag == 0x4C:  # 'L': GNU long name for the next member
            long_name = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            continue
        if typeflag == 0x78:  # 'x': PAX extended header for the next member
            pax = _parse_pax(data, url, member_offset)
            continue
        if typeflag in b"Kg":  # long link name / PAX global header: not needed
            continue
        if "path" in pax:
            name = pax["path"]
        elif long_name is not None:
            name = long_name
        else:
            name = _header_name(header)
        long_name = None
        pax = {}
        if is_regular:
            yield TarMember(name, data, member_offset)
        elif typeflag != 0x35:  # '5': directories carry nothing and are skipped
            kind = _KINDS.get(typeflag, f"type {chr(typeflag)!r}")
            exc = FormatError(
                f"non-regular member {name!r} ({kind})", url=url, offset=member_offset
            )
            if not handler(exc):
                return


_KINDS = {
    0x31: "hard link",
    0x32: "symlink",
    0x33: "char device",
    0x34: "block device",
    0x36: "fifo",
}


def _header_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar" and header[345] != 0:
        prefix = header[345:500].split(b"\0", 1)[0]
        name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _skip(stream: BinaryIO, size: int, url: str | None, offset: int) -> None:
    while size > 0:
        chunk = stream.read(min(size, 1 << 20))
        if not chunk:
            raise TruncatedShardError("shard ends inside a tar member", url=url, offset=offset)
        size -= len(chunk)


def iter_samples(
    stream: BinaryIO, *, url: str | None = None, handler: Handler = reraise
) -> Iterator[dict[str, Any]]:
    """Group the members of a tar stream into samples (dicts of extension -> bytes).

    Each sample has ``__key__``, ``__url__`` (when ``url`` is given) and ``__offset__``,
    the byte offset of its first member's header. Bad data goes to ``handler``; a handler
    that returns False ends the shard.
    """
    current: dict[str, Any] | None = None
    key: str | None = None
    for name, data, offset in iter_members(stream, url=url, handler=handler):
        split = split_name(name)
        if split is None:
            if "/" not in name and name.startswith("__") and name.endswith("__"):
                continue  # webdataset's archive-level metadata members
            if not handler(
                FormatError(f"member {name!r} has no key.extension form", url=url, offset=offset)
            ):
                return
            continue
        prefix, ext = split
        ext = ext.lower()
        if prefix != key:
            if current is not None:
                yield current
            key = prefix
            current = {"__key__": prefix, "__url__": url, "__offset__": offset, ext: data}
            continue
        if current is None:  # pragma: no cover - key and current are set together
            raise RuntimeError("tar grouping invariant broken")
        if ext in current:
            error = FormatError(
                f"duplicate extension {ext!r} in sample", url=url, offset=offset, key=prefix
            )
            if not handler(error):
                return
            continue
        current[ext] = data
    if current is not None:
        yield current


# --------------------------------------------------------------------------- writing

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


def encode_sample(sample: Mapping[str, Any], *, mtime: int = 0) -> bytes:
    """The tar bytes of one sample: a header and padded data per field, in dict order.

    Values must already be bytes or str (run :func:`shardkit.codecs.encode_sample`
    first for anything else). Dunder keys other than ``__key__`` are not written.
    """
    key = _check_key(sample.get("__key__"))
    mtime_field = b"%011o\0" % mtime
    parts: list[bytes] = []
    for ext, value in sample.items():
        if ext.startswith("__") and ext.endswith("__"):
            continue
        if not ext or "/" in ext:
            raise EncodeError(
                f"bad extension {ext!r}: it must be non-empty and contain no '/'", key=key
            )
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, bytes):
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            else:
                raise EncodeError(
                    f"field {ext!r} is {type(value).__name__}, not bytes or str: "
                    "encode it first (shardkit.codecs.encode_sample)",
                    key=key,
                )
        name = f"{key}.{ext}".encode("utf-8", "surrogateescape")
        parts.append(_name_headers(name, len(value), mtime_field))
        parts.append(value)
        pad = -len(value) % BLOCK
        if pad:
            parts.append(_ZERO_BLOCK[:pad])
    if not parts:
        raise EncodeError("sample has no fields to write", key=key)
    return b"".join(parts)


def sample_size(encoded: bytes) -> int:
    """Bytes a sample adds to a shard (it is already block-aligned)."""
    return len(encoded)


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
        if sample["__key__"] == self._last_key:
            raise EncodeError(
                "the same __key__ twice in a row: readers would merge the two samples",
                key=self._last_key,
            )
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
