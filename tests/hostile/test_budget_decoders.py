"""Every decoder refuses a header that declares 2^40 of what it allocates (issue 28).

The decoders are found, not listed: every extension of the codecs registry, every image,
audio and video extension, and every parsing function of ``shardkit.formats``. Each needs
a hostile payload here (or a reason it allocates nothing the data declares); a new decoder
fails this test until it has one. Each payload is decoded under an address-space cap: a
decoder that allocates what the header says gets a MemoryError, which fails the test.

And a source scan: no module of ``formats/`` or ``codecs/`` calls a bare inflate or makes
an array from a size without the budget (:mod:`shardkit.budget`).
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.hostile import address_space_cap, header, pax
from test_budget import _mp4, _png_header, flac_claiming

import shardkit.formats
import shardkit.formats.megatron
import shardkit.formats.tfrecord
import shardkit.formats.tokens
from shardkit.codecs import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    VIDEO_EXTENSIONS,
    Decoder,
    VideoSpec,
    default_codecs,
)
from shardkit.errors import ShardkitError

HUGE = 1 << 40
SIDE = 1 << 20  # SIDE x SIDE = 2^40 pixels


def _npy(shape: tuple[int, ...]) -> bytes:
    head = repr({"descr": "|u1", "fortran_order": False, "shape": shape}).encode()
    head += b" " * (-(len(head) + 11) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head + b"\0" * 16


def _npz() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.npy", _npy((HUGE,)))
    return buffer.getvalue()


def _tenbin() -> bytes:
    from shardkit.codecs._tenbin import encode_tenbin

    magic = encode_tenbin(np.zeros(1, np.uint8))[:8]
    return magic + struct.pack("<q", HUGE) + b"\0" * 64


def _bmp() -> bytes:
    return b"BM" + struct.pack("<I4xI", 70, 54) + struct.pack("<Iii", 40, SIDE, SIDE) + bytes(40)


def _tiff() -> bytes:
    entries = [struct.pack("<HHI4s", tag, 4, 1, struct.pack("<I", SIDE)) for tag in (256, 257)]
    return b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 2) + b"".join(entries) + bytes(8)


def _webp() -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + bytes(4) + (SIDE - 1).to_bytes(3, "little") * 2
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def _pnm() -> bytes:
    return b"P6\n%d %d\n255\n" % (SIDE, SIDE) + bytes(16)


#: A field declaring 2^40 of what its decoder allocates, by extension (images: pixels, any
#: other image extension a PNG's, sniffed by content; audio: 2^36 FLAC frames x 8 channels x
#: 4 bytes; npy/npz/tenbin: bytes; msgpack: as many items as its widest array header holds,
#: 2^32 - 1).
_IMAGE_PAYLOADS: dict[str, Callable[[], bytes]] = {
    "png": lambda: _png_header(SIDE, SIDE),
    "apng": lambda: _png_header(SIDE, SIDE),
    "bmp": _bmp,
    "dib": _bmp,
    "tif": _tiff,
    "tiff": _tiff,
    "webp": _webp,
    **dict.fromkeys(("pbm", "pgm", "ppm", "pnm"), _pnm),
}
_FIELD_PAYLOADS: dict[str, Callable[[], bytes]] = {
    "npy": lambda: _npy((HUGE,)),
    "npz": _npz,
    **dict.fromkeys(("ten", "tb", "tenbin"), _tenbin),
    **dict.fromkeys(("mp", "msg", "msgpack"), lambda: b"\xdd" + b"\xff" * 4),
    "cbor": lambda: b"\x9b" + HUGE.to_bytes(8, "big"),
    "pth": _npz,  # torch.load reads a zip: its members' declared sizes are bounded first
}
#: Extensions whose decoder allocates nothing that the data declares, with the reason.
_DECLARES_NOTHING = {
    **dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "id"), "an int's text"),
    **dict.fromkeys(("txt", "text", "transcript"), "the text is its bytes"),
    **dict.fromkeys(("json", "jsn"), "the document is its bytes (bounded by 'document')"),
    **dict.fromkeys(("pyd", "pickle", "pkl"), "refused unless allow_pickle: trusted then"),
}


def _decoders() -> list[str]:
    """Every extension a Decoder decodes: the registry's, the image, audio and video ones."""
    return sorted(
        default_codecs.extensions() | IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS
    )


def test_every_decoder_has_a_hostile_payload_or_a_reason() -> None:
    missing = [
        ext
        for ext in _decoders()
        if ext not in _FIELD_PAYLOADS
        and ext not in _DECLARES_NOTHING
        and ext not in AUDIO_EXTENSIONS | VIDEO_EXTENSIONS
        and ext not in IMAGE_EXTENSIONS
    ]
    assert not missing, f"decoders with no 2^40 payload in this test: {missing}"


