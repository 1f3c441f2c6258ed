"""A local TFRecord shard is read by slicing its memory map
(:func:`shardkit.formats.tfrecord.buffer_records`): the same samples and the same errors
as reading it as a stream, CRCs checked."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from shardkit import ShardWriter, read_shard
from shardkit.errors import ChecksumError, FormatError, TruncatedShardError
from shardkit.formats import tfrecord
from shardkit.reader import iter_shard_samples


def _shard(tmp_path: Path) -> str:
    with ShardWriter(str(tmp_path / "shard-%06d.tfrecord"), encode=False) as out:
        for i in range(6):
            out.write({"__key__": f"k{i}", "txt": b"t" * (100 + i), "cls": b"%d" % i})
    return str(tmp_path / "shard-000000.tfrecord")


def _both(path: str) -> tuple[list[Any], list[Any]]:
    """(samples, errors) of the mapped read and of the stream read."""
    out = []
    for mapped in (True, False):
        seen: list[Exception] = []

        def report(exc: Exception, seen: list[Exception] = seen) -> bool:
            seen.append(exc)
            return True

        if mapped:
            samples = list(read_shard(path, handler=report))
        else:
            with open(path, "rb") as f:
                stream = io.BytesIO(f.read())  # not a file: read as a stream
            samples = list(iter_shard_samples(stream, url=path, format="tfrecord", handler=report))
        out.append((samples, [(type(e), str(e)) for e in seen]))
    return out[0], out[1]


def test_the_mapped_read_slices_and_matches_the_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _shard(tmp_path)
    mapped, stream = _both(path)
    assert mapped == stream and len(mapped[0]) == 6 and not mapped[1]
    assert mapped[0][5]["txt"] == b"t" * 105

    def no_stream(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the local shard was read as a stream")

    monkeypatch.setattr(tfrecord, "iter_records", no_stream)
    assert len(list(read_shard(path))) == 6


@pytest.mark.parametrize(
    "damage, error",
    [
        (lambda size: ("flip", 40), ChecksumError),  # inside the first record's data
        (lambda size: ("flip", 3), ChecksumError),  # its length
        (lambda size: ("cut", size - 7), TruncatedShardError),  # inside the last record
        (lambda size: ("cut", size + 5), TruncatedShardError),  # a partial header after it
    ],
    ids=["data-crc", "length-crc", "cut-record", "cut-header"],
)
def test_damage_gives_the_streams_errors(tmp_path: Path, damage: Any, error: type) -> None:
    path = _shard(tmp_path)
    how, at = damage(os.path.getsize(path))
    with open(path, "r+b") as f:
        if how == "flip":
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0xFF]))
        elif at > os.path.getsize(path):
            f.seek(0, 2)
            f.write(b"\0" * (at - os.path.getsize(path)))
        else:
            f.truncate(at)
    mapped, stream = _both(path)
    assert mapped == stream
    assert len(mapped[1]) == 1 and mapped[1][0][0] is error
    assert issubclass(error, FormatError)
