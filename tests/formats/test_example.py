from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardkit.errors import EncodeError, FormatError
from shardkit.formats.example import (
    decode_example,
    encode_example,
    example_to_sample,
    sample_to_example,
)

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
FLOAT32_MAX = 3.4028234663852886e38
FLOATS = st.floats(-FLOAT32_MAX, FLOAT32_MAX)  # float64 values that fit in float32


def f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


@pytest.fixture(scope="module")
def tf() -> Iterator[ModuleType]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    yield tensorflow


# Each strategy draws (value, kind, expected decoded list).
Drawn = tuple[Any, str, list[Any]]
VALUES: st.SearchStrategy[Drawn] = st.one_of(
    st.binary(max_size=40).map(lambda v: (v, "bytes", [v])),
    st.text(max_size=10).map(lambda v: (v, "bytes", [v.encode()])),
    INT64.map(lambda v: (v, "int64", [v])),
    st.booleans().map(lambda v: (v, "int64", [int(v)])),
    FLOATS.map(lambda v: (v, "float", [f32(v)])),
    st.lists(st.binary(max_size=10), min_size=1).map(lambda v: (v, "bytes", v)),
    st.lists(INT64, min_size=1).map(lambda v: (tuple(v), "int64", v)),
    st.lists(FLOATS, min_size=1).map(lambda v: (v, "float", [f32(x) for x in v])),
    st.just(([], "bytes", [])),
)
FEATURES = st.dictionaries(st.text(max_size=8), VALUES, max_size=6)


def tf_example(tf: ModuleType, drawn: dict[str, Drawn]) -> Any:
    feature = {}
    for name, (_, kind, values) in drawn.items():
        if kind == "bytes":
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif kind == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def tf_decode(tf: ModuleType, data: bytes) -> dict[str, list[Any]]:
    proto = tf.train.Example.FromString(data)
    out: dict[str, list[Any]] = {}
    for name, feature in proto.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = list(getattr(feature, kind).value) if kind else []
    return out


# ---- round trips and TensorFlow byte equality --------------------------------------------


@settings(max_examples=300, deadline=None)
@given(drawn=FEATURES)
def test_round_trip(drawn: dict[str, Drawn]) -> None:
    encoded = encode_example({name: value for name, (value, _, _) in drawn.items()})
    decoded = decode_example(encoded)
    assert decoded == {name: expected for name, (_, _, expected) in drawn.items()}
    assert list(decoded) == sorted(drawn)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn=FEATURES)
@pytest.mark.interop
def test_bytes_equal_tensorflow_deterministic(tf: ModuleType, drawn: dict[str, Drawn]) -> None:
    # We sort names lexicographically by UTF-8 bytes like C++ protobuf; upb (the protobuf
    # runtime under TensorFlow's Python API) puts "ab" before "a", so skip prefix pairs here.
    assume(not any(a != b and b.startswith(a) for a in drawn for b in drawn))
    ours = encode_example({name: value for name, (value, _, _) in drawn.items()})
    proto = tf_example(tf, drawn)
    assert ours == proto.SerializeToString(deterministic=True)
    assert tf.train.Example.FromString(ours) == proto


@pytest.mark.interop
def test_tensorflow_parses_our_example(tf: ModuleType) -> None:
    data = encode_example({"b": [b"x", b"yz"], "i": [1, -2, 1 << 40], "f": (0.5, 1), "s": "é"})
    spec = {
        "b": tf.io.VarLenFeature(tf.string),
        "i": tf.io.FixedLenFeature([3], tf.int64),
        "f": tf.io.FixedLenFeature([2], tf.float32),
        "s": tf.io.FixedLenFeature([], tf.string),
    }
    parsed = tf.io.parse_single_example(data, spec)
    assert parsed["b"].values.numpy().tolist() == [b"x", b"yz"]
    assert parsed["i"].numpy().tolist() == [1, -2, 1 << 40]
    assert parsed["f"].numpy().tolist() == [0.5, 1.0]
    assert parsed["s"].numpy() == "é".encode()


