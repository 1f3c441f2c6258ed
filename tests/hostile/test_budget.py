"""The budget (issue 28): every size, length, count or dimension read from a file goes
through one checker before anything is allocated, and a refusal is one LimitError line.

Cases 1-3 measure each entry point that reads a shard (``Dataset``, ``verify``, ``stats``,
``cat``, ``index``) in a fresh interpreter: peak RSS under 512 MB (each was 0.6-3 GB).
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.budget import READERS, measure, packed_example_gz, pax_chain_tar_gz
from helpers.hostile import address_space_cap, run_measured

import shardkit
from shardkit.errors import ConfigError, DataError, ShardkitError

# The names the budget adds are imported where they are used, so that every case test
# also runs (and fails on its behaviour, not on an import) against the code before it.

# --------------------------------------------------------------------------- the table


def test_every_limit_has_a_positive_default_and_a_variable_that_changes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit import budget

    for kind, row in budget.LIMITS.items():
        assert row.default > 0 and row.unit in ("bytes", "items", "pixels", "levels")
        assert budget.limit(kind) == row.default
        monkeypatch.setenv(budget.variable(kind), "3GiB" if row.unit == "bytes" else "12345")
        assert budget.limit(kind) == (3 << 30 if row.unit == "bytes" else 12345)
        monkeypatch.delenv(budget.variable(kind))


def test_a_variable_that_is_not_a_size_is_one_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit import budget

    monkeypatch.setenv("SHARDKIT_MAX_LIST_ITEMS", "lots")
    with pytest.raises(ConfigError, match="SHARDKIT_MAX_LIST_ITEMS='lots'"):
        budget.allow("list_items", 1, what="x")
    monkeypatch.setenv("SHARDKIT_MAX_AUDIO", "-1")
    with pytest.raises(ConfigError, match="SHARDKIT_MAX_AUDIO"):
        budget.allow("audio", 1, what="x")


def test_a_refusal_names_what_the_size_declared_the_limit_and_the_variable() -> None:
    from shardkit import budget
    from shardkit.errors import LimitError

    assert budget.allow("audio", 1 << 30, what="a clip") == 1 << 30
    with pytest.raises(LimitError) as info:
        budget.allow("audio", (1 << 30) + 1, what="a FLAC", url="s.tar", key="k")
    assert str(info.value) == (
        "s.tar, sample 'k': a FLAC: 1,073,741,825 bytes declared, over the limit of "
        "1,073,741,824 bytes for decoded audio (frames x channels x 4) "
        "(SHARDKIT_MAX_AUDIO raises it)"
    )
    with pytest.raises(ValueError, match="no budget kind 'nope'"):
        budget.allow("nope", 1, what="x")


def test_empty_refuses_before_numpy_allocates() -> None:
    from shardkit import budget
    from shardkit.errors import DecodeLimitError

    with address_space_cap(256 << 20), pytest.raises(DecodeLimitError, match="1,099,511,627,7"):
        budget.empty("audio", (1 << 38,), np.float32, what="audio", error=DecodeLimitError)
    assert budget.empty("audio", (2, 3), np.float32, what="audio").shape == (2, 3)


# --------------------------------------------------------------------------- cases 1-3

_LIMIT_MB = 512


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("budget")
    paths = {"pax": str(root / "chain.tar.gz"), "packed": str(root / "packed.tfrecord.gz")}
    pax_chain_tar_gz(paths["pax"], 300)  # 300 PAX headers of ~1 MiB: ~1.4 MB of file
    packed_example_gz(paths["packed"], 64 << 20)  # 64 Mi one-byte varints: ~65 KB of file
    return paths


def _refused_in_one_line(result: dict[str, Any], variable: str) -> None:
    if "status" in result:  # the CLI: one Error: line (exit 2), or verify's problems (exit 1)
        assert result["status"] in (1, 2), result
        if result["status"] == 2:
            errors = [line for line in result["stderr"] if line.startswith("Error: ")]
            assert len(errors) == 1 and variable in errors[0], result
    else:
        assert result["outcome"] == "refused", result
        assert result["error"][0] == "FormatLimitError" and variable in result["error"][1]


@pytest.mark.parametrize("entry", sorted(READERS))
def test_case_1_a_chain_of_pax_headers_is_refused_in_bounded_memory(
    entry: str, hostile: dict[str, str], tmp_path: Path
) -> None:
    """A 1.4 MB .tar.gz whose one member follows 300 PAX headers of just under 1 MiB each:
    each entry held the chain twice (600 MB; 1,500 of them took 3 GB)."""
    result = measure(entry, hostile["pax"], str(tmp_path))
    assert result["peak_mb"] < _LIMIT_MB, result
    _refused_in_one_line(result, "SHARDKIT_MAX_TAR_CHAIN")


@pytest.mark.parametrize("entry", sorted(READERS))
def test_case_3_a_packed_list_of_64_mi_values_is_refused_in_bounded_memory(
    entry: str, hostile: dict[str, str], tmp_path: Path
) -> None:
    """A 65 KB .tfrecord.gz whose Example holds a packed int64 list of 64 Mi zeros: each
    entry made a list of 64 Mi ints (600 MB; 400 Mi of them took 3.8 GB)."""
    result = measure(entry, hostile["packed"], str(tmp_path))
    assert result["peak_mb"] < _LIMIT_MB, result
    _refused_in_one_line(result, "SHARDKIT_MAX_LIST_ITEMS")


def test_an_example_within_the_list_budget_reads_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit.formats.example import decode_example, encode_example

    data = encode_example({"a": list(range(300)), "b": [1.5] * 10, "c": [b"x", b"y"]})
    assert decode_example(data) == {"a": list(range(300)), "b": [1.5] * 10, "c": [b"x", b"y"]}
    monkeypatch.setenv("SHARDKIT_MAX_LIST_ITEMS", "311")
    with pytest.raises(DataError, match="312 items declared, over the limit of 311"):
        decode_example(data, url="u.tfrecord", offset=0)
    monkeypatch.setenv("SHARDKIT_MAX_LIST_ITEMS", "312")
    assert len(decode_example(data)["a"]) == 300


_PARQUET = """
import resource
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
import shardkit
schema = pa.schema([("path", pa.string()), ("tokens", pa.list_(pa.int8()))])
values = pa.array(np.zeros(1 << 20, np.int8))
cell = pa.ListArray.from_arrays(pa.array([0, 1 << 20], pa.int32()), values)
with pq.ParquetWriter({path!r}, schema, compression="zstd") as writer:
    for i in range(64):
        writer.write_table(pa.table({{"path": [f"a{{i}}.jpg"], "tokens": cell}}, schema=schema))
