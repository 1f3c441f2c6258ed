"""Tests for shardkit.codecs: encoders, decoders, image specs, and webdataset interop."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import subprocess
import sys
import zipfile
from typing import Any

import cbor2
import msgpack
import numpy as np
import PIL.Image
import pytest
import simplejpeg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from webdataset import tenbin
from webdataset.autodecode import imagehandler

import shardkit.codecs as codecs
from shardkit.codecs import (
    IMAGE_EXTENSIONS,
    IMAGE_SPECS,
    Codecs,
    Decoder,
    decode_sample,
    default_codecs,
    encode_image,
    encode_sample,
    image_extension,
    normalize_image_extension,
)
from shardkit.errors import ConfigError, DecodeError, EncodeError, UnsafeDataError

assert simplejpeg.__version__  # the JPEG fast path is part of what these tests cover


def _rgb(h: int = 40, w: int = 56, noise: float = 30.0) -> np.ndarray[Any, Any]:
    """A gradient with noise: content with detail and saturated corners."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255 / w, y * 255 / h, (x + y) * 2 % 256], axis=-1)
    return np.clip(img + rng.normal(0, noise, img.shape), 0, 255).astype(np.uint8)


def _roundtrip(ext: str, value: Any, **options: Any) -> Any:
    encoded = encode_sample({"__key__": "k", ext: value})
    assert isinstance(encoded[ext], bytes)
    return Decoder(**options)(encoded)[ext]


class _Point:  # module level so that it pickles
    def __init__(self, x: int) -> None:
        self.x = x


# -- the public surface ------------------------------------------------------------


def test_all_is_sorted_and_complete() -> None:
    assert codecs.__all__ == sorted(codecs.__all__)
    for name in codecs.__all__:
        assert hasattr(codecs, name), name