def _payload(ext: str) -> tuple[Decoder, bytes]:
    if ext in AUDIO_EXTENSIONS:
        return Decoder(shardkit_audio()), flac_claiming((1 << 36) - 1, channels=8)
    if ext in IMAGE_EXTENSIONS:
        make = _IMAGE_PAYLOADS.get(ext, lambda: _png_header(SIDE, SIDE))  # sniffed by content
        return Decoder("rgb8"), make()
    return Decoder(), _FIELD_PAYLOADS[ext]()


def shardkit_audio() -> Any:
    import shardkit

    return shardkit.audio()


def _refuses(decode: Callable[[], Any]) -> ShardkitError:
    with address_space_cap(512 << 20):
        try:
            decode()
        except ShardkitError as exc:
            return exc
    raise AssertionError("decoded a field that declares 2^40")


@pytest.mark.parametrize(
    "ext", [e for e in _decoders() if e not in _DECLARES_NOTHING and e not in VIDEO_EXTENSIONS]
)
def test_each_decoder_refuses_a_field_declaring_2_to_the_40(ext: str) -> None:
    if ext == "pth":
        pytest.importorskip("torch")
    if ext in AUDIO_EXTENSIONS:
        pytest.importorskip("soundfile")
    if ext in IMAGE_EXTENSIONS:
        pytest.importorskip("PIL")
    decoder, data = _payload(ext)
    error = _refuses(lambda: decoder({"__key__": "k", ext: data}))
    assert "\n" not in str(error)


