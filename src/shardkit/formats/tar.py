"""WebDataset tar shards: a streaming reader and a byte-reproducible writer.

The rules are webdataset's:

* A member name splits into key and extension at the FIRST dot of its last path
  component: ``a/b.c.d.jpg`` is key ``a/b``, extension ``c.d.jpg``.
* A sample is a run of consecutive members with the same key. Extensions are lower-cased
  on read. Read samples carry ``__key__`` and ``__url__``.
* Directory members and webdataset's ``__meta__`` members at the archive root are skipped;
  other non-regular members (links, devices, fifos), names without a key and duplicate
  extensions within a sample are *data errors*, passed to the ``handler`` policy.

These rules are written once: :class:`Grouping` applies them for the sample reader and
for every tool (``cat``, ``split``, ``verify``, ``stats``), over the one member parser,
:class:`TarScanner` (:mod:`shardkit.formats._tarparse`), which the tools use for their
extra powers (raw member bytes, resync after garbage) and the reader without read-ahead.
The parser only reads (``read``/``readinto``): no seeking, so pipes and HTTP bodies work.
It understands ustar, GNU (long names, base-256 sizes) and PAX headers, so it reads what
GNU tar, Python's tarfile and webdataset write.

Bytes already in memory (a memory-mapped shard, an index span read on its own) are read
by :func:`buffer_samples` and :func:`span_sample`: plain ustar members
(:func:`~shardkit.formats._tarparse.plain_header`, the stream's own fast rule) are walked
and grouped directly, by the same rules (:func:`split_name`, extensions lower-cased, none
twice); at the first member that is anything else, or that :class:`Grouping` would
report or skip, the scanner takes over over the same buffer
(:meth:`TarScanner.over_buffer`), so every outcome is the stream's.

Untrusted archives are safe to read: every malformed input ends in a
:class:`~shardkit.errors.FormatError`; a member is read whole only up to
``max_member_size`` (refused from its header before anything is read), and in pieces, so
a size that lies allocates nothing; the reader never touches the file system. Member
names come back exactly as stored (``../x``, ``/etc/x``): code that turns them into paths
uses :func:`safe_member_path`. The limits are :mod:`shardkit.formats.limits`.

The writer emits plain ustar: one 512-byte header per member (a GNU long-name header only
for names over 255 bytes), fixed mtime, owner and mode, members in the sample's order. The
same samples always give the same bytes. It refuses (:class:`EncodeError`) what the reader
would refuse: a member over the member limit, a name over the name limit, extensions equal
once lower-cased, the same key twice in a row (:func:`check_key_order`, which every writer
calls).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, NamedTuple

from ..errors import EncodeError, FormatError, TruncatedShardError
from ..handlers import Handler, reraise
from ._io import read_exact
from ._tarparse import (
    BLOCK,
    DIRECTORY,
    REGULAR_TYPES,
    Buffer,
    RawMember,
    TarScanner,
    member_kind,
    plain_header,
    plain_members,
)
from .limits import MAX_MEMBER_SIZE, MAX_NAME_BYTES

__all__ = [
    "tar_chunks",
    "BLOCK",
    "Buffer",
    "END_OF_ARCHIVE",
    "Grouping",
    "RawMember",
    "TarMember",
    "TarScanner",
    "TarWriter",
    "buffer_samples",
    "check_key_order",
    "encode_sample",
    "iter_members",
    "iter_samples",
    "read_exact",
    "safe_member_path",
    "span_sample",
    "split_name",
]

END_OF_ARCHIVE = bytes(2 * BLOCK)
_ZERO_BLOCK = bytes(BLOCK)
SAME_KEY = "the same __key__ twice in a row: readers would merge the two samples"


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


def check_key_order(previous: str | None, key: str) -> str:
    """``key``, refused (EncodeError) when it repeats the previous sample's key: readers
    would merge the two samples. Every writer calls this."""
    if key == previous:
        raise EncodeError(SAME_KEY, key=key)
    return key


# --------------------------------------------------------------------------- reading


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
    members = TarScanner(stream, url=url, max_member_size=max_member_size, readahead=False)
    for member in members:
        if member.typeflag in REGULAR_TYPES:
            yield TarMember(member.name, members.read_data(), member.offset)
        elif member.typeflag != DIRECTORY and not handler(_odd_member(member, url)):
            return


def _odd_member(member: RawMember, url: str | None) -> FormatError:
    kind = member_kind(member.typeflag)
    return FormatError(
        f"non-regular member {member.name!r} ({kind})", url=url, offset=member.offset
    )


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
            return None if member.typeflag == DIRECTORY else _odd_member(member, self.url)
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
    max_member_size: int = MAX_MEMBER_SIZE,
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
    max_member_size: int = MAX_MEMBER_SIZE,
    copy: bool = True,
) -> Iterator[dict[str, Any]]:
    """:func:`iter_samples` over tar bytes in memory: ``buffer[start:end]`` (an ``mmap``
    of a local shard, say), through :meth:`TarScanner.over_buffer`, with the same rules,
    limits and errors. ``base`` is the shard offset of ``buffer[0]``. With ``copy=False``
    the fields are memoryviews of ``buffer`` (no copy; they keep it alive) instead of
    ``bytes``."""
    # the arguments are checked now, as the scanner that may take over later checks them
    TarScanner.over_buffer(buffer, start=start, end=end, url=url, max_member_size=max_member_size)
    stop = len(buffer) if end is None else end
    return _buffer_samples(buffer, start, stop, base, url, handler, max_member_size, copy)


def _buffer_samples(
    buffer: Buffer,
    pos: int,
    end: int,
    base: int,
    url: str | None,
    handler: Handler,
    limit: int,
    copy: bool,
) -> Iterator[dict[str, Any]]:
    """Plain members (:func:`plain_header`) grouped as :class:`Grouping` groups them;
    from the first member that is not plain, is cut short, or that the grouping would
    report or skip, the scanner over the buffer takes over, with the same grouping
    state: whatever the shard holds, the outcome is :func:`iter_samples`'s."""
    view = None if copy else memoryview(buffer)
    key: str | None = None
    exts: set[str] = set()
    current: dict[str, Any] | None = None
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
        elif ext in exts:
            break
        else:
            exts.add(ext)
        current[ext] = buffer[data : data + size] if view is None else view[data : data + size]  # type: ignore[index]
        pos = after
    members = TarScanner.over_buffer(
        buffer, start=pos, end=end, base=base, url=url, max_member_size=limit
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
    max_member_size: int = MAX_MEMBER_SIZE,
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
    plain = plain_members(buffer, start, end, max_member_size)
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
        raise
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
    """Refuse a member the reader's limits refuse (see :mod:`shardkit.formats.limits`)."""
    if size > MAX_MEMBER_SIZE:
        raise EncodeError(
            f"field of {size} bytes is over the {MAX_MEMBER_SIZE}-byte member limit "
            "(max_member_size) readers apply",
            key=key,
        )
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
_TEMPLATE = b"%s" + _MID + b"%s" + _TAIL[:12] + b"%06o\x00 " + _TAIL[20:]


def tar_chunks(key: str, fields: Sequence[tuple[str, bytes]]) -> tuple[list[bytes], int]:
    """The tar members of one sample as chunks to write, and their total size.

    Large data goes out as it is (no copy); headers, padding and small fields are joined
    into as few chunks as possible, to keep ``writev`` and hash calls few.
    """
    chunks: list[bytes] = []
    small: list[bytes] = []
    total = 0
    stem = key.encode("utf-8", "surrogateescape") + b"."
    stem_sum = _FIXED_SUM + sum(stem)
    for ext, data in fields:
        suffix = ext.encode("utf-8", "surrogateescape")
        name = stem + suffix
        size = len(data)
        if len(name) > 100 or size > MAX_MEMBER_SIZE:  # the reference checks limits
            small.append(encode_sample({"__key__": key, ext: data}))
            total += len(small[-1])
            continue
        size_field = b"%011o\x00" % size
        checksum = stem_sum + sum(suffix) + sum(size_field)
        small.append(_TEMPLATE % (name.ljust(100, b"\x00"), size_field, checksum))
        if size > _BIG:
            chunks.append(b"".join(small))
            chunks.append(data)
            small = []
        else:
            small.append(data)
        pad = -size % BLOCK
        if pad:
            small.append(_ZEROS[:pad])
        total += BLOCK + size + pad
    if small:
        chunks.append(b"".join(small))
    return chunks, total
