from __future__ import annotations

import gzip
import io
import os
import struct
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ChecksumError, FormatError, TruncatedShardError
from shardkit.formats.example import decode_example, encode_example
from shardkit.formats.limits import MAX_RECORD_LENGTH
from shardkit.formats.tfrecord import (
    RECORD_OVERHEAD,
    frame_record,
    iter_records,
    masked_crc32c,
)

URL = "file:///data/shard-000.tfrecord"


class ShortReads:
    """A read-only stream whose read(n) returns at most ``chunk`` bytes, and has no seek."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = data
        self._pos = 0
        self._chunk = chunk

    def read(self, n: int = -1) -> bytes:
        n = self._chunk if n < 0 else min(n, self._chunk)
        out = self._data[self._pos : self._pos + n]
        self._pos += len(out)
        return out


def frame_all(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


def offsets_of(records: list[bytes]) -> list[int]:
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + RECORD_OVERHEAD
    return out


def read_all(data: bytes, **kw: Any) -> list[tuple[int, bytes]]:
    return list(iter_records(io.BytesIO(data), **kw))


@pytest.fixture(scope="module")
def tf() -> Iterator[ModuleType]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    yield tensorflow


# A small file with records of varied sizes, one above the single-read threshold (16 KiB).
RECORDS = [b"", b"a", b"hello world" * 3, bytes(range(256)) * 80, b"\x00" * 7]
FILE = frame_all(RECORDS)
STARTS = offsets_of(RECORDS)


def record_start(pos: int) -> int:
    return max(s for s in STARTS if s <= pos)


# ---- framing ----------------------------------------------------------------------------


def test_masked_crc_known_values() -> None:
    # CRC32C("123456789") = 0xE3069283 (RFC 3720); the mask is rotr15 + 0xA282EAD8.
    crc = 0xE3069283
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == expected


def test_frame_layout() -> None:
    framed = frame_record(b"abc")
    assert len(framed) == 3 + RECORD_OVERHEAD
    assert struct.unpack_from("<Q", framed)[0] == 3
    assert struct.unpack_from("<I", framed, 8)[0] == masked_crc32c(framed[:8])
    assert framed[12:15] == b"abc"
    assert struct.unpack_from("<I", framed, 15)[0] == masked_crc32c(b"abc")
    assert frame_record(bytearray(b"abc")) == frame_record(memoryview(b"abc")) == framed


# Records longer than 16 KiB take a different read path; build them cheaply.
_large = st.tuples(st.integers(16_000, 20_000), st.binary(min_size=1, max_size=8)).map(
    lambda t: (t[1] * t[0])[: t[0]]
)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(st.binary(max_size=300) | _large, max_size=12),
    chunk=st.integers(1, 64) | st.integers(1000, 70_000),
)
def test_round_trip(records: list[bytes], chunk: int) -> None:
    data = frame_all(records)
    expected = list(zip(offsets_of(records), records, strict=True))
    assert read_all(data) == expected
    assert list(iter_records(ShortReads(data, chunk), url=URL)) == expected  # type: ignore[arg-type]


def test_empty_stream_has_no_records() -> None:
    assert read_all(b"") == []


# ---- gzip -------------------------------------------------------------------------------


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def test_gzip_round_trip_is_reproducible() -> None:
    compressed = gzip_bytes(FILE)
    assert compressed == gzip_bytes(FILE)
    with gzip.GzipFile(fileobj=io.BytesIO(compressed), mode="rb") as gz:
        assert [r for _, r in iter_records(gz)] == RECORDS  # type: ignore[arg-type]


def test_gzip_truncated_is_not_silent() -> None:
    compressed = gzip_bytes(FILE)[:-200]
    # gzip itself notices the missing trailer (EOFError), or we notice the cut record.
    with (
        gzip.GzipFile(fileobj=io.BytesIO(compressed), mode="rb") as gz,
        pytest.raises((EOFError, TruncatedShardError)),
    ):
        list(iter_records(gz))  # type: ignore[arg-type]


# ---- corruption -------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_any_flipped_byte_is_a_checksum_error_at_its_record(mask: int) -> None:
    for pos in range(len(FILE)):
        corrupt = bytearray(FILE)
        corrupt[pos] ^= mask
        got: list[tuple[int, bytes]] = []
        with pytest.raises(ChecksumError) as info:
            got.extend(iter_records(io.BytesIO(bytes(corrupt)), url=URL))
        assert info.value.offset == record_start(pos), pos
        assert info.value.url == URL
        assert [o for o, _ in got] == [s for s in STARTS if s < record_start(pos)]


def test_truncation_at_every_offset() -> None:
    boundaries = {*STARTS, len(FILE)}
    for cut in range(len(FILE) + 1):
        got: list[tuple[int, bytes]] = []
        stream = ShortReads(FILE[:cut], 5000)
        if cut in boundaries:
            got.extend(iter_records(stream))  # type: ignore[arg-type]
            assert [o for o, _ in got] == [s for s in STARTS if s < cut]
            continue
        with pytest.raises(TruncatedShardError) as info:
            got.extend(iter_records(stream, url=URL))  # type: ignore[arg-type]
        assert info.value.offset == record_start(cut), cut
        assert info.value.url == URL
        assert [r for _, r in got] == RECORDS[: STARTS.index(record_start(cut))]


def test_verify_false_returns_corrupt_data() -> None:
    corrupt = bytearray(FILE)
    pos = STARTS[2] + 12 + 4  # inside the data of record 2
    corrupt[pos] ^= 0xFF
    with pytest.raises(ChecksumError) as info:
        read_all(bytes(corrupt))
    assert info.value.offset == STARTS[2]
    got = read_all(bytes(corrupt), verify=False)
    assert [r for _, r in got] != RECORDS
    assert got[2][1][4] == RECORDS[2][4] ^ 0xFF
    # The length CRC is still checked.
    corrupt[STARTS[3] + 2] ^= 0xFF
    with pytest.raises(ChecksumError) as info:
        read_all(bytes(corrupt), verify=False)
    assert info.value.offset == STARTS[3]


def test_absurd_length_is_refused_without_allocating() -> None:
    length = struct.pack("<Q", 1 << 50)
    header = length + struct.pack("<I", masked_crc32c(length))
    with pytest.raises(FormatError) as info:
        read_all(FILE + header + b"x" * 100, url=URL)
    assert type(info.value) is FormatError
    assert info.value.offset == len(FILE)
    assert str(MAX_RECORD_LENGTH) in str(info.value)


def test_large_length_in_a_short_stream_is_truncated_not_allocated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDKIT_MAX_RECORD", "2GiB")  # the budget's limit up to the format's
    length = struct.pack("<Q", MAX_RECORD_LENGTH)  # 2 GiB, valid CRC, 100 bytes follow
    header = length + struct.pack("<I", masked_crc32c(length))
    with pytest.raises(TruncatedShardError) as info:
        read_all(FILE + header + b"x" * 100)
    assert info.value.offset == len(FILE)


# ---- TensorFlow interop -----------------------------------------------------------------

EXAMPLES: list[dict[str, Any]] = [
    {"jpg": os.urandom(70_000), "cls": 3, "score": 0.25, "json": b'{"a": 1}'},
    {"jpg": b"", "cls": -(1 << 63), "score": -1.5, "json": b"[]"},
    {"jpg": b"\xff" * 10, "cls": (1 << 63) - 1, "score": 3e38, "json": b"{}"},
]


def tf_spec(tf: ModuleType) -> dict[str, Any]:
    return {
        "jpg": tf.io.FixedLenFeature([], tf.string),
        "cls": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "json": tf.io.FixedLenFeature([], tf.string),
    }


def check_tf_reads(tf: ModuleType, path: str, compression: str | None) -> None:
    spec = tf_spec(tf)
    parsed = [
        tf.io.parse_single_example(r, spec)
        for r in tf.data.TFRecordDataset(path, compression_type=compression)
    ]
    assert len(parsed) == len(EXAMPLES)
    for got, want in zip(parsed, EXAMPLES, strict=True):
        assert got["jpg"].numpy() == want["jpg"]
        assert got["json"].numpy() == want["json"]
        assert int(got["cls"].numpy()) == want["cls"]
        assert (
            float(got["score"].numpy()) == struct.unpack("<f", struct.pack("<f", want["score"]))[0]
        )


@pytest.mark.interop
@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_tensorflow_reads_our_records(
    tf: ModuleType, tmp_path: Any, compression: str | None
) -> None:
    path = str(tmp_path / "ours.tfrecord")
    framed = b"".join(frame_record(encode_example(e)) for e in EXAMPLES)
    with open(path, "wb") as f:
        f.write(gzip_bytes(framed) if compression else framed)
    check_tf_reads(tf, path, compression)
    for raw, want in zip(tf.data.TFRecordDataset(path, compression), EXAMPLES, strict=True):
        proto = tf.train.Example.FromString(raw.numpy())
        assert proto.features.feature["cls"].int64_list.value == [want["cls"]]


@pytest.mark.interop
@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_we_read_tensorflow_records(tf: ModuleType, tmp_path: Any, compression: str | None) -> None:
    path = str(tmp_path / "theirs.tfrecord")
    options = tf.io.TFRecordOptions(compression_type=compression or "")
    with tf.io.TFRecordWriter(path, options) as writer:
        for e in EXAMPLES:
            proto = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "jpg": tf.train.Feature(bytes_list=tf.train.BytesList(value=[e["jpg"]])),
                        "cls": tf.train.Feature(int64_list=tf.train.Int64List(value=[e["cls"]])),
                        "score": tf.train.Feature(
                            float_list=tf.train.FloatList(value=[e["score"]])
                        ),
                        "json": tf.train.Feature(bytes_list=tf.train.BytesList(value=[e["json"]])),
                    }
                )
            )
            writer.write(proto.SerializeToString())
    with open(path, "rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression else raw
        got = [decode_example(r, url=path, offset=o) for o, r in iter_records(stream, url=path)]  # type: ignore[arg-type]
    assert len(got) == len(EXAMPLES)
    for features, want in zip(got, EXAMPLES, strict=True):
        assert features["jpg"] == [want["jpg"]]
        assert features["json"] == [want["json"]]
        assert features["cls"] == [want["cls"]]
        assert features["score"] == [struct.unpack("<f", struct.pack("<f", want["score"]))[0]]
    if not compression:
        # The framing is byte-identical to what TensorFlow writes for the same records.
        with open(path, "rb") as f:
            data = f.read()
        assert frame_all([r for _, r in read_all(data)]) == data
