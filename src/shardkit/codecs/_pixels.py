"""An image's size from its header, read by hand, and the pixel budget applied to it.

:func:`header_size` reads the width and height a JPEG, PNG, GIF, BMP, WebP, TIFF or PNM
header declares, without Pillow and without decoding; :func:`check_pixels` hands their
product to the budget (``image_pixels``), so a build's header validation refuses the
image every reader would refuse, and a decoder refuses it before Pillow allocates.
"""

from __future__ import annotations

import re
import struct

from ..budget import allow
from ..errors import LimitError

__all__ = ["check_pixels", "header_size"]

_PNM = re.compile(rb"P[1-6](?:\s|#[^\n\r]*[\n\r])+(\d+)(?:\s|#[^\n\r]*[\n\r])+(\d+)")
# JPEG start-of-frame markers (C0-CF, less DHT C4, JPG C8 and DAC CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _SOF:
            height, width = struct.unpack_from(">HH", data, pos + 5)
            return width, height
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # no length
            pos += 2
            continue
        pos += 2 + struct.unpack_from(">H", data, pos + 2)[0]
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack_from("<HH", data, 26)
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _tiff(data: bytes) -> tuple[int, int] | None:
    order = "<" if data[:2] == b"II" else ">"
    ifd = struct.unpack_from(order + "I", data, 4)[0]
    count = struct.unpack_from(order + "H", data, ifd)[0]
    found: dict[int, int] = {}
    for i in range(min(count, 4096)):
        tag, kind, _, raw = struct.unpack_from(order + "HHI4s", data, ifd + 2 + 12 * i)
        if tag in (256, 257) and kind in (3, 4):
            found[tag] = struct.unpack_from(order + ("H" if kind == 3 else "I"), raw)[0]
    return (found[256], found[257]) if len(found) == 2 else None


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as the image's header declares them; None where the format is not
    one of these or the header does not read (the decoder's own checks decide then)."""
    try:
        if data[:3] == b"\xff\xd8\xff":
            return _jpeg(data)
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
            return struct.unpack_from(">II", data, 16)  # type: ignore[return-value]
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return struct.unpack_from("<HH", data, 6)  # type: ignore[return-value]
        if data[:2] == b"BM":
            if struct.unpack_from("<I", data, 14)[0] == 12:  # OS/2 BITMAPCOREHEADER
                return struct.unpack_from("<HH", data, 18)  # type: ignore[return-value]
            width, height = struct.unpack_from("<ii", data, 18)
            return abs(width), abs(height)  # a negative height is a top-down bitmap
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data[:4] in (b"II*\0", b"MM\0*"):
            return _tiff(data)
        match = _PNM.match(data, 0)
        if match:
            return int(match.group(1)), int(match.group(2))
    except struct.error:
        return None
    return None


def check_pixels(data: bytes, *, error: type[LimitError] = LimitError) -> None:
    """``error`` unless the image's declared width x height is within the budget's
    ``image_pixels`` limit (an image whose header does not read passes: its decoder decides)."""
    size = header_size(data)
    if size is not None:
        width, height = size
        allow("image_pixels", width * height, what=f"a {width}x{height} image", error=error)
