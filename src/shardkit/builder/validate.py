"""Cheap image validation: is this file an image, and is it complete?

``header`` (the default) never decodes pixels: it checks the signature and that the file
ends where its format says it must (JPEG: an EOI marker after the last scan; PNG: the
IEND chunk; GIF: the trailer byte; BMP/WebP: the size in the header; PNM: header + raster
size). That catches zero-byte files, non-images and truncated files, the failures that
otherwise crash training at decode time, for the cost of reading a few bytes at each end.
``full`` also decodes every image with Pillow (catching corrupt data *inside* a complete
file). ``none`` checks nothing.

:func:`check_image` returns the extension to store the bytes under: the file's own when
the content agrees with it, else the one the content shows (a PNG named ``.jpg`` is
stored as ``png``, so decoders that trust the extension are not misled).

:func:`check_fields` checks each file of a folder's sample of several files: images here,
other kinds through :func:`shardkit.codecs.check_field` (audio, video, text, json, npy).
"""

from __future__ import annotations

import io
import re
import struct
import warnings
from collections.abc import Callable, Mapping, Sequence

from .._optional import require
from ..codecs import check_field, image_failures
from ..errors import DataError
from .samples import FOLDER_EXTENSIONS
from .sources import SampleFileError

__all__ = ["check_fields", "check_image", "sniff"]

#: Re-encodes an image field: (bytes, extension) -> (bytes, extension).
Transform = Callable[[bytes, str], tuple[bytes, str]]

_FAMILY = {"jpg": "jpg", "png": "png", "gif": "gif", "bmp": "bmp", "webp": "webp"}
_FAMILY.update(dict.fromkeys(("tif", "tiff"), "tiff"))
_FAMILY.update(dict.fromkeys(("ppm", "pgm", "pbm", "pnm"), "pnm"))
_PNM_EXT = {b"1": "pbm", b"2": "pgm", b"3": "ppm", b"4": "pbm", b"5": "pgm", b"6": "ppm"}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IEND = b"IEND\xaeB`\x82"
_PNM_TOKEN = re.compile(rb"(?:\s|#[^\n\r]*[\n\r])*(\d+)")


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


def check_image(data: bytes, ext: str, mode: str = "header") -> str:
    """Check ``data`` (a file named ``*.ext``; ``ext`` '' when its name says nothing, as a
    URL's may not); returns the extension to store it under.

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
    if mode == "full":
        _decode(data)
    return ext if _FAMILY.get(ext) == _FAMILY[kind] else kind


def check_fields(
    files: Sequence[tuple[str, str, int]],
    loaded: Mapping[str, bytes],
    mode: str = "header",
    transform: Transform | None = None,
) -> list[tuple[str, bytes]]:
    """The fields of a sample of several ``files`` (path, field, size), ``loaded`` by
    field, each checked (``mode`` as :func:`check_image`'s: ``none`` checks nothing) and
    its image fields passed through ``transform``.

    A bad file raises :class:`~.sources.SampleFileError` naming it (the whole sample is
    skipped); a missing extra (``audio``, ``video``) raises
    :class:`~shardkit.errors.MissingDependencyError`."""
    fields = []
    for path, name, _ in files:
        data = loaded[name]
        head, dot, last = name.rpartition(".")
        try:
            if last in FOLDER_EXTENSIONS:
                last = check_image(data, last, mode)
                if transform is not None:
                    data, last = transform(data, last)
                name = f"{head}.{last}" if dot else last
            elif mode != "none":
                check_field(data, name)
        except DataError as exc:
            raise SampleFileError(f"{exc.message}; its sample is skipped", url=path) from exc
        fields.append((name, data))
    names = [name for name, _ in fields]
    if len(set(names)) < len(names):  # an image stored under the format its bytes show
        twice = next(name for name in names if names.count(name) > 1)
        raise DataError(f"two files give the field {twice!r} (by their content)")
    return fields


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