def test_deterministic_whatever_the_insertion_order() -> None:
    a = encode_example({"b": 1, "a": b"x", "c": [0.5]})
    assert a == encode_example({"c": [0.5], "a": b"x", "b": 1})
    assert list(decode_example(a)) == ["a", "b", "c"]
    prefixes = encode_example({"ab": 1, "b": 1, "a": 1, "": 1})
    assert list(decode_example(prefixes)) == ["", "a", "ab", "b"]


def test_empty_example_matches_tensorflow() -> None:
    # tf.train.Example(features=tf.train.Features()).SerializeToString()
    assert encode_example({}) == b"\x0a\x00"
    assert decode_example(b"\x0a\x00") == {} == decode_example(b"")


# ---- value types ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (bytearray(b"ab"), [b"ab"]),
        (memoryview(b"ab"), [b"ab"]),
        ([b"a", "é", bytearray(b"c")], [b"a", "é".encode(), b"c"]),
        ([1, 2.5], [1.0, 2.5]),
        ([True, 3], [1, 3]),
        ([np.int64(1), np.int64(-2)], [1, -2]),
        ([np.float32(1.5), 2], [1.5, 2.0]),
        (np.int16(-3), [-3]),
        (np.float64(0.1), [f32(0.1)]),
        (np.bool_(True), [1]),
        (np.arange(6, dtype=np.int32).reshape(2, 3), [0, 1, 2, 3, 4, 5]),
        (np.array([[1.5, -2.0]]), [1.5, -2.0]),
        (np.array([True, False]), [1, 0]),
        (np.array(7), [7]),
        (np.array([(1 << 63) - 1], dtype=np.uint64), [(1 << 63) - 1]),
        (np.array([-(1 << 63), 200], dtype=np.int64), [-(1 << 63), 200]),
        (np.array([b"a", b"bc"]), [b"a", b"bc"]),
        (np.array(["é"]), ["é".encode()]),
        (np.array([], dtype=np.float32), []),
        ([], []),
        (float("inf"), [math.inf]),
    ],
)
def test_value_types(value: Any, expected: list[Any]) -> None:
    assert decode_example(encode_example({"v": value})) == {"v": expected}


def test_nan_round_trips() -> None:
    (value,) = decode_example(encode_example({"v": math.nan}))["v"]
    assert isinstance(value, float) and math.isnan(value)


@pytest.mark.interop
def test_numpy_and_empty_values_match_tensorflow(tf: ModuleType) -> None:
    arrays: dict[str, Any] = {
        "f": np.linspace(-1, 1, 7),
        "i": np.array([[-5, 0], [300, 1 << 40]]),
        "e": np.zeros(0, dtype=np.float32),
        "n": [],
    }
    proto = tf.train.Example(
        features=tf.train.Features(
            feature={
                "f": tf.train.Feature(float_list=tf.train.FloatList(value=arrays["f"])),
                "i": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=arrays["i"].reshape(-1).tolist())
                ),
                "e": tf.train.Feature(float_list=tf.train.FloatList()),
                "n": tf.train.Feature(bytes_list=tf.train.BytesList()),
            }
        )
    )
    assert encode_example(arrays) == proto.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1},
        None,
        [1, b"a"],
        [[1]],
        ["a", 1.5],
        1 << 63,
        [0, -(1 << 63) - 1],
        1e39,
        [1.0, -1e39],
        [1.5, 10**400],
        ["ok", "\ud800"],
        np.float64(1e39),
        np.array([1e39]),
        np.array([1 << 63], dtype=np.uint64),
        np.array([1j]),
        object(),
    ],
)
def test_unsupported_values_raise_encode_error(value: Any) -> None:
    with pytest.raises(EncodeError, match="'bad_feature'") as info:
        encode_example({"ok": b"", "bad_feature": value})
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("features", [{1: b""}, {"\ud800": b""}])
def test_bad_feature_names_raise_encode_error(features: dict[Any, Any]) -> None:
    with pytest.raises(EncodeError):
        encode_example(features)


