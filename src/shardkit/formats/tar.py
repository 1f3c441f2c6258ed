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

Untrusted archives are safe to read: every malformed input ends in a
:class:`~shardkit.errors.FormatError`; a member is read whole only up to
``max_member_size`` (refused from its header before anything is read), and in pieces, so
a size that lies allocates nothing; the reader never touches the file system. Member
names come back exactly as stored (``../x``, ``/etc/x``): code that turns them into paths
uses :func:`safe_member_path`.

The writer emits plain ustar: one 512-byte header per member (a GNU long-name header only
for names over 255 bytes), fixed mtime, owner and mode, members in the sample's order. The
same samples always give the same bytes.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO, NamedTuple

from ..errors import ConfigError, EncodeError, FormatError, TruncatedShardError
from ..handlers import Handler, reraise

__all__ = [
    "BLOCK",
    "END_OF_ARCHIVE",
    "MAX_MEMBER_SIZE",
    "TarMember",
    "TarWriter",
    "encode_sample",
    "iter_members",
    "iter_samples",
    "read_exact",
    "safe_member_path",
    "sample_size",
    "split_name",
]

BLOCK = 512
END_OF_ARCHIVE = bytes(2 * BLOCK)
_ZERO_BLOCK = bytes(BLOCK)
_REGULAR = frozenset(b"0\x007")
_META = frozenset(b"LKxg")  # GNU long name / long link, PAX extended / global header
_MAX_META = 1 << 20  # their payloads are read whole too
_MAX_SKIPPED = 1 << 40  # other members are streamed past; only an absurd size is an error
_CHUNK = 1 << 24  # members larger than this are read piece by piece
_PIECE = 1 << 20

MAX_MEMBER_SIZE = 2 << 30
"""Default ``max_member_size``: the largest member read into memory (2 GiB)."""


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


