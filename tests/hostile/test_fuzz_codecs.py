"""Fuzzing every decoder: each field decodes or raises DecodeError (UnsafeDataError for pickle)."""

from __future__ import annotations

import gzip
import io
import random
import time
from typing import Any

import numpy as np
import PIL.Image
import pytest
from helpers.hostile import outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.codecs import IMAGE_SPECS, Decoder, encode_sample
from shardkit.errors import DecodeError, UnsafeDataError

VALUES: dict[str, Any] = {
    "cls": 12,
    "txt": "héllo",
    "json": {"a": [1, 2.5, None, "x"], "b": {"c": True}},
    "npy": np.arange(12, dtype="<i2").reshape(3, 4),
    "npz": {"a": np.ones(3, dtype="<f4"), "b": np.arange(4)},
    "ten": [np.ones((2, 3), dtype=np.float32), np.arange(5)],
    "msgpack": {"a": [1, b"raw", 2.5]},
    "cbor": {"a": [1, b"raw", 2.5]},
    "pyd": {"x": (1, 2)},
    "pth": {"w": [1.0, 2.0]},
}
ENCODED: dict[str, bytes] = encode_sample({"__key__": "k", **VALUES})
ENCODED["json.gz"] = gzip.compress(ENCODED["json"], mtime=0)
FIELDS = sorted(k for k in ENCODED if not k.startswith("__"))
DECODER = Decoder()


def _decode(ext: str, data: bytes, decoder: Decoder = DECODER) -> Any:
    return decoder({"__key__": "k", "__url__": "s.tar", ext: data})[ext]


def _check(ext: str, data: bytes, decoder: Decoder = DECODER) -> None:
    result = outcome(lambda: _decode(ext, data, decoder))
    if isinstance(result, (DecodeError, UnsafeDataError)):
        assert (result.key, result.url) == ("k", "s.tar")
    else:
        assert not isinstance(result, Exception)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ext=st.sampled_from(FIELDS), blob=st.binary(max_size=200))
def test_random_bytes_in_every_field(ext: str, blob: bytes) -> None:
    _check(ext, blob)
    _check(ext, blob, Decoder(allow_pickle=True))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ext=st.sampled_from(FIELDS), data=st.data())
def test_mutated_encodings_of_every_field(ext: str, data: st.DataObject) -> None:
    mutated = bytearray(ENCODED[ext])
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(
            st.sampled_from([0, 0xFF, 0x7F, 0x80, data.draw(st.integers(0, 255))])
        )
    _check(ext, bytes(mutated))
    _check(ext, bytes(mutated[: data.draw(st.integers(0, len(mutated)))]))


def test_every_truncation_of_every_field() -> None:
    for ext in FIELDS:
        data = ENCODED[ext]
        for cut in range(0, len(data), max(1, len(data) // 150)):
            _check(ext, data[:cut])


# --------------------------------------------------------------------------- images


def _images() -> dict[str, bytes]:
    pixels = (np.arange(20 * 28 * 3) % 251).astype(np.uint8).reshape(20, 28, 3)
    image = PIL.Image.fromarray(pixels)
    formats = {"png": "PNG", "jpg": "JPEG", "gif": "GIF", "bmp": "BMP", "tiff": "TIFF"}
    formats |= {"webp": "WEBP", "ppm": "PPM", "tga": "TGA", "ico": "ICO", "pcx": "PCX"}
    out = {}
    for ext, fmt in formats.items():
        buffer = io.BytesIO()
        image.save(buffer, format=fmt)
        out[ext] = buffer.getvalue()
    return out


IMAGES = _images()


def _corruptions(data: bytes, rng: random.Random) -> list[bytes]:
    cuts = [data[: rng.randrange(len(data))] for _ in range(6)]
    flips = []
    for _ in range(10):
        bad = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            pos = rng.randrange(min(len(bad), rng.choice([40, 200, len(bad)])))
            bad[pos] = rng.choice([0, 0xFF, rng.randrange(256)])
        flips.append(bytes(bad))
    return [*cuts, *flips, rng.randbytes(rng.randrange(64)), b""]


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("spec", IMAGE_SPECS)
def test_every_image_spec_over_corrupt_images(spec: str) -> None:
    rng = random.Random(spec)
    decoder = Decoder(spec)
    for ext, data in IMAGES.items():
        assert outcome(lambda e=ext, d=data: _decode(e, d, decoder)) is not None  # type: ignore[misc]
        for bad in _corruptions(data, rng):
            _check(ext, bad, decoder)


# --------------------------------------------------------------------------- gunzip


def _gunzip(data: bytes, limit: int) -> Any:
    """A ``.gz`` field of an extension with no decoder: the Decoder only gunzips it."""
    return _decode("bin.gz", data, Decoder(max_gunzip_size=limit))


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=3000), members=st.integers(1, 3), limit=st.integers(0, 5000))
def test_bounded_gunzip_matches_gzip_within_its_limit(
    payload: bytes, members: int, limit: int
) -> None:
    data = b"".join(gzip.compress(payload, mtime=0) for _ in range(members))
    expected = gzip.decompress(data)
    if len(expected) <= limit:
        assert _gunzip(data, limit) == expected
    else:
        with pytest.raises(DecodeError, match="max_gunzip_size"):
            _gunzip(data, limit)


@settings(max_examples=300, deadline=None)
@given(blob=st.binary(max_size=300))
def test_bounded_gunzip_of_garbage(blob: bytes) -> None:
    data = gzip.compress(blob, mtime=0)
    for bad in (blob, data[: len(blob) % (len(data) + 1)], data[:10] + blob):
        result = outcome(lambda b=bad: _gunzip(b, 1 << 20))  # type: ignore[misc]
        assert isinstance(result, (bytes, DecodeError))
        if isinstance(result, bytes):
            assert result == gzip.decompress(bad)


# --------------------------------------------------------------------------- deep structures

DEEP = {
    "json": b"[" * 1_000_000,
    "msgpack": b"\x91" * 1_000_000 + b"\x00",
    "cbor": b"\x81" * 1_000_000 + b"\x00",
    "ten": b"~TenBin~" + (1 << 62).to_bytes(8, "little"),
    "npy": b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 65535,
}


@pytest.mark.parametrize("ext", sorted(DEEP))
def test_deep_or_absurd_structures_fail_fast(ext: str) -> None:
    start = time.monotonic()
    with pytest.raises(DecodeError):
        _decode(ext, DEEP[ext])
    assert time.monotonic() - start < 2


def test_npy_header_claiming_more_than_it_holds_is_refused_before_allocating() -> None:
    # Bug found: numpy allocates the array its header describes before reading the data,
    # so 100 bytes claiming 8 TB raised MemoryError (or took gigabytes).
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
    data = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + header.ljust(117) + b"\n"
    with pytest.raises(DecodeError, match="claims 8000000000000 bytes") as info:
        _decode("npy", data + bytes(100))
    assert not isinstance(info.value.__cause__, MemoryError)
