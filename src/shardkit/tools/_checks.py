"""The per-shard checks behind ``verify``: tar structure and grouping, TFRecord framing.

Each checker reads one decompressed stream to the end (or as far as it can be trusted),
reports every problem it finds through ``report(key, offset, message)`` and returns what
it saw: the samples, with their keys and offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from ..errors import DataError, FormatError, TruncatedShardError
from ..formats.tar import BLOCK, read_exact
from ._tarscan import REGULAR_TYPES, TarScanner

__all__ = ["Report", "Seen", "check_fields", "check_tar", "check_tfrecord"]

Report = Callable[[str | None, int | None, str], None]

_INT_EXTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_DECODED_EXTS = frozenset({"json", "jsn", "txt", "text", "transcript", "npy", *_INT_EXTS})
_KINDS = {0x31: "hard link", 0x32: "symlink", 0x33: "char device", 0x34: "block device"}


@dataclass
class Seen:
    """What a checker saw in a shard: sample keys and offsets, in order."""

    keys: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.keys)


def check_fields(key: str, fields: dict[str, bytes], offset: int | None, report: Report) -> None:
    """Decode each image (Pillow / simplejpeg) and each json, text, int and npy field."""
    from ..codecs import Decoder, image_extension

    for ext, data in fields.items():
        last = ext.rsplit(".", 1)[-1]
        image = image_extension(ext)
        if not image and last not in _DECODED_EXTS:
            continue
        try:
            Decoder("rgb8" if image else "l8")({"__key__": key, ext: data})
        except DataError as exc:
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            report(key, offset, f"field {ext!r} does not decode ({detail})")


# --------------------------------------------------------------------------- tar


class _Grouping:
    """Sample-level checks over the members of a tar stream."""

    def __init__(self, seen: Seen, report: Report, decode: bool) -> None:
        self.seen = seen
        self.report = report
        self.decode = decode
        self.first: dict[str, int] = {}
        self.key: str | None = None
        self.exts: set[str] = set()
        self.fields: dict[str, bytes] = {}

    def scan(self, scanner: TarScanner) -> None:
        """Go through the members (the hot loop: kept flat on purpose)."""
        sizes, offsets = self.seen.sizes, self.seen.offsets
        for member in scanner:
            name, size, start = member.name, member.size, member.start
            end = start + len(member.header) + size + (-size % BLOCK)
            slash = name.rfind("/") + 1
            dot = name.find(".", slash)
            if member.typeflag not in REGULAR_TYPES or dot <= slash:
                self.odd_member(name, member.typeflag, start)
                continue
            key = name[:dot]
            ext = name[dot + 1 :].lower()
            if key != self.key:
                self.new_sample(key, start)
            sizes[-1] = end - offsets[-1]
            if ext in self.exts:
                self.report(key, start, f"duplicate extension {ext!r} in sample")
                continue
            self.exts.add(ext)
            if self.decode:
                self.fields[ext] = scanner.read_data()

    def new_sample(self, key: str, offset: int) -> None:
        self.close()
        if key in self.first:
            self.report(
                key,
                offset,
                f"key split across non-adjacent members (first seen at offset "
                f"{self.first[key]}): readers see two samples",
            )
        else:
            self.first[key] = offset
        self.key, self.exts = key, set()
        self.seen.keys.append(key)
        self.seen.offsets.append(offset)
        self.seen.sizes.append(0)

    def odd_member(self, name: str, typeflag: int, offset: int) -> None:
        """Report a member readers reject; directories and ``__meta__`` members pass."""
        if typeflag not in REGULAR_TYPES:
            if typeflag != 0x35:
                kind = _KINDS.get(typeflag, f"type {chr(typeflag)!r}")
                message = f"non-regular member {name!r} ({kind}): readers reject it"
                self.report(None, offset, message)
        elif "/" in name or not (name.startswith("__") and name.endswith("__")):
            self.report(None, offset, f"member {name!r} has no key.extension form")

    def close(self) -> None:
        if self.fields and self.key is not None:
            check_fields(self.key, self.fields, self.seen.offsets[-1], self.report)
        self.fields = {}


def check_tar(scanner: TarScanner, report: Report, *, decode: bool = False) -> Seen:
    """Check a tar stream: headers, truncation, grouping, end marker (and decode fields)."""
    seen = Seen()
    group = _Grouping(seen, report, decode)
    while True:
        try:
            group.scan(scanner)
            break
        except TruncatedShardError as exc:
            report(group.key, exc.offset, f"truncated: {exc.message}")
            group.close()
            return seen
        except FormatError as exc:
            start = scanner.resync()
            where = f"next header at offset {start}" if start is not None else "none after it"
            report(None, exc.offset, f"{exc.message}; {where}")
            if start is None:
                group.close()
                return seen
    group.close()
    if scanner.end_blocks == 0:
        report(None, scanner.offset, "no end-of-archive blocks: truncated at a member boundary?")
    elif scanner.end_blocks == 1:
        report(None, scanner.offset, "only one of the two end-of-archive blocks")
    return seen


# --------------------------------------------------------------------------- TFRecord

_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


def check_tfrecord(
    stream: BinaryIO, report: Report, *, url: str, decode: bool = False
) -> tuple[Seen, int]:
    """Check TFRecord framing, both CRCs and each Example; returns (seen, bytes read).

    A bad data CRC or a malformed Example is reported and skipped (the length was good);
    a bad length CRC or a truncated record ends the check (nothing after it is trusted).
    """
    from ..formats.example import decode_example
    from ..formats.tfrecord import MAX_RECORD_LENGTH, RECORD_OVERHEAD, masked_crc32c

    seen = Seen()
    first: dict[str, int] = {}
    offset = 0
    while header := read_exact(stream, 12):
        if len(header) < 12:
            report(None, offset, "truncated: stream ends inside a record header")
            break
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc or length > MAX_RECORD_LENGTH:
            report(None, offset, "length CRC mismatch in record header: cannot go on")
            break
        data = read_exact(stream, length)
        footer = read_exact(stream, 4) if len(data) == length else b""
        if len(footer) < 4:
            report(None, offset, f"truncated: stream ends inside a record of {length} bytes")
            break
        key = f"{len(seen.keys):08d}"
        if masked_crc32c(data) != _U32.unpack(footer)[0]:
            report(None, offset, f"data CRC mismatch in a record of {length} bytes")
        else:
            try:
                features = decode_example(data, url=url, offset=offset)
            except FormatError as exc:
                report(None, offset, exc.message)
            else:
                key = _example_key(features, key)
                _check_example(key, features, offset, first, report, decode)
        seen.keys.append(key)
        seen.offsets.append(offset)
        seen.sizes.append(length + RECORD_OVERHEAD)
        offset += length + RECORD_OVERHEAD
    return seen, offset


def _example_key(features: dict[str, list[bytes] | list[int] | list[float]], default: str) -> str:
    values = features.get("__key__")
    if values and isinstance(values[0], bytes):
        return values[0].decode("utf-8", "replace")
    return default


def _check_example(
    key: str,
    features: dict[str, list[bytes] | list[int] | list[float]],
    offset: int,
    first: dict[str, int],
    report: Report,
    decode: bool,
) -> None:
    if key in first:
        report(key, offset, f"duplicate key (first at offset {first[key]})")
    else:
        first[key] = offset
    if decode:
        fields = {
            name: values[0]
            for name, values in features.items()
            if name != "__key__" and len(values) == 1 and isinstance(values[0], bytes)
        }
        check_fields(key, fields, offset, report)