# ---- decoding what protobuf accepts ------------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def entry(name: bytes, feature: bytes, extra: bytes = b"") -> bytes:
    return field(1, field(1, name) + extra + field(2, feature))


def example(*entries: bytes, extra: bytes = b"") -> bytes:
    return field(1, b"".join(entries)) + extra


UNKNOWN = (
    b"\x78\x05" + b"\x61" + b"\x00" * 8 + b"\x6a\x02ab" + b"\x75\x00\x00\x80\x3f"
)  # 15, 12, 13, 14
GROUP = b"\x8b\x01\x08\x01\x93\x01\x94\x01\x8c\x01"  # group 17 { varint; group 18 {} }

HAND_WRITTEN = {
    "unpacked floats": example(
        entry(b"f", field(2, b"\x0d" + struct.pack("<f", 1.5) + b"\x0d" + struct.pack("<f", -2)))
    ),
    "unpacked ints": example(entry(b"i", field(3, b"\x08\x05\x08" + varint((1 << 64) - 3)))),
    "packed and unpacked mixed": example(
        entry(b"i", field(3, field(1, b"\x01\x02") + b"\x08\x03" + field(1, varint(300))))
    ),
    "unknown fields everywhere": example(
        UNKNOWN,
        entry(b"b", field(1, UNKNOWN + field(1, b"x") + GROUP) + UNKNOWN),
        GROUP,
        extra=UNKNOWN + GROUP,
    ),
    "feature without kind": example(entry(b"k", b"")),
    "entry without value": example(field(1, field(1, b"k"))),
    "duplicate name, last wins": example(entry(b"d", field(1, field(1, b"1"))))
    + example(entry(b"d", field(3, field(1, b"\x02\x07")))),
    "oneof switch, last wins": example(entry(b"o", field(1, field(1, b"x")) + field(2, b""))),
    "same kind repeated concatenates": example(
        entry(b"c", field(1, field(1, b"x")) + field(1, field(1, b"y")))
    ),
    "non-minimal tag and length": example(
        entry(b"n", field(3, b"\x8a\x00\x82\x00\x01\x02" + b"\x88\x80\x00\x09"))
    ),
    "ten-byte varint with high bits": example(
        entry(b"h", field(3, b"\x08" + b"\xff" * 9 + b"\x7f"))
    ),
}


@pytest.mark.interop
@pytest.mark.parametrize("name", list(HAND_WRITTEN))
def test_decodes_like_protobuf(tf: ModuleType, name: str) -> None:
    data = HAND_WRITTEN[name]
    assert decode_example(data) == tf_decode(tf, data)


def test_hand_written_values() -> None:
    # upb drops a map entry that has unknown fields (it keeps it as an unknown field of
    # Features); C++ protobuf and TensorFlow's own parser keep the entry, and so do we.
    assert decode_example(example(entry(b"e", field(1, field(1, b"x")), extra=UNKNOWN))) == {
        "e": [b"x"]
    }
    assert decode_example(HAND_WRITTEN["unknown fields everywhere"]) == {"b": [b"x"]}
    assert decode_example(HAND_WRITTEN["unpacked floats"]) == {"f": [1.5, -2.0]}
    assert decode_example(HAND_WRITTEN["unpacked ints"]) == {"i": [5, -3]}
    assert decode_example(HAND_WRITTEN["packed and unpacked mixed"]) == {"i": [1, 2, 3, 300]}
    assert decode_example(HAND_WRITTEN["feature without kind"]) == {"k": []}
    assert decode_example(HAND_WRITTEN["duplicate name, last wins"]) == {"d": [2, 7]}
    assert decode_example(HAND_WRITTEN["oneof switch, last wins"]) == {"o": []}
    assert decode_example(HAND_WRITTEN["same kind repeated concatenates"]) == {"c": [b"x", b"y"]}


