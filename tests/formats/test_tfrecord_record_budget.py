"""A TFRecord record is held whole, so its length goes through the budget's ``record``
limit before anything is read: a ``.tfrecord.gz`` of 1 MB whose one record declares (and
inflates to) 1 GiB of zeros is refused at its header, in one line naming the shard, as a
data error (``handler=`` sees it), in bounded memory (each reader held the whole GiB)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from helpers.budget import READERS, measure, refused_by_the_cli
from helpers.hostile import run_measured, zeros_gzip

from shardkit.errors import EncodeError, FormatLimitError
from shardkit.formats import tfrecord

GIB = 1 << 30
_LIMIT_MB = 200


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One record declaring 1 GiB (a good length CRC), its GiB of zeros and a footer."""
    path = str(tmp_path_factory.mktemp("record") / "bomb.tfrecord.gz")
    length = struct.pack("<Q", GIB)
    zeros_gzip(path, [length + struct.pack("<I", tfrecord.masked_crc32c(length)), GIB, bytes(4)])
    return path


@pytest.mark.parametrize("entry", sorted(READERS))
def test_a_record_declaring_a_gib_is_refused_at_its_header(
    entry: str, bomb: str, tmp_path: Path
) -> None:
    result = measure(entry, bomb, str(tmp_path))
    assert result["peak_mb"] < _LIMIT_MB, result
    if not refused_by_the_cli(entry, result, "bomb.tfrecord.gz", "SHARDKIT_MAX_RECORD"):
        assert result["outcome"] == "refused", result
        kind, message = result["error"]
        assert kind == "FormatLimitError" and "bomb.tfrecord.gz, offset 0" in message
        assert "1,073,741,824 bytes declared, over the limit of 268,435,456" in message


_HANDLED = """
from shardkit.reader import read_shard
seen = []
samples = list(read_shard({path!r}, handler=lambda exc: seen.append(exc) or True))
result["samples"] = len(samples)
result["errors"] = [[type(e).__name__, str(e)] for e in seen]
"""


def test_the_refusal_goes_to_the_handler_as_a_data_error(bomb: str) -> None:
    result = run_measured(_HANDLED.format(path=bomb), timeout=300)
    assert result["peak_mb"] < _LIMIT_MB, result
    assert result["samples"] == 0
    [[kind, message]] = result["errors"]
    assert kind == "FormatLimitError" and "\n" not in message
    assert message.startswith(f"{bomb}, offset 0: a TFRecord record: 1,073,741,824 bytes")


def test_the_record_limit_applies_to_every_reader_and_the_writer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import io

    framed = tfrecord.frame_record(bytes(300))
    monkeypatch.setenv("SHARDKIT_MAX_RECORD", "299B")
    refused: list[Any] = [
        lambda: list(tfrecord.iter_records(io.BytesIO(framed), url="s.tfrecord")),
        lambda: list(tfrecord.buffer_records(framed, url="s.tfrecord")),
    ]
    for read in refused:
        with pytest.raises(FormatLimitError, match=r"s\.tfrecord, offset 0: a TFRecord record"):
            read()
    with pytest.raises(EncodeError, match="SHARDKIT_MAX_RECORD raises it"):
        tfrecord.frame_record(bytes(300))
    monkeypatch.setenv("SHARDKIT_MAX_RECORD", "300B")
    assert [data for _, data in tfrecord.iter_records(io.BytesIO(framed))] == [bytes(300)]
    assert tfrecord.frame_record(bytes(300)) == framed
