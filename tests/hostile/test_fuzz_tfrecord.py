"""Fuzzing TFRecord framing, the tf.train.Example parser and the TFRecord path of the reader."""

from __future__ import annotations

import functools
import gzip
import io
import os
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from helpers.hostile import collect, outcome, run_measured
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import (
    ChecksumError,
    ConfigError,
    DataError,
    FormatError,
    ShardkitError,
    TruncatedShardError,
)
from shardkit.formats.example import decode_example, encode_example, example_to_sample
from shardkit.formats.limits import MAX_RECORD_LENGTH
from shardkit.formats.tfrecord import (
    RECORD_OVERHEAD,
    frame_record,
    iter_records,
    masked_crc32c,
)
from shardkit.reader import iter_shard_samples, read_shard

RECORDS = [
    encode_example({"__key__": "k0", "jpg": os.urandom(90), "cls": 3}),
    encode_example({"__key__": "k1", "txt": b"", "score": [0.5, 1.5]}),
    b"",
    encode_example({"__key__": "k3", "ids": list(range(-3, 40))}),
]
FILE = b"".join(frame_record(r) for r in RECORDS)
STARTS = [sum(len(r) + RECORD_OVERHEAD for r in RECORDS[:i]) for i in range(len(RECORDS) + 1)]


def _records(data: bytes, **kw: Any) -> list[tuple[int, bytes]]:
    return list(iter_records(io.BytesIO(data), **kw))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _ld(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _varint(len(body)) + body


def _example(name: bytes, feature: bytes) -> bytes:
    return _ld(0x0A, _ld(0x0A, _ld(0x0A, name) + _ld(0x12, feature)))


# --------------------------------------------------------------------------- framing


def test_truncation_at_every_offset_yields_whole_records_then_an_error() -> None:
    for cut in range(len(FILE)):
        got, error = collect(iter_records(io.BytesIO(FILE[:cut])))
        whole = [r for r, end in zip(RECORDS, STARTS[1:], strict=True) if end <= cut]
        assert [r for _, r in got] == whole
        if cut in STARTS:
            assert error is None, cut
        else:
            assert isinstance(error, TruncatedShardError), cut
            assert error.offset == max(s for s in STARTS if s <= cut)


def test_every_single_bit_flip_is_a_checksum_error_at_its_record() -> None:
    for pos in range(len(FILE)):
        record = max(i for i, s in enumerate(STARTS[:-1]) if s <= pos)
        for bit in range(8):
            flipped = bytearray(FILE)
            flipped[pos] ^= 1 << bit
            got, error = collect(iter_records(io.BytesIO(bytes(flipped))))
            assert [r for _, r in got] == RECORDS[:record], (pos, bit)
            assert isinstance(error, ChecksumError), (pos, bit)  # CRC32C sees every 1-bit flip
            assert error.offset == STARTS[record]


@settings(max_examples=400, deadline=None)
@given(blob=st.binary(max_size=400))
def test_random_bytes(blob: bytes) -> None:
    for verify in (True, False):
        result = outcome(lambda v=verify: _records(blob, verify=v))  # type: ignore[misc]
        assert isinstance(result, (list, ShardkitError))


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc32c(raw))


def test_record_over_max_record_length_is_refused_before_reading() -> None:
    assert MAX_RECORD_LENGTH == 2 << 30  # protobuf cannot hold a larger message anyway
    with pytest.raises(FormatError, match="max_record_length") as info:
        _records(FILE + _header(MAX_RECORD_LENGTH + 1))
    assert type(info.value) is FormatError and info.value.offset == len(FILE)
    with pytest.raises(FormatError, match="max_record_length"):
        _records(FILE, max_record_length=len(RECORDS[0]) - 1)
    assert len(_records(FILE, max_record_length=max(len(r) for r in RECORDS))) == 4
    with pytest.raises(ConfigError):
        _records(FILE, max_record_length=-1)


