"""Cheap image validation: is this file an image, and is it complete?

``header`` (the default) never decodes pixels: it checks the signature and that the file
ends where its format says it must (JPEG: an EOI marker after the last scan; PNG: the
IEND chunk; GIF: the trailer byte; BMP/WebP: the size in the header; PNM: header + raster
size). That catches zero-byte files, non-images and truncated files, the failures that
otherwise crash training at decode time, for the cost of reading a few bytes at each end.
``full`` also decodes every image with Pillow (catching corrupt data *inside* a complete
file). ``none`` checks nothing. Both ``header`` and ``full`` refuse an image whose header
declares more pixels than the readers decode (the budget's ``image_pixels``).

:func:`check_image` returns the extension to store the bytes under: the file's own when
the content agrees with it, else the one the content shows (a PNG named ``.jpg`` is
stored as ``png``, so decoders that trust the extension are not misled).

:func:`check_fields` checks the fields of a sample of several fields, a folder's sample of
several files and a list's fields alike: images here, other kinds through
:func:`shardkit.codecs.check_field` (audio, video, text, json, npy).
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .._optional import require
from ..codecs import IMAGE_EXTENSIONS, check_field, check_pixels, header_size, image_failures
from ..errors import DataError
from ._sources import SampleFileError

__all__ = ["Blame", "check_fields", "check_image", "check_one", "sniff", "sniff_media"]

#: Re-encodes an image field: (bytes, extension) -> (bytes, extension).
Transform = Callable[[bytes, str], tuple[bytes, str]]

_FAMILY = {"jpg": "jpg", "png": "png", "gif": "gif", "bmp": "bmp", "webp": "webp"}
_FAMILY.update(dict.fromkeys(("tif", "tiff"), "tiff"))
_FAMILY.update(dict.fromkeys(("ppm", "pgm", "pbm", "pnm"), "pnm"))
_PNM_EXT = {b"1": "pbm", b"2": "pgm", b"3": "ppm", b"4": "pbm", b"5": "pgm", b"6": "ppm"}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IEND = b"IEND\xaeB`\x82"
_PNM_TOKEN = re.compile(rb"(?:\s|#[^\n\r]*[\n\r])*(\d+)")
#: Field extensions checked as images (a folder's image extensions are among them).
_IMAGE_NAMES = IMAGE_EXTENSIONS | {"jpeg", "tif"}


def sniff(data: bytes) -> str | None:
    """The image format the bytes start with, as an extension, or None."""
    head = data[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if head.startswith(_PNG_SIGNATURE):
        return "png"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith(b"BM"):
        return "bmp"
    if head.startswith((b"II*\0", b"MM\0*")):
        return "tiff"
    if len(head) > 2 and head[0:1] == b"P" and head[1:2] in _PNM_EXT and head[2:3].isspace():
        return _PNM_EXT[head[1:2]]
    return None


def check_image(
    data: bytes, ext: str, mode: str = "header", *, max_pixels: int | None = None
) -> str:
    """Check ``data`` (a file named ``*.ext``; ``ext`` '' when its name says nothing, as a
    URL's may not); returns the extension to store it under. ``max_pixels``: the budget's
    ``image_pixels`` limit, when the caller looked it up (a worker, once per task).

    Raises :class:`~shardkit.errors.DataError` whose message is the reason to skip it.
    """
    if mode == "none" and ext:
        return ext
    if not data:
        raise DataError("empty file")
    kind = sniff(data)
    if kind is None:
        what = f"is not {ext.upper()} nor another known format" if ext else "is no known format"
        raise DataError(f"not an image (content {what})")
    if mode == "none":  # a URL whose name gives no extension: the bytes give it
        return kind
    _CHECKS[_FAMILY[kind]](data)
    size = header_size(data) if max_pixels is not None else (0, 0)
    if max_pixels is None or (size is not None and not 0 <= size[0] * size[1] <= max_pixels):
        check_pixels(data)  # the pixel limit every reader applies (and its error)
    if mode == "full":
        _decode(data)
    return ext if _FAMILY.get(ext) == _FAMILY[kind] else kind


class Blame(NamedTuple):
    """What a bad field's error names: ``file``, the folder's file it came from (a
    :class:`~.sources.SampleFileError` naming it: its whole sample is skipped), else
    ``field``, a list's field (``field 'x': ...``)."""

    file: str = ""
    field: str = ""

    def error(self, exc: DataError) -> DataError:
        """``exc`` (a bad field's reason) as the error of its sample."""
        if self.file:
            return SampleFileError(f"{exc.message}; its sample is skipped", url=self.file)
        return DataError(f"field {self.field!r}: {exc.message}")


def check_fields(
    fields: Iterable[tuple[str, bytes, Blame]],
    mode: str = "header",
    transform: Transform | None = None,
) -> list[tuple[str, bytes]]:
    """The (name, bytes) of a sample's ``fields`` (name, bytes, what a bad one names), in
    order, each checked by :func:`check_one` (images re-encoded by ``transform``).

    Every sample of several fields goes through here: a folder's sample of several files
    and a list's fields (``--field``, a parquet's bytes columns). A bad field raises what
    its :class:`Blame` makes (the whole sample is skipped); two fields stored under one
    name (an image is stored under the format its bytes show) raise
    :class:`~shardkit.errors.DataError`; a missing extra (``audio``, ``video``) raises
    :class:`~shardkit.errors.MissingDependencyError`."""
    out: list[tuple[str, bytes]] = []
    named = False  # a list's fields: the user names them
    for name, data, blame in fields:
        try:
            out.append(check_one(name, data, mode, transform))
        except DataError as exc:
            raise blame.error(exc) from exc
        named = named or not blame.file
    names = [name for name, _ in out]
    if len(set(names)) < len(names):
        twice = next(name for name in names if names.count(name) > 1)
        hint = ": name them with --field" if named else ""
        raise DataError(f"two fields are stored as {twice!r} (an image by its content){hint}")
    return out


def check_one(
    name: str, data: bytes, mode: str = "header", transform: Transform | None = None
) -> tuple[str, bytes]:
    """One field named ``name`` (``*.ext``; '' when only its bytes tell its kind), checked
    by its kind (``mode`` as :func:`check_image`'s: ``none`` checks nothing): an image by
    :func:`check_image`, stored under the extension its content shows and passed through
    ``transform``; any other kind by :func:`shardkit.codecs.check_field`. Returns the
    (name, bytes) to store."""
    if not name:
        name = sniff_media(data) or ""
    head, dot, last = name.rpartition(".")
    if name and last.lower() not in _IMAGE_NAMES:
        if mode != "none":
            check_field(data, name)
        return name, data
    last = check_image(data, last.lower(), mode)
    if transform is not None:
        data, last = transform(data, last)
    return head + dot + last, data


def sniff_media(data: bytes) -> str | None:
    """The media format ``data`` starts with, as an extension, or None."""
    head = data[:64]
    if image := sniff(head):
        return image
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "wav"
    if head.startswith(b"OggS"):
        return "opus" if b"OpusHead" in head else "ogg"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm" if b"webm" in head else "mkv"
    return None


def _end(data: bytes) -> int:
    """Length of ``data`` without trailing zero bytes (padding some writers add)."""
    end = len(data)
    while end and data[end - 1] == 0:
        end -= 1
    return end


def _check_jpeg(data: bytes) -> None:
    end = _end(data)
    if data[end - 2 : end] == b"\xff\xd9":
        return
    # Trailing bytes after EOI are harmless; a missing EOI after the last scan is not.
    # Entropy-coded data never holds FF D9 or FF DA (FF is stuffed), so rfind is exact.
    last_scan = data.rfind(b"\xff\xda")
    if last_scan < 0:
        raise DataError("truncated JPEG (no image data)")
    if data.find(b"\xff\xd9", last_scan) < 0:
        raise DataError("truncated JPEG (no EOI marker after the last scan)")


def _check_png(data: bytes) -> None:
    if data[12:16] != b"IHDR":
        raise DataError("corrupt PNG (no IHDR chunk)")
    end = _end(data)
    if data[end - 8 : end] == _IEND or data.rfind(_IEND, 33) >= 0:
        return
    raise DataError("truncated PNG (no IEND chunk)")


def _check_gif(data: bytes) -> None:
    end = _end(data)
    if data[end - 1 : end] != b";":
        raise DataError("truncated GIF (no trailer byte)")


def _check_bmp(data: bytes) -> None:
    if len(data) < 26:
        raise DataError("truncated BMP (header incomplete)")
    declared, offset = struct.unpack_from("<I4xI", data, 2)
    if declared > len(data) or offset >= len(data):
        raise DataError(f"truncated BMP ({len(data)} of {max(declared, offset)} bytes)")


def _check_webp(data: bytes) -> None:
    declared = struct.unpack_from("<I", data, 4)[0] + 8
    if declared > len(data):
        raise DataError(f"truncated WebP ({len(data)} of {declared} bytes)")


def _check_tiff(data: bytes) -> None:
    """The first directory's strips (or tiles) must lie inside the file."""
    order = "<" if data[:2] == b"II" else ">"
    try:
        ifd = struct.unpack_from(order + "I", data, 4)[0]
        count = struct.unpack_from(order + "H", data, ifd)[0]
        fields: dict[int, list[int]] = {}
        for i in range(count):
            tag, kind, n, raw = struct.unpack_from(order + "HHI4s", data, ifd + 2 + 12 * i)
            if tag in _TIFF_DATA and kind in _TIFF_TYPES:
                fields[tag] = _tiff_values(data, order, kind, n, raw)
    except struct.error:
        raise DataError("truncated TIFF (directory past the end)") from None
    for offsets, sizes in ((273, 279), (324, 325)):
        if offsets in fields and sizes in fields:
            pairs = zip(fields[offsets], fields[sizes], strict=False)
            end = max((o + n for o, n in pairs), default=0)
            if end > len(data):
                raise DataError(f"truncated TIFF ({len(data)} of {end} bytes)")


_TIFF_DATA = frozenset({273, 279, 324, 325})  # StripOffsets/ByteCounts, TileOffsets/ByteCounts
_TIFF_TYPES = {3: "H", 4: "I"}  # SHORT, LONG


def _tiff_values(data: bytes, order: str, kind: int, n: int, raw: bytes) -> list[int]:
    code = _TIFF_TYPES[kind]
    fmt = f"{order}{n}{code}"
    if struct.calcsize(fmt) <= 4:
        return list(struct.unpack_from(fmt, raw))
    return list(struct.unpack_from(fmt, data, struct.unpack_from(order + "I", raw)[0]))


def _check_pnm(data: bytes) -> None:
    magic = data[1:2]
    if magic in b"123":
        return  # ASCII rasters: no size to check without parsing every number
    fields = 2 if magic == b"4" else 3
    pos, values = 2, []
    for _ in range(fields):
        match = _PNM_TOKEN.match(data, pos)
        if match is None:
            raise DataError("corrupt PNM header")
        values.append(int(match.group(1)))
        pos = match.end()
    pos += 1  # the single whitespace byte before the raster
    width, height = values[0], values[1]
    if magic == b"4":
        raster = (width + 7) // 8 * height
    else:
        depth = 1 if values[2] < 256 else 2
        raster = width * height * depth * (3 if magic == b"6" else 1)
    if len(data) < pos + raster:
        raise DataError(f"truncated PNM ({len(data)} of {pos + raster} bytes)")


_CHECKS: dict[str, Callable[[bytes], None]] = {
    "jpg": _check_jpeg,
    "png": _check_png,
    "gif": _check_gif,
    "bmp": _check_bmp,
    "webp": _check_webp,
    "tiff": _check_tiff,
    "pnm": _check_pnm,
}


def _decode(data: bytes) -> None:
    require("PIL.Image", "validate='full'")
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                image.load()
    except image_failures() as exc:
        raise DataError(f"cannot decode: {exc}") from exc