def test_import_is_light() -> None:
    code = (
        "import shardkit.codecs, sys\n"
        "heavy = ['numpy', 'PIL', 'torch', 'msgpack', 'cbor2', 'simplejpeg']\n"
        "loaded = [m for m in heavy if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- round trips over the whole default set ------------------------------------------

_ARR = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
_VALUES: dict[str, tuple[Any, Any]] = {
    # ext group -> (value, expected decoded value or None for "same as value")
    "cls cls2 class count index inx id": (7, None),
    "txt text transcript": ("héllo\nwörld", None),
    "json jsn": ({"b": [1, 2.5, None, True], "a": "é"}, None),
    "pyd pickle pkl": ({"t": (1, 2), "p": b"\x00"}, None),
    "mp msg msgpack": ({"a": [1, "x", b"\x01"]}, None),
    "cbor": ({"a": [1, "x", b"\x01"], "f": 1.5}, None),
}


def _check_equal(got: Any, want: Any) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for k in want:
            _check_equal(got[k], want[k])
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _check_equal(g, w)
    elif isinstance(want, torch.Tensor):
        assert torch.equal(got, want)
    else:
        assert got == want


def _nonimage_cases() -> list[tuple[str, Any, Any]]:
    cases = [
        (ext, value, value if want is None else want)
        for group, (value, want) in _VALUES.items()
        for ext in group.split()
    ]
    arrays = [_ARR, np.array([1, 2, 3], dtype=np.int64), np.zeros((0, 5), np.uint8)]
    cases += [(ext, arrays, arrays) for ext in ("ten", "tb", "tenbin")]
    cases.append(("npy", _ARR, _ARR))
    npz = {"a": _ARR, "b": np.array([True, False])}
    cases.append(("npz", npz, npz))
    pth = {"w": torch.arange(6).reshape(2, 3), "n": 3}
    cases.append(("pth", pth, pth))
    return cases


_IMAGE_CASES = {
    # ext -> (value to encode, exact round trip?)
    "png": (_rgb(), True),
    "ppm": (_rgb(), True),
    "pgm": (PIL.Image.fromarray(_rgb()).convert("L"), True),
    "pbm": (PIL.Image.fromarray(_rgb()).convert("1"), True),
    "bmp": (_rgb(), True),
    "tif": (_rgb(), True),
    "tiff": (_rgb(), True),
    "webp": (_rgb(noise=0), False),
    "jpg": (_rgb(noise=0), False),
    "jpeg": (_rgb(noise=0), False),
}


def test_every_builtin_extension_has_a_round_trip_case() -> None:
    covered = {ext for ext, _, _ in _nonimage_cases()} | set(_IMAGE_CASES)
    assert Codecs().extensions() == covered


@pytest.mark.parametrize(
    ("ext", "value", "want"), _nonimage_cases(), ids=[c[0] for c in _nonimage_cases()]
)
def test_round_trip(ext: str, value: Any, want: Any) -> None:
    _check_equal(_roundtrip(ext, value, allow_pickle=True), want)


@pytest.mark.parametrize("ext", sorted(_IMAGE_CASES))
def test_image_round_trip(ext: str) -> None:
    value, exact = _IMAGE_CASES[ext]
    want = np.asarray(value if isinstance(value, np.ndarray) else value.convert("RGB"))
    encoded = encode_sample({"__key__": "k", f"seg.{ext}": value})
    got = Decoder("rgb8")(encoded)[f"seg.{ext}"]
    assert got.shape == want.shape and got.dtype == np.uint8
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        assert np.abs(got.astype(int) - want).mean() < 4


def test_images_without_a_spec_stay_bytes() -> None:
    encoded = encode_sample({"__key__": "k", "jpg": _rgb(), "png": _rgb()})
    assert Decoder()(encoded) == encoded


def test_encoding_is_deterministic_and_compact() -> None:
    enc = encode_sample({"__key__": "k", "json": {"b": 1, "a": "é"}, "pyd": [1], "cls": 12})
    assert enc["json"] == '{"b":1,"a":"é"}'.encode()
    assert enc["pyd"][:2] == b"\x80\x04"  # pickle protocol 4, whatever the Python
    assert enc["cls"] == b"12"
    npz = encode_sample({"__key__": "k", "npz": {"a": _ARR}})["npz"]
    with zipfile.ZipFile(io.BytesIO(npz)) as archive:
        assert [i.date_time for i in archive.infolist()] == [(1980, 1, 1, 0, 0, 0)]
    for ext in ("jpg", "png", "webp", "tiff", "pth", "npz"):
        value = {"x": torch.ones(3)} if ext == "pth" else {"a": _ARR} if ext == "npz" else _rgb()
        a = encode_sample({"__key__": "k", ext: value})[ext]
        b = encode_sample({"__key__": "k", ext: value})[ext]
        assert a == b, ext


def test_dunder_bytes_and_str_pass_through() -> None:
    sample = {"__key__": "k", "__url__": "u", "__extra__": 5, "a": bytearray(b"x"), "b": "é"}
    enc = encode_sample(sample)
    assert enc == {"__key__": "k", "__url__": "u", "__extra__": 5, "a": b"x", "b": "é".encode()}
    assert type(enc["a"]) is bytes
    dec = Decoder()(enc)
    assert dec["__extra__"] == 5 and dec["a"] == b"x" and dec["b"] == "é".encode()
    assert decode_sample({"__key__": "k", "B.TXT": b"hi"}) == {"__key__": "k", "B.TXT": "hi"}


# -- tenbin interop with webdataset ---------------------------------------------------

_TEN_ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array([-1, 2, 3], dtype=np.int64),
    np.arange(7, dtype=np.uint8),
    np.ones((2, 2, 2), dtype=np.float16),
]


def test_tenbin_matches_webdataset_bytes() -> None:
    ours = encode_sample({"__key__": "k", "ten": _TEN_ARRAYS})["ten"]
    assert ours == bytes(tenbin.encode_buffer(_TEN_ARRAYS))
    for got, want in zip(tenbin.decode_buffer(ours), _TEN_ARRAYS, strict=True):
        _check_equal(got, want)
    theirs = bytes(tenbin.encode_buffer(_TEN_ARRAYS))
    decoded = decode_sample({"__key__": "k", "tb": theirs})["tb"]
    _check_equal(decoded, _TEN_ARRAYS)
    assert all(a.flags.writeable for a in decoded)


def test_tenbin_single_array_and_refusals() -> None:
    one = encode_sample({"__key__": "k", "ten": _ARR})["ten"]
    _check_equal(decode_sample({"__key__": "k", "ten": one})["ten"], [_ARR])
    with pytest.raises(EncodeError, match="uint32"):
        encode_sample({"__key__": "k", "ten": [np.zeros(3, np.uint32)]})
    with pytest.raises(DecodeError, match="magic"):
        decode_sample({"__key__": "k", "ten": b"x" * 64})
    with pytest.raises(DecodeError, match="claims"):
        decode_sample({"__key__": "k", "ten": one[:40]})