def test_accepts_bytes_like_input() -> None:
    data = encode_example({"a": [1, 2]})
    assert decode_example(bytearray(data)) == decode_example(memoryview(data)) == {"a": [1, 2]}


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a",  # length missing
        b"\x0a\x05\x0a\x03",  # length past the end
        b"\x0a" + b"\xff" * 11,  # varint too long
        b"\x0e",  # wire type 6
        b"\x0c",  # end group without start
        b"\x00\x00",  # field number 0
        b"\x0b\x14",  # mismatched group
        example(entry(b"\xff", b"")),  # feature name not UTF-8
        example(entry(b"f", field(2, field(1, b"abc")))),  # packed floats not a multiple of 4
        example(entry(b"i", field(3, field(1, b"\x80")))),  # packed varint cut short
        example(entry(b"i", field(3, b"\x08\x80")), entry(b"j", b"")),  # varint across the end
    ],
)
def test_malformed_raises_format_error(data: bytes) -> None:
    with pytest.raises(FormatError) as info:
        decode_example(data, url="s.tfrecord", offset=1234)
    assert info.value.url == "s.tfrecord"
    assert info.value.offset == 1234
    assert "malformed tf.train.Example" in str(info.value)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_never_escape_as_other_errors(data: bytes) -> None:
    try:
        result = decode_example(data)
    except FormatError:
        return
    assert isinstance(result, dict)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    drawn = draw(FEATURES)
    data = bytearray(encode_example({name: value for name, (value, _, _) in drawn.items()}))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["set", "cut", "insert"]))
        if op == "set" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[pos:]
        else:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=3))
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated())
@pytest.mark.interop
def test_corrupt_examples_agree_with_protobuf(tf: ModuleType, data: bytes) -> None:
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    try:
        theirs: dict[str, list[Any]] | None = tf_decode(tf, data)
    except DecodeError:
        theirs = None
    try:
        ours: dict[str, list[Any]] | None = dict(decode_example(data))
    except FormatError:
        ours = None
    assert (ours is None) == (theirs is None)
    if ours is not None and theirs is not None:
        # upb files a map entry that has unknown fields under unknown fields rather than in
        # the map; every feature it does keep must be the same.
        assert set(theirs) <= set(ours)
        assert {k: repr(ours[k]) for k in theirs} == {k: repr(v) for k, v in theirs.items()}


# ---- samples ----------------------------------------------------------------------------


def test_sample_mapping() -> None:
    sample = {
        "__key__": "dir/img001",
        "__url__": "s3://bucket/shard-0.tfrecord",
        "__local_path__": "/tmp/x",
        "jpg": b"\xff\xd8",
        "cls": 3,
        "score": 0.5,
        "tags": [b"a", b"b"],
        "empty": [],
        "txt": "hello",
    }
    features = decode_example(sample_to_example(sample))
    assert set(features) == {"__key__", "jpg", "cls", "score", "tags", "empty", "txt"}
    assert features["__key__"] == [b"dir/img001"]
    assert example_to_sample(features, key="fallback", url="u") == {
        "__key__": "dir/img001",
        "__url__": "u",
        "jpg": b"\xff\xd8",
        "cls": 3,
        "score": 0.5,
        "tags": [b"a", b"b"],
        "empty": [],
        "txt": b"hello",
    }


def test_sample_without_key_uses_the_given_key() -> None:
    features = decode_example(sample_to_example({"cls": [1, 2]}))
    assert example_to_sample(features, key="shard-0/000007", url=None) == {
        "__key__": "shard-0/000007",
        "cls": [1, 2],
    }


@pytest.mark.parametrize("bad", [[b"\xff"], [1], [b"a", b"b"], []])
def test_bad_key_feature_raises_format_error(bad: list[Any]) -> None:
    with pytest.raises(FormatError) as info:
        example_to_sample({"__key__": bad}, key="k0", url="u")
    assert (info.value.key, info.value.url) == ("k0", "u")


def test_non_string_key_raises_encode_error() -> None:
    with pytest.raises(EncodeError):
        sample_to_example({"__key__": 5, "cls": 1})


def test_encode_error_names_the_sample() -> None:
    with pytest.raises(EncodeError, match="'meta'") as info:
        sample_to_example({"__key__": "s1", "meta": {"a": 1}})
    assert info.value.key == "s1"