@pytest.mark.parametrize("ext", sorted(VIDEO_EXTENSIONS))
def test_each_video_decoder_refuses_a_clip_of_2_to_the_40_bytes(ext: str) -> None:
    data = _mp4(16)  # 16x16 frames, a clip of HUGE / 768 of them: 2^40 bytes
    spec = VideoSpec(frames=HUGE // (16 * 16 * 3), start=0.0)
    error = _refuses(lambda: spec(ext, data))
    assert "SHARDKIT_MAX_VIDEO_CLIP" in str(error)


def _tar_member_of_2_to_the_40() -> bytes:
    return pax({"size": b"%d" % HUGE}) + header(b"k.bin", 0)


def _tfrecord_of_2_to_the_40() -> bytes:
    from shardkit.formats.tfrecord import masked_crc32c

    length = struct.pack("<Q", HUGE)
    return length + struct.pack("<I", masked_crc32c(length)) + bytes(16)


def _example_list_of_2_to_the_40() -> bytes:
    def field(tag: int, n: int) -> bytes:
        out = bytearray((tag,))
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        return bytes(out + bytes((n,)))

    return field(0x0A, HUGE) + field(0x0A, HUGE) + field(0x12, HUGE) + field(0x1A, HUGE)


def _megatron_index_of_2_to_the_40() -> bytes:
    """A Megatron .idx header that counts 2^40 sequences and documents, and holds none."""
    from shardkit.formats.megatron import MAGIC

    return MAGIC + struct.pack("<QBQQ", 1, 8, HUGE, HUGE)


#: A hostile input for each parsing function of shardkit.formats, by module.function.
_FORMAT_PAYLOADS: dict[str, Callable[[], Any]] = {
    "tar.iter_samples": lambda: list(
        shardkit.formats.tar.iter_samples(io.BytesIO(_tar_member_of_2_to_the_40()))
    ),
    "tar.buffer_samples": lambda: list(
        shardkit.formats.tar.buffer_samples(_tar_member_of_2_to_the_40())
    ),
    "tar.iter_members": lambda: list(
        shardkit.formats.tar.iter_members(io.BytesIO(_tar_member_of_2_to_the_40()))
    ),
    "tfrecord.iter_records": lambda: list(
        shardkit.formats.tfrecord.iter_records(io.BytesIO(_tfrecord_of_2_to_the_40()))
    ),
    "example.decode_example": lambda: shardkit.formats.example.decode_example(
        _example_list_of_2_to_the_40()
    ),
    "tfrecord.buffer_records": lambda: list(
        shardkit.formats.tfrecord.buffer_records(_tfrecord_of_2_to_the_40())
    ),
    "megatron.parse_index": lambda: shardkit.formats.megatron.parse_index(
        _megatron_index_of_2_to_the_40()
    ),
    "tokens.decode_group": lambda: shardkit.formats.tokens.decode_group(
        {"__key__": "k", "tokens.u16": b"\0\0", "lengths.u32": struct.pack("<I", 2**32 - 1)}
    ),
    "jsondoc.load_json": lambda: shardkit.formats.jsondoc.load_json(
        _Sized(b"[]", HUGE)  # a document whose length says 2^40
    ),
    "manifest.parse_manifest": lambda: shardkit.formats.manifest.parse_manifest(
        _Sized(b"{}", HUGE)
    ),
}
#: Parsing functions that allocate nothing a file declares, with the reason.
_PARSES_NOTHING = {
    "names.decode_name": "a member name: its bytes, bounded by the tar header",
    "tar.read_exact": "reads a size its caller has checked, and no more than the stream holds",
}


def _parsers() -> list[str]:
    found = []
    for info in pkgutil.iter_modules(shardkit.formats.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"shardkit.formats.{info.name}")
        for name in getattr(module, "__all__", []):
            if name.startswith(("read", "iter", "decode", "load", "parse", "buffer")):
                found.append(f"{info.name}.{name}")
    return sorted(found)


class _Sized(bytes):
    """Bytes whose ``len()`` is what a header declared."""

    declared: int

    def __new__(cls, data: bytes, declared: int) -> _Sized:
        self = super().__new__(cls, data)
        self.declared = declared
        return self

    def __len__(self) -> int:
        return self.declared


def test_every_format_parser_has_a_hostile_payload_or_a_reason() -> None:
    missing = [p for p in _parsers() if p not in _FORMAT_PAYLOADS and p not in _PARSES_NOTHING]
    assert not missing, f"parsers with no 2^40 payload in this test: {missing}"


@pytest.mark.parametrize("parser", sorted(_FORMAT_PAYLOADS))
def test_each_format_parser_refuses_a_header_declaring_2_to_the_40(parser: str) -> None:
    error = _refuses(_FORMAT_PAYLOADS[parser])
    assert "\n" not in str(error)


# --------------------------------------------------------------------------- the source scan

_SRC = Path(shardkit.formats.__file__).parent.parent
#: Calls that allocate what their arguments say, or inflate without an output bound.
_ALLOCATING = re.compile(
    r"\b(?:zlib\.decompress|gzip\.decompress|np\.(?:empty|zeros|ones|full|ndarray)|"
    r"numpy\.(?:empty|zeros|ones|full)|bytearray)\((?P<arg>[^)]*)"
)
_LITERAL = re.compile(r"^\s*(?:\d[\d_]*(?:\s*<<\s*\d+)?)?\s*$")


#: Allocations the scan accepts in a file that carries no ``# budget:`` note, with the reason.
_BOUNDED = {
    ("formats/_tarparse.py", "grown = bytearray(min(want, max(self._chunk, 2 * held)))"): (
        "the scanner's read buffer grows to a member whose size the member limit checked"
    ),
}


def _unbudgeted(path: Path) -> list[str]:
    where = str(path.relative_to(_SRC))
    return [
        f"{where}:{line}"
        for line in _unbudgeted_at(path)
        if (where, line.split(": ", 1)[1]) not in _BOUNDED
    ]


def test_no_decoder_allocates_from_a_size_without_the_budget() -> None:
    """formats/ and codecs/ make no array, buffer or inflated bytes from a size that is
    not a literal except through shardkit.budget (budget.empty, budget.allow), or on a
    line that says why the size is bounded (``# budget: ...``)."""
    bad = []
    for folder in ("formats", "codecs"):
        for path in sorted((_SRC / folder).glob("*.py")):
            bad += _unbudgeted(path)
    assert not bad, "allocations outside the budget:\n" + "\n".join(bad)


def test_the_scan_finds_a_bare_allocation(tmp_path: Path) -> None:
    sample = tmp_path / "decoder.py"
    sample.write_text(
        "out = np.empty((frames, h, w), np.uint8)\n"
        "raw = zlib.decompress(data)\n"
        "buf = bytearray(1 << 20)\n"
        "ok = np.empty(frames)  # budget: frames is the caller's, bounded above\n"
    )
    found = [line.split(": ", 1)[1] for line in _unbudgeted_at(sample)]
    assert _bare_allocations_in(sample) == found
    assert found == ["out = np.empty((frames, h, w), np.uint8)", "raw = zlib.decompress(data)"]


def _bare_allocations_in(path: Path) -> list[str]:
    return [line.split(": ", 1)[1] for line in _unbudgeted_at(path)]


def _unbudgeted_at(path: Path) -> list[str]:
    bad = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        code = line.split("#", 1)[0]
        for match in _ALLOCATING.finditer(code):
            if not (_LITERAL.match(match.group("arg")) or "# budget:" in line):
                bad.append(f"{number}: {line.strip()}")
    return bad