# -- image specs, against webdataset's imagehandler ------------------------------------


def _images() -> dict[str, bytes]:
    rgb = _rgb()
    gray = PIL.Image.fromarray(rgb).convert("L")
    cmyk = PIL.Image.fromarray(rgb).convert("CMYK")
    alpha = np.dstack([rgb, np.linspace(0, 255, rgb.shape[1], dtype=np.uint8)[None].repeat(40, 0)])
    return {
        "jpg": encode_image(rgb, "jpg"),
        "gray.jpg": encode_image(gray, "jpg"),
        "cmyk.jpg": encode_image(cmyk, "jpg"),
        "png.jpg": encode_image(rgb, "png"),  # a PNG named .jpg
        "png": encode_image(rgb, "png"),
        "rgba.png": encode_image(alpha, "png"),
        "l.png": encode_image(gray, "png"),
    }


_IMAGES = _images()


def _as_array(value: Any) -> tuple[np.ndarray[Any, Any], str]:
    if isinstance(value, PIL.Image.Image):
        return np.array(value), f"PIL {value.mode}"
    if isinstance(value, torch.Tensor):
        return value.numpy(), f"torch {value.dtype}"
    return value, "numpy"


@pytest.mark.parametrize("ext", sorted(_IMAGES))
@pytest.mark.parametrize("spec", IMAGE_SPECS)
def test_image_spec_matches_webdataset(spec: str, ext: str) -> None:
    data = _IMAGES[ext]
    ours = Decoder(spec)({"__key__": "k", ext: data})[ext]
    theirs = imagehandler(spec)(ext, data)
    assert type(ours) is type(theirs) or isinstance(ours, PIL.Image.Image)
    got, got_kind = _as_array(ours)
    want, want_kind = _as_array(theirs)
    assert got_kind == want_kind
    assert got.shape == want.shape and got.dtype == want.dtype
    if spec.startswith("torch"):
        assert ours.is_contiguous()
    if got.dtype == np.float32:
        assert got.min() >= 0.0 and got.max() <= 1.0
    scale = 255.0 if got.dtype == np.float32 else 1.0
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64)).max() * scale
    if ext.endswith("png"):
        assert diff == 0
    else:
        assert diff <= 2  # simplejpeg and Pillow both run libjpeg-turbo's accurate DCT


@pytest.mark.parametrize("spec", ["l8", "rgb8", "rgba8", "torchl8", "torchrgb", "torch"])
def test_image_spec_layouts(spec: str) -> None:
    value = Decoder(spec)({"__key__": "k", "jpg": _IMAGES["jpg"]})["jpg"]
    shapes = {
        "l8": (40, 56),
        "rgb8": (40, 56, 3),
        "rgba8": (40, 56, 4),
        "torchl8": (40, 56),  # webdataset adds no channel axis for grayscale
        "torchrgb": (3, 40, 56),
        "torch": (3, 40, 56),
    }
    assert tuple(value.shape) == shapes[spec]
    if spec == "rgba8":
        assert (value[..., 3] == 255).all()
    if isinstance(value, np.ndarray):
        assert value.flags.writeable


