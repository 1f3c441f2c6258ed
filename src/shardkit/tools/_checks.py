"""The per-shard checks behind ``verify``: tar structure and grouping, TFRecord framing.

Each checker reads one decompressed stream to the end (or as far as it can be trusted),
reports every problem it finds through ``report(key, offset, message)`` and returns what
it saw: the samples, with their keys and offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from ..codecs import AUDIO_EXTENSIONS, VIDEO_EXTENSIONS
from ..errors import DataError, FormatError, TruncatedShardError
from ..formats.tar import Grouping, TarScanner

__all__ = ["Report", "Seen", "check_fields", "check_tar", "check_tfrecord"]

Report = Callable[[str | None, int | None, str], None]

_INT_EXTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_DECODED_EXTS = frozenset({"json", "jsn", "txt", "text", "transcript", "npy", *_INT_EXTS})


@dataclass
class Seen:
    """What a checker saw in a shard: sample keys and offsets, in order; ``stopped``
    when a header it could not go past (over a limit, a bad length CRC) ended the check,
    so that nothing more of the stream is read (a gzip bomb is not inflated)."""

    keys: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    stopped: bool = False

    @property
    def samples(self) -> int:
        return len(self.keys)


def check_fields(key: str, fields: dict[str, bytes], offset: int | None, report: Report) -> None:
    """Decode each image (Pillow / simplejpeg) and each json, text, int and npy field;
    check each audio and video field (:func:`shardkit.codecs.check_field`: whole, not
    cut short) and decode it: all of an audio stream (soundfile), a video's first frame
    (PyAV)."""
    from ..codecs import Decoder, image_extension

    for ext, data in fields.items():
        last = ext.rsplit(".", 1)[-1].lower()
        image = image_extension(ext)
        media = last in AUDIO_EXTENSIONS or last in VIDEO_EXTENSIONS
        try:
            if media:
                _decode_media(last, data)
            elif image or last in _DECODED_EXTS:
                Decoder("rgb8" if image else "l8")({"__key__": key, ext: data})
        except DataError as exc:
            cause = exc.__cause__  # the codecs' media messages are the reason already
            detail = exc.message if media or cause is None else f"{type(cause).__name__}: {cause}"
            report(key, offset, f"field {ext!r} does not decode ({detail})")


def _decode_media(ext: str, data: bytes) -> None:
    from ..codecs import audio, check_field, video

    check_field(data, ext)
    if ext in AUDIO_EXTENSIONS:
        audio()(ext, data)
    else:
        video(1, start=0.0)(ext, data)


# --------------------------------------------------------------------------- tar


class _Samples:
    """Sample-level checks on top of the reader's grouping: every problem is reported,
    a key whose members are not adjacent too; fields are decoded when asked."""

    def __init__(self, scanner: TarScanner, report: Report, decode: bool) -> None:
        self.scanner = scanner
        self.seen = Seen()
        self.report = report
        self.decode = decode
        self.first: dict[str, int] = {}
        self.key: str | None = None
        self.fields: dict[str, bytes] = {}
        self.grouping = Grouping(scanner.url, self._problem)

    def _problem(self, exc: Exception) -> bool:
        if not isinstance(exc, FormatError):  # pragma: no cover - the grouping only sends these
            raise exc
        message = exc.message
        if message.startswith("non-regular member"):
            message += ": readers reject it"
        self.report(exc.key, exc.offset, message)
        return True

    def scan(self) -> None:
        """Go through the members (the hot loop: kept flat on purpose)."""
        sizes, offsets = self.seen.sizes, self.seen.offsets
        read = self.scanner.read_data if self.decode else None
        for member, key, ext, new in self.grouping(self.scanner):
            if new:
                self.new_sample(key, member.start)
            size = member.size
            sizes[-1] = member.start + len(member.header) + size + (-size % 512) - offsets[-1]
            if read is not None:
                self.fields[ext] = read()

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
        self.key = key
        self.seen.keys.append(key)
        self.seen.offsets.append(offset)
        self.seen.sizes.append(0)

    def close(self) -> None:
        if self.fields and self.key is not None:
            check_fields(self.key, self.fields, self.seen.offsets[-1], self.report)
        self.fields = {}


def check_tar(scanner: TarScanner, report: Report, *, decode: bool = False) -> Seen:
    """Check a tar stream: headers, limits, truncation, grouping, end marker (and decode
    fields). A member over the size limit ends the check, as it ends reading (a gzip bomb
    is not inflated); after a bad header the check goes on at the next valid one."""
    group = _Samples(scanner, report, decode)
    while True:
        try:
            group.scan()
            break
        except TruncatedShardError as exc:
            report(exc.key or group.key, exc.offset, f"truncated: {exc.message}")
            group.close()
            return group.seen
        except FormatError as exc:
            if scanner.in_member:  # a sound header over a limit: readers stop there too
                report(exc.key, exc.offset, f"{exc.message}; cannot go on")
                group.seen.stopped = True
                group.close()
                return group.seen
            start = scanner.resync()
            where = f"next header at offset {start}" if start is not None else "none after it"
            report(None, exc.offset, f"{exc.message}; {where}")
            if start is None:
                group.close()
                return group.seen
    group.close()
    if scanner.end_blocks == 0:
        report(None, scanner.offset, "no end-of-archive blocks: truncated at a member boundary?")
    elif scanner.end_blocks == 1:
        report(None, scanner.offset, "only one of the two end-of-archive blocks")
    return group.seen


# --------------------------------------------------------------------------- TFRecord


def check_tfrecord(
    stream: BinaryIO, report: Report, *, url: str, decode: bool = False
) -> tuple[Seen, int]:
    """Check TFRecord framing, both CRCs and each Example; returns (seen, bytes read).

    The framing is the reader's (:func:`shardkit.formats.tfrecord.iter_records`, with its
    limits). A bad data CRC or a malformed Example is reported and skipped (the length was
    good); a bad length CRC, a length over the limit or a truncated record ends the check
    (nothing after it is trusted).
    """
    from ..formats.example import decode_example
    from ..formats.tfrecord import RECORD_OVERHEAD, iter_records

    seen = Seen()
    first: dict[str, int] = {}
    bad: list[int] = []

    def bad_data(exc: FormatError) -> None:
        report(None, exc.offset, exc.message)
        bad.append(exc.offset or 0)

    try:
        for offset, data in iter_records(stream, url=url, on_bad_data=bad_data):
            key = f"{len(seen.keys):08d}"
            if not bad or bad[-1] != offset:
                try:
                    features = decode_example(data, url=url, offset=offset)
                except FormatError as exc:
                    report(None, offset, exc.message)
                else:
                    key = _example_key(features, key)
                    _check_example(key, features, offset, first, report, decode)
            seen.keys.append(key)
            seen.offsets.append(offset)
            seen.sizes.append(len(data) + RECORD_OVERHEAD)
    except TruncatedShardError as exc:
        report(None, exc.offset, f"truncated: {exc.message}")
        return seen, exc.offset or 0
    except FormatError as exc:  # a bad length CRC, a length over the limit
        report(None, exc.offset, f"{exc.message}: cannot go on")
        seen.stopped = True
        return seen, exc.offset or 0
    return seen, (seen.offsets[-1] + seen.sizes[-1]) if seen.keys else 0


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