def read_exact(stream: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes, looping over short reads; fewer only at the end of the stream."""
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


def _read_large(stream: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes in pieces: a lying size allocates nothing it does not fill.

    ``read(n)`` allocates ``n`` bytes up front on many streams (and GzipFile holds a
    second copy while it fills them). BytesIO hands back its own buffer from getvalue(),
    so a member that is really there costs its size once, plus a 1 MiB piece.
    """
    buffer = io.BytesIO()
    got = 0
    while got < n:
        chunk = stream.read(min(n - got, _PIECE))
        if not chunk:
            break
        buffer.write(chunk)
        got += len(chunk)
    return buffer.getvalue()


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


def _member_size(header: bytes, pax: dict[str, str], url: str | None, offset: int) -> int:
    """The data size of a member: its PAX ``size`` record if any, else its header field."""
    try:
        size = int(pax["size"]) if "size" in pax else _octal(header[124:136])
    except ValueError:
        raise FormatError("bad size field in tar header", url=url, offset=offset) from None
    if size < 0:
        raise FormatError(f"negative member size {size}", url=url, offset=offset)
    return size


def _size_error(size: int, typeflag: int, limit: int, url: str | None, offset: int) -> FormatError:
    if typeflag in _REGULAR:
        what = f"max_member_size ({limit} bytes): raise it to read this shard"
    else:
        what = f"the {limit}-byte limit for tar metadata (type {chr(typeflag)!r})"
    return FormatError(f"member of {size} bytes is over {what}", url=url, offset=offset)


def iter_members(
    stream: BinaryIO,
    *,
    url: str | None = None,
    handler: Handler = reraise,
    max_member_size: int = MAX_MEMBER_SIZE,
) -> Iterator[TarMember]:
    """Yield the regular members of a tar stream, in order.

    Structural errors (a bad header checksum, a truncated member) raise: the rest of the
    stream cannot be trusted. Non-regular members go to ``handler``. Members are read
    whole into memory, so one whose header declares more than ``max_member_size`` bytes
    raises :class:`FormatError` before anything is read (PAX and GNU long-name headers
    are limited to 1 MiB); other members are streamed past, never held. Names are
    returned as they are, ``../`` and all: see :func:`safe_member_path`.
    """
    _check_limit(max_member_size)
    offset = 0
    long_name: str | None = None
    pax: dict[str, str] = {}
    read = stream.read
    while True:
        header = read(BLOCK)
        if len(header) < BLOCK:
            if header:
                header += read_exact(stream, BLOCK - len(header))
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
        typeflag = header[156]
        size = _member_size(header, pax, url, offset)
        is_regular = typeflag in _REGULAR
        if is_regular or typeflag in _META:
            limit = max_member_size if is_regular else _MAX_META
            if size > limit:
                raise _size_error(size, typeflag, limit, url, offset)
            if size <= _CHUNK:
                data = read(size)
                if len(data) < size:
                    data += read_exact(stream, size - len(data))
            else:
                data = _read_large(stream, size)
            if len(data) < size:
                raise TruncatedShardError("shard ends inside a tar member", url=url, offset=offset)
        else:
            if size > _MAX_SKIPPED:
                raise FormatError(f"absurd member size {size}", url=url, offset=offset)
            data = b""
            _skip(stream, size, url, offset)
        pad = -size % BLOCK
        if pad and len(read_exact(stream, pad)) < pad:
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


def _check_limit(max_member_size: int) -> None:
    if isinstance(max_member_size, bool) or not isinstance(max_member_size, int):
        raise TypeError(f"max_member_size must be an int, not {type(max_member_size).__name__}")
    if max_member_size < 0:
        raise ConfigError(f"max_member_size must be >= 0, not {max_member_size}")


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
    stream: BinaryIO,
    *,
    url: str | None = None,
    handler: Handler = reraise,
    max_member_size: int = MAX_MEMBER_SIZE,
) -> Iterator[dict[str, Any]]:
    """Group the members of a tar stream into samples (dicts of extension -> bytes).

    Each sample has ``__key__``, ``__url__`` (when ``url`` is given) and ``__offset__``,
    the byte offset of its first member's header. Bad data goes to ``handler``; a handler
    that returns False ends the shard. ``max_member_size`` is as for :func:`iter_members`.
    """
    current: dict[str, Any] | None = None
    key: str | None = None
    members = iter_members(stream, url=url, handler=handler, max_member_size=max_member_size)
    for name, data, offset in members:
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


def safe_member_path(name: str, root: str | None = None) -> str:
    """``name`` (a member name or sample key) as a path that stays inside a folder.

    The reader returns names as the archive has them; anything that turns them into file
    paths must go through this. Raises :class:`FormatError` (a data error: ``handler``
    policies apply) for an absolute path, a ``..`` component, an empty component
    (``a//b``, a trailing ``/``), a NUL character, or a drive (on Windows). ``.``
    components are dropped: ``./a/b.jpg`` gives ``a/b.jpg``. With ``root``, returns
    ``root`` joined with that path, after checking that no symlink already inside
    ``root`` leads the path out of it.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    slashed = name.replace(os.altsep, "/") if os.altsep else name
    if os.sep != "/":
        slashed = slashed.replace(os.sep, "/")
    parts = [part for part in slashed.split("/") if part != "."]
    problem = _path_problem(name, slashed, parts)
    if problem is not None:
        raise FormatError(f"unsafe member name {name!r}: {problem}", key=name)
    path = "/".join(parts)
    if root is None:
        return path
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, *parts))
    if os.path.commonpath([base, target]) != base:
        raise FormatError(
            f"unsafe member name {name!r}: a symlink in {root!r} leads it outside", key=name
        )
    return os.path.join(root, *parts)


def _path_problem(name: str, slashed: str, parts: list[str]) -> str | None:
    if "\0" in name:
        return "it contains NUL"
    if slashed.startswith("/") or os.path.splitdrive(name)[0]:
        return "it is absolute"
    if ".." in parts:
        return "it has a '..' component"
    if not parts:
        return "it is empty"
    if "" in parts:
        return "it has an empty component"
    return None


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