def test_pil_specs_and_spec_validation() -> None:
    png = _IMAGES["rgba.png"]
    assert decode_sample({"png": png}, "pil")["png"].mode == "RGB"  # as webdataset
    assert decode_sample({"png": png}, "pill")["png"].mode == "L"
    assert decode_sample({"png": png}, "pilrgba")["png"].mode == "RGBA"
    assert decode_sample({"png": png}, "RGB8")["png"].shape == (40, 56, 3)
    with pytest.raises(ConfigError, match="rgb8, rgba8"):
        Decoder("rgb9")
    with pytest.raises(ConfigError, match="at most one"):
        Decoder("rgb8", "l8")
    with pytest.raises(TypeError):
        Decoder(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("ext", ["jpg", "png"])
def test_decompression_bombs(ext: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _IMAGES[ext]  # 40 x 56 = 2240 pixels
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(DecodeError, match="DecompressionBomb") as info:
        Decoder("rgb8")({"__key__": "bomb", "__url__": "s.tar", ext: data})
    assert info.value.key == "bomb" and info.value.url == "s.tar"
    assert isinstance(info.value.__cause__, PIL.Image.DecompressionBombError)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 2000)  # over the limit, under 2x
    with pytest.warns(PIL.Image.DecompressionBombWarning):
        Decoder("rgb8")({"__key__": "big", ext: data})


def test_corrupt_image_raises_decode_error() -> None:
    bad = _IMAGES["jpg"][:200]
    with pytest.raises(DecodeError, match="'jpg'") as info:
        Decoder("rgb8")({"__key__": "k7", "jpg": bad})
    assert info.value.key == "k7"


# -- pickle ----------------------------------------------------------------------------


@pytest.mark.parametrize("ext", ["pyd", "pickle", "pkl", "x.PKL"])
def test_pickle_needs_opt_in(ext: str) -> None:
    sample = encode_sample({"__key__": "k", "__url__": "a.tar", ext: _Point(3)})
    with pytest.raises(UnsafeDataError) as info:
        Decoder()(sample)
    err = info.value
    assert err.key == "k" and err.url == "a.tar"
    assert f"refusing to unpickle field {ext!r}" in str(err)
    assert "allow_pickle=True (CLI: --allow-pickle)" in str(err)
    assert Decoder(allow_pickle=True)(sample)[ext].x == 3
    assert Decoder(only=["cls"])(sample)[ext] == sample[ext]  # not selected: not touched


def test_torch_and_numpy_objects_need_opt_in() -> None:
    pth = encode_sample({"__key__": "k", "pth": _Point(4)})
    with pytest.raises(DecodeError, match="pth"):
        Decoder()(pth)
    assert Decoder(allow_pickle=True)(pth)["pth"].x == 4
    with pytest.raises(EncodeError, match="object arrays"):
        encode_sample({"__key__": "k", "npy": np.array([{}, 1], dtype=object)})
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    npy = {"__key__": "k", "npy": buffer.getvalue()}
    with pytest.raises(DecodeError, match="allow_pickle"):
        Decoder()(npy)
    assert Decoder(allow_pickle=True)(npy)["npy"][0] == {"a": 1}


# -- handlers, only=, partial=, errors ----------------------------------------------------


def test_custom_handlers_run_first_in_order() -> None:
    seen: list[str] = []

    def first(ext: str, data: bytes) -> Any:
        seen.append(ext)
        return "first" if ext == "seg.png" else None

    def second(ext: str, data: bytes) -> Any:
        return "second" if ext.endswith("jpg") or ext == "cls" else None

    sample = {"__key__": "k", "seg.png": _IMAGES["png"], "jpg": _IMAGES["jpg"], "cls": b"1"}
    sample["txt"] = b"t"
    out = Decoder(first, "rgb8", second)(sample)
    assert out["seg.png"] == "first" and out["jpg"] == "second" and out["cls"] == "second"
    assert out["txt"] == "t"
    assert seen == ["seg.png", "jpg", "cls", "txt"]
    # webdataset's own handlers plug in too.
    out = Decoder(imagehandler("l8"))({"__key__": "k", "png": _IMAGES["png"]})
    assert out["png"].shape == (40, 56)


def test_only_restricts_decoding() -> None:
    sample = {"__key__": "k", "cls": b"1", "json": b"[1]", "seg.png": _IMAGES["png"]}
    out = Decoder("rgb8", only=["cls", "png"])(sample)
    assert out["cls"] == 1 and out["json"] == b"[1]" and out["seg.png"].shape == (40, 56, 3)
    out = Decoder("rgb8", only="seg.png JSON")(sample)
    assert out["cls"] == b"1" and out["json"] == [1] and out["seg.png"].ndim == 3
    out = Decoder("rgb8", only=["other.png"])(sample)
    assert out["seg.png"] == sample["seg.png"]


def test_partial_and_decoded_values() -> None:
    sample = {"__key__": "k", "cls": 3, "txt": b"a"}
    with pytest.raises(TypeError, match="partial=True"):
        Decoder()(sample)
    assert Decoder(partial=True)(sample) == {"__key__": "k", "cls": 3, "txt": "a"}


@pytest.mark.parametrize(
    ("ext", "data"), [("json", b"{nope"), ("cls", b"x1"), ("txt", b"\xff"), ("npy", b"abc")]
)
def test_decode_error_carries_key_and_cause(ext: str, data: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode_sample({"__key__": "a/b", "__url__": "s-0.tar", ext: data})
    err = info.value
    assert err.key == "a/b" and err.url == "s-0.tar" and err.__cause__ is not None
    assert f"field {ext!r}" in str(err) and "s-0.tar" in str(err)
    assert pickle.loads(pickle.dumps(err)).key == "a/b"


def test_gz_fields_are_gunzipped_then_decoded() -> None:
    sample = {"__key__": "k", "json.gz": gzip.compress(b'{"a": 1}'), "x.gz": gzip.compress(b"z")}
    out = decode_sample(sample)
    assert out["json.gz"] == {"a": 1} and out["x.gz"] == b"z"


def test_encode_errors() -> None:
    with pytest.raises(EncodeError) as info:
        encode_sample({"__key__": "k9", "seg.foo": object()})
    err = info.value
    assert isinstance(err, TypeError) and err.key == "k9"
    assert "no encoder for ext 'foo' and value of type object" in str(err)
    assert "'seg.foo'" in str(err) and "register an encoder" in str(err)
    with pytest.raises(EncodeError, match="no encoder for ext 'txt'"):
        encode_sample({"__key__": "k", "txt": 3})
    with pytest.raises(EncodeError, match="set") as info:
        encode_sample({"__key__": "k", "json": {1, 2}})
    assert isinstance(info.value.__cause__, TypeError)
    with pytest.raises(EncodeError, match="bool"):
        encode_sample({"__key__": "k", "cls": True})
    with pytest.raises(EncodeError, match=r"\[0, 1\]"):
        encode_sample({"__key__": "k", "png": np.full((4, 4), 2.0)})
    with pytest.raises(EncodeError, match="uint8"):
        encode_sample({"__key__": "k", "png": np.zeros((4, 4), np.int32)})


def test_decoder_pickles() -> None:
    decoder = Decoder(imagehandler("l8"), "torchrgb8", only=["jpg", "cls"], allow_pickle=True)
    clone = pickle.loads(pickle.dumps(decoder))
    sample = {"__key__": "k", "jpg": _IMAGES["jpg"], "cls": b"2", "txt": b"t"}
    a, b = decoder(sample), clone(sample)
    assert b["jpg"].shape == (40, 56)  # the custom handler comes before the spec
    np.testing.assert_array_equal(a["jpg"], b["jpg"])
    assert b["cls"] == 2 and b["txt"] == b"t"
    assert "torchrgb8" in repr(clone)
    clone = pickle.loads(pickle.dumps(Decoder("torchrgb8")))
    assert clone(sample)["jpg"].shape == (3, 40, 56)


# -- registries ------------------------------------------------------------------------


def _encode_point(value: Any) -> bytes:
    return str(value.x).encode()


def _decode_point(data: bytes) -> Any:
    return _Point(int(data))


def test_codecs_registry() -> None:
    reg = Codecs()
    reg.register("POINT", encoder=_encode_point, decoder=_decode_point)
    enc = encode_sample({"__key__": "k", "a.point": _Point(5)}, codecs=reg)
    assert enc["a.point"] == b"5"
    assert Decoder(codecs=reg)(enc)["a.point"].x == 5
    assert pickle.loads(pickle.dumps(Decoder(codecs=reg)))(enc)["a.point"].x == 5
    assert Decoder()(enc)["a.point"] == b"5"  # the default registry is untouched
    assert "point" not in default_codecs.extensions()
    reg.register("pyd", decoder=pickle.loads)  # an explicit decoder needs no opt-in
    assert Decoder(codecs=reg)(encode_sample({"pyd": [1]}))["pyd"] == [1]
    copy = reg.copy()
    copy.register("json", decoder=lambda data: "custom")
    assert Decoder(codecs=reg)({"json": b"1"})["json"] == 1
    assert Codecs(builtins=False).extensions() == frozenset()
    with pytest.raises(ConfigError, match="one extension component"):
        reg.register("seg.png", decoder=_decode_point)
    with pytest.raises(ConfigError, match="encoder= or decoder="):
        reg.register("x")
    with pytest.raises(TypeError):
        reg.register("x", decoder=3)  # type: ignore[arg-type]


def test_module_register_changes_the_default_registry() -> None:
    code = (
        "from shardkit.codecs import register, encode_sample, Decoder\n"
        "register('rev', encoder=lambda v: ''.join(v)[::-1].encode(), decoder=lambda d: d[::-1])\n"
        "enc = encode_sample({'__key__': 'k', 'rev': ['a', 'b']})\n"
        "assert enc['rev'] == b'ba', enc\n"
        "assert Decoder()(enc)['rev'] == b'ab'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- image extension helpers -------------------------------------------------------------


def test_image_extension_helpers() -> None:
    assert {"jpg", "jpeg", "png", "tif", "tiff", "webp"} <= IMAGE_EXTENSIONS
    assert image_extension("seg.PNG") and image_extension(".jpg")
    assert not image_extension("json") and not image_extension("png.json")
    assert normalize_image_extension("JPEG") == "jpg"
    assert normalize_image_extension(".Jpg") == "jpg"
    assert normalize_image_extension("TIF") == "tif"
    assert normalize_image_extension("seg.JFIF") == "seg.jpg"
    with pytest.raises(ConfigError, match="not an image extension"):
        normalize_image_extension("txt")


def test_encode_image_options() -> None:
    rgb = _rgb()
    small = encode_image(rgb, "JPEG", quality=30)
    assert len(small) < len(encode_image(rgb, "jpg"))
    as_float = encode_image(rgb / 255.0, "png")
    assert as_float == encode_image(rgb, "png")
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 9, np.uint8)])
    assert PIL.Image.open(io.BytesIO(encode_image(rgba, "png"))).mode == "RGBA"
    with pytest.raises(ConfigError, match="cannot encode images as 'gif'"):
        encode_image(rgb, "gif")
    with pytest.raises(ConfigError, match="quality"):
        encode_image(rgb, "jpg", quality=0)