result["file"] = len(open({path!r}, "rb").read())
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))
try:
    shardkit.build({path!r}, {out!r})
except shardkit.errors.BuildError as exc:
    result["error"] = str(exc)
except MemoryError:
    result["error"] = "MemoryError"
"""


def test_case_2_a_list_typed_parquet_cell_is_refused_before_it_is_listed(
    tmp_path: Path,
) -> None:
    """64 rows of a list<int8> cell of 1 Mi zeros, in a small parquet: listed, each cell
    became a list of a million ints (600 MB; a 2 KB file took 1.15 GB)."""
    path, out = str(tmp_path / "lists.parquet"), str(tmp_path / "out")
    result = run_measured(_PARQUET.format(path=path, out=out))
    assert result["file"] < 200_000
    assert result.get("error", "").startswith(
        f"{path}: row 1: cells that hold 1,048,576 values: 8,388,608 bytes declared"
    ), result
    assert "SHARDKIT_MAX_CELL" in result["error"]
    assert result["peak_mb"] < _LIMIT_MB, result


def test_a_row_group_of_many_rows_is_read_in_batches_that_hold_a_bounded_count_of_values(
    tmp_path: Path,
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from shardkit.builder import _parquet as parquet

    rows = 600  # 600 cells of 8,000 values (64,000 bytes each: under the cell limit)
    cell = pa.array([[0] * 8000] * rows, pa.list_(pa.int8()))
    path = str(tmp_path / "rows.parquet")
    pq.write_table(pa.table({"path": [f"{i}.jpg" for i in range(rows)], "t": cell}), path)
    batches = list(parquet._batches(pq.ParquetFile(path), frozenset(), path))
    assert sum(b.num_rows for b in batches) == rows
    assert max(b.num_rows for b in batches) == parquet.BATCH_VALUES // 8000


def test_cells_of_every_type_are_sized_from_arrow() -> None:
    pa = pytest.importorskip("pyarrow")
    from shardkit.builder._parquet import _cell_sizes

    column = pa.array([[1, 2], None, [], [3]], pa.list_(pa.int64()))
    assert _cell_sizes(column).tolist() == [32, 0, 0, 16]
    assert _cell_sizes(column.slice(3)).tolist() == [16]
    structs = pa.array([{"a": "xyz", "b": [""] * 5}, {"a": None, "b": []}])
    assert _cell_sizes(structs).tolist() == [(8 + 3) + (8 + 5 * 8), 16]
    nested = pa.array([[["ab"], ["c", "d"]]])
    assert _cell_sizes(nested).tolist() == [8 + (8 + 2) + 8 + (8 + 1) + (8 + 1)]


# --------------------------------------------------------------------------- case 4: video


def _mp4(size: int, frames: int = 2) -> bytes:
    av = pytest.importorskip("av")
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "ultrafast"}
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(np.zeros((size, size, 3), np.uint8), "rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def test_case_4_a_clip_over_the_budget_is_refused_before_numpy_allocates() -> None:
    """2048x2048 frames, 86 of them: 1.08 GB. It was allocated up front (a raw MemoryError
    under a cap); now refused from the header, before a frame is decoded: a clip request
    never allocates more than 1 GB."""
    from shardkit.codecs import VideoSpec

    data = _mp4(2048)
    with address_space_cap(600 << 20), pytest.raises(ShardkitError) as info:
        VideoSpec(frames=86)("mp4", data)
    assert type(info.value).__name__ == "DecodeLimitError"
    assert (
        "a clip of 86 frames of 2048x2048: 1,082,130,432 bytes declared, over the limit of "
        "1,000,000,000 bytes" in str(info.value)
    )
    assert "SHARDKIT_MAX_VIDEO_CLIP" in str(info.value)
    clip = VideoSpec(frames=2, start=0.0)("mp4", data)
    assert clip is not None and clip.frames.shape == (2, 2048, 2048, 3)


def test_case_4_build_validation_skips_a_video_over_the_pixel_limit_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit.builder._validate import check_one

    data = _mp4(256)
    assert check_one("clip.mp4", data) == ("clip.mp4", data)
    monkeypatch.setenv("SHARDKIT_MAX_IMAGE_PIXELS", "65535")
    with pytest.raises(DataError) as info:
        check_one("clip.mp4", data)
    assert "a video of 256x256 frames: 65,536 pixels declared" in str(info.value)
    assert "SHARDKIT_MAX_IMAGE_PIXELS" in str(info.value)


# --------------------------------------------------------------------------- case 5: audio


def flac_claiming(frames: int, channels: int = 1) -> bytes:
    """A FLAC of 4096 silent frames whose STREAMINFO claims ``frames`` (36 bits), cut at
    200 bytes: about 100 bytes in all."""
    sf = pytest.importorskip("soundfile")
    buffer = io.BytesIO()
    sf.write(buffer, np.zeros((4096, channels), np.float32), 16000, format="FLAC")
    data = bytearray(buffer.getvalue())
    field = int.from_bytes(data[18:26], "big")
    field = (field & ~((1 << 36) - 1)) | frames
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data[:200])


def test_case_5_audio_claiming_a_huge_length_is_skipped_by_handler_ignore(
    tmp_path: Path,
) -> None:
    """A FLAC whose header claims 2^36 - 1 frames asked numpy for 256 GiB: a raw
    MemoryError that handler= never saw. Now a DecodeLimitError: "ignore" skips it."""
    sf = pytest.importorskip("soundfile")
    good = io.BytesIO()
    sf.write(good, np.zeros(1000, np.float32), 16000, format="FLAC")
    shard = str(tmp_path / "audio-000000.tar")
    with shardkit.ShardWriter(str(tmp_path / "audio-%06d.tar")) as sink:
        sink.write({"__key__": "bad", "flac": flac_claiming((1 << 36) - 1)})
        sink.write({"__key__": "good", "flac": good.getvalue()})
    with address_space_cap(1 << 30):
        got = list(shardkit.Dataset(shard, handler="ignore").decode(shardkit.audio()))
        assert [s["__key__"] for s in got] == ["good"]
        with pytest.raises(DataError, match="SHARDKIT_MAX_AUDIO"):
            list(shardkit.Dataset(shard).decode(shardkit.audio()))


# --------------------------------------------------------------------------- images


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    end = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + chunk + end


def test_build_validation_applies_the_readers_pixel_limit() -> None:
    """A 50000x50000 PNG (2.5 gigapixels) passed header validation, and every reader then
    refused it."""
    from shardkit.builder._validate import check_image

    assert check_image(_png_header(4000, 3000), "png") == "png"
    with pytest.raises(DataError, match="a 50000x50000 image: 2,500,000,000 pixels declared"):
        check_image(_png_header(50000, 50000), "png")


def test_the_image_decoders_refuse_it_from_the_header_too() -> None:
    pytest.importorskip("PIL")
    from shardkit.codecs import Decoder

    sample = {"__key__": "k", "png": _png_header(50000, 50000)}
    for spec in ("rgb8", "pil"):
        with pytest.raises(DataError, match="SHARDKIT_MAX_IMAGE_PIXELS"):
            Decoder(spec)(dict(sample))


def test_limits_are_read_per_call_so_a_raised_one_applies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit.builder._validate import check_image

    monkeypatch.setenv("SHARDKIT_MAX_IMAGE_PIXELS", str(10**10))
    assert check_image(_png_header(50000, 50000), "png") == "png"
    assert os.environ["SHARDKIT_MAX_IMAGE_PIXELS"] == str(10**10)


def test_a_jsonl_line_over_the_row_limit_is_refused_before_it_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JSONL row holding a list of 10 Mi zeros (20 MB of line, a list of 80 MB made of
    it): the line is read up to the row limit and refused there."""
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as f:
        f.write('{"path": "a.jpg", "label": 1}\n')
        f.write('{"path": "b.jpg", "tokens": [' + "0," * (10 << 20) + "0]}\n")
    with pytest.raises(shardkit.BuildError) as info:
        shardkit.build(str(path), str(tmp_path / "out"))
    assert "line 2: 16,777,217 bytes declared, over the limit of 16,777,216" in str(info.value)
    assert "SHARDKIT_MAX_ROW" in str(info.value)


def test_a_build_skips_the_image_every_reader_would_refuse_naming_the_limit(
    tmp_path: Path,
) -> None:
    import json
    import random

    from shardkit.demo import make_jpeg

    (tmp_path / "src" / "cat").mkdir(parents=True)
    (tmp_path / "src" / "cat" / "huge.png").write_bytes(_png_header(50000, 50000))
    jpeg = make_jpeg(random.Random(0), 0, min_side=16, max_side=24)
    (tmp_path / "src" / "cat" / "ok.jpg").write_bytes(jpeg)
    shardkit.build(str(tmp_path / "src"), str(tmp_path / "out"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [s["samples"] for s in manifest["shards"]] == [1]
    [skipped] = manifest["skipped"]
    assert skipped["path"] == "cat/huge.png"
    assert "2,500,000,000 pixels declared" in skipped["reason"]
    assert "SHARDKIT_MAX_IMAGE_PIXELS" in skipped["reason"]
