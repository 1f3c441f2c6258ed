"""codecs.check_field on value fields: text is UTF-8, JSON parses to a bounded depth,
npy headers parse and their data is all there."""

from __future__ import annotations

import io

import numpy as np
import pytest

from shardkit.codecs import FIELD_CHECKS, check_field
from shardkit.codecs._text import MAX_JSON_DEPTH
from shardkit.errors import DataError


def test_text_must_be_utf8() -> None:
    check_field("naïve café".encode(), "txt")
    check_field(b"", "transcript")
    with pytest.raises(DataError, match=r"^not UTF-8 text: invalid start byte at byte 3$"):
        check_field(b"abc\xff", "txt")
    with pytest.raises(DataError, match=r"^not UTF-8 text"):
        check_field("é".encode()[:1], "caption.text")  # a character cut in half


def test_json_must_parse_and_nest_at_most_the_limit() -> None:
    check_field(b'{"caption": "a cat", "size": [1, 2]}', "json")
    with pytest.raises(DataError, match=r"^not JSON: "):
        check_field(b'{"caption": "a cat"', "json")  # cut
    check_field(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, "jsn")
    deeper = b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(
        DataError,
        match=rf"^JSON nests deeper than {MAX_JSON_DEPTH} levels "
        r"\(SHARDKIT_MAX_JSON_DEPTH raises it\)$",
    ):
        check_field(deeper, "json")
    very_deep = b"[" * 100_000 + b"]" * 100_000  # past the parser's own recursion limit
    with pytest.raises(DataError, match=r"nests deeper"):
        check_field(very_deep, "json")
    with pytest.raises(DataError, match=r"^not UTF-8"):
        check_field(b'"\xff"', "json")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_npy_header_must_parse_and_its_data_follow() -> None:
    data = _npy(np.arange(100, dtype=np.float32).reshape(10, 10))
    check_field(data, "npy")
    with pytest.raises(DataError, match=r"^truncated npy \(399 of 400 data bytes"):
        check_field(data[:-1], "npy")
    with pytest.raises(DataError, match=r"^not an npy array: "):
        check_field(b"\x93NUMPY\x01\x00garbage", "npy")
    with pytest.raises(DataError, match=r"^not an npy array: "):
        check_field(b"plain bytes", "npy")


def test_one_table_holds_every_kind() -> None:
    for ext in ("txt", "json", "npy", "wav", "flac", "mp3", "ogg", "opus", "mp4", "webm", "mkv"):
        assert ext in FIELD_CHECKS
    assert "jpg" not in FIELD_CHECKS  # images have their own checks (builder.validate)