# -- properties --------------------------------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
_json_values = st.recursive(
    _json_scalars | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
# A str value is written as-is (it may already be JSON text), so the top level is not one.
_json_top = _json_scalars | st.lists(_json_values) | st.dictionaries(st.text(), _json_values)


@settings(max_examples=150, deadline=None)
@given(_json_top)
def test_json_round_trip_property(value: Any) -> None:
    got = _roundtrip("json", value)
    assert got == value and json.dumps(got) == json.dumps(value)


@settings(max_examples=150, deadline=None)
@given(st.text(), st.integers())
def test_txt_and_cls_round_trip_property(text: str, label: int) -> None:
    enc = encode_sample({"__key__": "k", "txt": text, "cls": label})
    assert Decoder()(enc) == {"__key__": "k", "txt": text, "cls": label}


_dtypes = st.sampled_from(["u1", "i2", "<i4", ">i8", "f2", "<f4", ">f8", "?", "c8"])


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(_dtypes, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
def test_npy_round_trip_property(arr: np.ndarray[Any, Any]) -> None:
    got = _roundtrip("npy", arr)
    assert got.dtype == arr.dtype and got.shape == arr.shape
    np.testing.assert_array_equal(got, arr)


def test_msgpack_and_cbor_match_their_libraries() -> None:
    value = {"a": [1, 2.5, "x"], "b": b"\x00"}
    enc = encode_sample({"__key__": "k", "mp": value, "cbor": value})
    assert msgpack.unpackb(enc["mp"]) == value and cbor2.loads(enc["cbor"]) == value


_TORCH_LAYOUT_CHECK = """
import sys
{hide}
import numpy as np
from shardkit.codecs import Decoder
images = {images!r}
for ext, data in images.items():
    for torch_spec, numpy_spec in [("torchrgb8", "rgb8"), ("torchrgba8", "rgba8"),
                                   ("torchrgb", "rgb"), ("torchl8", "l8")]:
        got = Decoder(torch_spec)({{ext: data}})[ext]
        want = Decoder(numpy_spec)({{ext: data}})[ext]
        if want.ndim == 3:
            want = want.transpose(2, 0, 1)
        assert got.is_contiguous() and got.dtype.itemsize == want.dtype.itemsize, torch_spec
        assert np.array_equal(got.numpy(), want), (torch_spec, ext)
print("cv2" in sys.modules and sys.modules["cv2"] is not None)
"""


@pytest.mark.parametrize("opencv", [True, False])
def test_torch_specs_are_the_numpy_pixels_channels_first(opencv: bool) -> None:
    """torch specs lay out exactly the numpy spec's pixels as CxHxW, whether OpenCV splits
    the channels or numpy does (a core install without the images extra's OpenCV)."""
    images = {ext: _IMAGES[ext] for ext in ("jpg", "gray.jpg", "png", "rgba.png", "l.png")}
    hide = "" if opencv else "sys.modules['cv2'] = None"
    code = _TORCH_LAYOUT_CHECK.format(hide=hide, images=images)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(opencv)