def test_lying_length_under_the_limit_allocates_nothing(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "lie.tfrecord")
    with open(path, "wb") as f:
        f.write(_header(3 << 29) + os.urandom(4096))  # 1.5 GiB declared, 4 KiB present
    result = run_measured(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from shardkit.formats.tfrecord import iter_records
        try:
            with open({path!r}, "rb") as f:
                list(iter_records(f))
        except Exception as exc:
            result["error"] = type(exc).__name__
        """,
        env={"SHARDKIT_MAX_RECORD": "2GiB"},  # the budget's limit up to the format's
    )
    assert result["error"] == "TruncatedShardError"
    assert result["peak_mb"] < 200


# --------------------------------------------------------------------------- Example


@st.composite
def messages(draw: st.DrawFn, depth: int = 0) -> bytes:
    """Protobuf-shaped bytes: plausible tags and wire types, lengths that may lie."""
    out = b""
    for _ in range(draw(st.integers(0, 4))):
        number = draw(st.sampled_from([1, 1, 2, 3, 15, 16, (1 << 29) - 1, 1 << 29, 0]))
        wire = draw(st.sampled_from([2, 2, 2, 0, 1, 3, 4, 5, 6, 7]))
        out += _varint(number << 3 | wire)
        if wire == 0:
            out += _varint(draw(st.integers(0, 1 << 70)))
        elif wire in (1, 5):
            out += draw(st.binary(min_size=0, max_size=9 if wire == 1 else 5))
        elif wire == 2:
            nested = depth < 4 and draw(st.booleans())
            body = draw(messages(depth + 1)) if nested else draw(st.binary(max_size=12))
            out += _varint(max(0, len(body) + draw(st.sampled_from([0, 0, 0, 1, -1, 1 << 40]))))
            out += body
        elif wire == 3:
            out += draw(messages(depth + 1)) if depth < 4 else b""
            out += _varint(number << 3 | 4)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=messages())
def test_protobuf_shaped_garbage_decodes_or_is_a_format_error(data: bytes) -> None:
    result = outcome(lambda: decode_example(data, url="u", offset=5))
    if isinstance(result, ShardkitError):
        assert type(result) is FormatError and result.offset == 5
        return
    assert all(isinstance(v, list) for v in result.values())
    sample = outcome(lambda: example_to_sample(result, key="k", url="u"))
    assert isinstance(sample, (dict, FormatError))


def _groups(depth: int) -> bytes:
    return b"\x0b" * depth + b"\x0c" * depth  # field 1, start group / end group


def test_group_nesting_is_bounded_not_recursive() -> None:
    assert decode_example(_groups(100)) == {}
    with pytest.raises(FormatError, match="nesting"):
        decode_example(_groups(101))
    with pytest.raises(FormatError):
        decode_example(b"\x0b" * 1_000_000)  # a megabyte of unclosed groups


WORST_CASES = {
    # 2-byte varints of values over 256 (not cached ints): 36 bytes of Python per 2 bytes
    "packed ints": _example(b"i", _ld(0x1A, _ld(0x0A, b"\x81\x02" * 65536))),
    "unpacked ints": _example(b"i", _ld(0x1A, b"\x08\x81\x02" * 43690)),
    "empty bytes values": _example(b"b", _ld(0x0A, b"\x0a\x00" * 65536)),
    "floats": _example(b"f", _ld(0x12, _ld(0x0A, b"\x00\x00\x80\x3f" * 32768))),
    "many features": _ld(0x0A, b"".join(_ld(0x0A, _ld(0x0A, b"%05d" % i)) for i in range(16384))),
}


@pytest.mark.parametrize("case", sorted(WORST_CASES))
def test_decoded_size_is_a_small_multiple_of_the_record(case: str) -> None:
    data = WORST_CASES[case]
    tracemalloc.start()
    try:
        decode_example(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 25 * len(data), peak / len(data)


# --------------------------------------------------------------------------- the reader


def _keeper(errors: list[Exception]) -> Callable[[Exception], bool]:
    def keep(exc: Exception) -> bool:
        errors.append(exc)
        return True

    return keep


def test_a_bad_key_in_one_record_skips_only_that_record() -> None:
    # Bug found: example_to_sample's FormatError escaped the per-record handler and the
    # reader's outer handler then dropped the rest of the shard.
    records = [
        encode_example({"__key__": "a", "x": 1}),
        encode_example({"__key__": b"\xff\xfe", "x": 2}),
        encode_example({"__key__": "c", "x": 3}),
    ]
    stream = io.BytesIO(b"".join(frame_record(r) for r in records))
    errors: list[Exception] = []
    samples = list(
        iter_shard_samples(stream, url="s.tfrecord", format="tfrecord", handler=_keeper(errors))
    )
    assert [s["__key__"] for s in samples] == ["a", "c"]
    assert len(errors) == 1 and isinstance(errors[0], FormatError)


def test_a_url_feature_cannot_pose_as_the_source() -> None:
    record = encode_example({"__key__": "a", "__url__": "s3://elsewhere/x.tar", "x": 1})
    stream = io.BytesIO(frame_record(record))
    (sample,) = iter_shard_samples(stream, url="mine.tfrecord", format="tfrecord")
    assert sample["__url__"] == "mine.tfrecord" and sample["x"] == 1


def test_gzipped_tfrecord_corruption_is_always_reported(tmp_path: os.PathLike[str]) -> None:
    data = gzip.compress(FILE, mtime=0)
    path = os.path.join(str(tmp_path), "s.tfrecord.gz")
    good = [s["__key__"] for s in _read(path, data)]
    for pos in range(0, len(data), 3):
        flipped = bytearray(data)
        flipped[pos] ^= 0x10
        result = outcome(functools.partial(_keys, path, bytes(flipped)))
        assert result == good or isinstance(result, DataError), pos


def _keys(path: str, data: bytes) -> list[str]:
    return [s["__key__"] for s in _read(path, data)]


def _read(path: str, data: bytes) -> list[dict[str, Any]]:
    with open(path, "wb") as f:
        f.write(data)
    return list(read_shard(path))
