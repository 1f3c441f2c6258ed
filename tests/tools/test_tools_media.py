"""Audio and video fields in the tools: show --grid, stats, verify --decode, shardkit view."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile as sf
from helpers.view import get
from PIL import Image

import shardkit
from shardkit.tools import contact_sheet, stats, verify
from shardkit.tools.view import Viewer

RATE = 16000
FPS = 25


def _flac(seconds: float, rate: int = RATE, amplitude: float = 0.8) -> bytes:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    tone = (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, tone, rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def _mp4(frames: int, colour: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    """``frames`` frames at FPS; the first is ``colour``, the rest dark grey."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(frames):
            image = np.full((48, 64, 3), colour if i == 0 else (30, 30, 30), np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def _media_folder(root: Path, *, corrupt: bool = False) -> str:
    """A shard of two audio samples and two video samples (and, with ``corrupt``, a cut
    FLAC and a cut MP4)."""
    folder = root / "media"
    with shardkit.ShardWriter(str(folder / "shard-%06d.tar"), max_count=100) as sink:
        sink.write({"__key__": "a/0", "flac": _flac(1.0), "txt": "one second"})
        sink.write({"__key__": "a/1", "flac": _flac(2.5, 22050), "txt": "two and a half"})
        sink.write({"__key__": "v/0", "mp4": _mp4(50), "txt": "two seconds"})
        sink.write({"__key__": "v/1", "mp4": _mp4(25), "txt": "one second"})
        if corrupt:
            flac, mp4 = _flac(1.0), _mp4(50)
            sink.write({"__key__": "bad/flac", "flac": flac[: len(flac) // 2]})
            sink.write({"__key__": "bad/mp4", "mp4": mp4[: len(mp4) * 2 // 3]})
    return str(folder)


def _samples(folder: str) -> Any:
    return shardkit.Dataset(folder)


# --------------------------------------------------------------------------- thumbnails


def test_a_video_tile_is_its_first_frame_and_an_audio_tile_its_waveform(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path)
    out = str(tmp_path / "sheet.png")
    sheet = contact_sheet(_samples(folder), out, columns=4, tile=96, label=None)
    assert sheet.images == 4 and sheet.size == (4 * 96, 96)
    with Image.open(out) as img:
        pixels = np.asarray(img.convert("RGB")).astype(int)
    line = np.array([90, 200, 255])  # the waveform's colour
    for tile in (0, 1):  # audio: a waveform fills the tile's middle band
        area = pixels[10:60, tile * 96 + 4 : tile * 96 + 92]
        assert (np.abs(area - line).sum(axis=2) < 30).mean() > 0.3, tile
    for tile in (2, 3):  # video: the red first frame, not the grey frames after it
        area = pixels[20:50, tile * 96 + 20 : tile * 96 + 76]
        red = (area[..., 0] > 150) & (area[..., 1] < 90) & (area[..., 2] < 90)
        assert red.mean() > 0.9, tile


def test_a_quiet_clip_draws_a_small_waveform() -> None:
    from shardkit.tools._media import field_picture

    loud = np.asarray(field_picture("flac", _flac(1.0, amplitude=0.9), (100, 60)))
    quiet = np.asarray(field_picture("flac", _flac(1.0, amplitude=0.1), (100, 60)))
    drawn = [(np.abs(p.astype(int) - [90, 200, 255]).sum(axis=2) < 30).sum() for p in (loud, quiet)]
    assert drawn[0] > 4 * drawn[1] > 0


def test_the_waveform_is_decoded_a_block_at_a_time_with_the_same_envelope() -> None:
    from shardkit.tools._media import audio_envelope

    data = _flac(2.3, amplitude=0.7)
    whole = sf.read(io.BytesIO(data), dtype="float32")[0]
    edges = (np.arange(101) * len(whole)) // 100
    expected_low = [whole[a:b].min() for a, b in itertools.pairwise(edges)]
    expected_high = [whole[a:b].max() for a, b in itertools.pairwise(edges)]
    for block in (1000, 4096, 1 << 16):  # edges inside blocks, blocks inside columns
        lows, highs = audio_envelope("flac", data, 100, block=block)
        assert lows.tolist() == expected_low and highs.tolist() == expected_high, block
    short = _flac(0.001)  # 16 frames for 100 columns: the empty columns are silence
    lows, highs = audio_envelope("flac", short, 100)
    frames = sf.read(io.BytesIO(short), dtype="float32")[0]
    assert len(lows) == 100 and (lows <= highs).all()
    assert highs.max() == frames.max() > 0 and lows.min() == min(0.0, frames.min())


def test_a_long_recording_is_drawn_in_a_fraction_of_its_decoded_size() -> None:
    import tracemalloc

    from shardkit.tools._media import field_picture

    data = _flac(120.0)  # 1.92 M frames: 7.7 MB as float32
    field_picture("flac", _flac(0.5), (160, 160))  # imports and first-use allocations
    tracemalloc.start()
    try:
        field_picture("flac", data, (160, 160))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 7.7e6 / 4, peak


def test_a_field_that_does_not_decode_gets_a_tile_with_the_reason(tmp_path: Path) -> None:
    samples = [{"__key__": "cut", "flac": _flac(1.0)[:100]}, {"__key__": "ok", "flac": _flac(1.0)}]
    out = str(tmp_path / "s.png")
    sheet = contact_sheet(samples, out, tile=96, label=None)
    assert sheet.images == 2  # drawn, not raised
    with Image.open(out) as img:
        pixels = np.asarray(img.convert("RGB")).astype(int)

    def near(tile: int, colour: tuple[int, int, int]) -> int:
        area = pixels[:, tile * 96 : (tile + 1) * 96]
        return int((np.abs(area - colour).sum(axis=2) < 60).sum())

    assert near(0, (255, 90, 90)) > 20 and near(0, (90, 200, 255)) == 0  # the reason, in red
    assert near(1, (90, 200, 255)) > 500  # the good clip's waveform


def test_show_grid_from_the_cli(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path)
    out = tmp_path / "g.png"
    done = _cli("show", folder, "--grid", str(out))
    assert done.returncode == 0, done.stderr
    with Image.open(out) as img:
        assert img.size == (4 * 160, 160)


def test_show_prints_the_rate_and_duration_of_audio_and_video(tmp_path: Path) -> None:
    from shardkit.tools import format_samples

    lines = "\n".join(format_samples(_samples(_media_folder(tmp_path, corrupt=True))))
    assert "audio" in lines and "16000 Hz, 1.00 s" in lines and "22050 Hz, 2.50 s" in lines
    assert "video" in lines and "25 fps, 2.00 s" in lines and "25 fps, 1.00 s" in lines
    assert "not readable (unreadable video header" in lines  # the cut MP4


# --------------------------------------------------------------------------- stats


def test_stats_reports_durations_and_rates(tmp_path: Path) -> None:
    result = stats(_media_folder(tmp_path, corrupt=True), label=None)
    audio, video = result.media["flac"], result.media["mp4"]
    # from the headers: the cut FLAC's STREAMINFO still says one second (verify --decode
    # is what reads a field to its end)
    assert audio.kind == "audio" and sorted(audio.durations) == pytest.approx([1.0, 1.0, 2.5])
    assert audio.rates == {16000.0: 2, 22050.0: 1} and audio.unreadable == 0
    assert video.kind == "video" and video.rates == {25.0: 2}
    assert sorted(video.durations) == pytest.approx([1.0, 2.0], abs=0.05)
    assert video.unreadable == 1  # the cut MP4 lost its moov box: no header to read
    described = result.to_dict()["media"]
    assert described["flac"]["duration_max"] == pytest.approx(2.5)
    text = shardkit.tools.format_stats(result)
    assert "media" in text and "22050 Hz" in text and "25 fps" in text


def test_stats_counts_an_audio_header_that_does_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with shardkit.ShardWriter(str(folder / "s-%06d.tar"), max_count=10) as sink:
        sink.write({"__key__": "x", "wav": b"RIFF\x00\x00not a wave"})
        sink.write({"__key__": "y", "wav": _flac(0.5)})  # FLAC bytes named wav: it reads
    seen = stats(str(folder), label=None).media["wav"]
    assert seen.unreadable == 1 and seen.durations == [pytest.approx(0.5)]
    assert stats(str(folder), label=None, media=False).media == {}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "shardkit", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_stats_cli_prints_the_media_lines(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path)
    done = _cli("stats", folder, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["media"]["mp4"]["rates"] == {"25": 2}
    done = _cli("stats", folder)
    assert done.returncode == 0, done.stderr
    assert "16000 Hz (1)" in done.stdout and "25 fps (2)" in done.stdout


# --------------------------------------------------------------------------- verify


def test_verify_decode_reports_a_corrupt_clip_with_its_reason(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path, corrupt=True)
    problems = verify(folder, decode=True).problems
    by_key = {p.key: p.message for p in problems}
    assert set(by_key) == {"bad/flac", "bad/mp4"}, problems
    assert by_key["bad/flac"].startswith("field 'flac' does not decode (")
    assert "FLAC" in by_key["bad/flac"] or "truncated" in by_key["bad/flac"]
    assert "truncated MP4" in by_key["bad/mp4"]
    assert verify(folder).ok  # without --decode the fields are not read


def test_verify_decode_from_the_cli(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path, corrupt=True)
    done = _cli("verify", folder, "--decode")
    assert done.returncode != 0
    assert "bad/flac" in done.stdout + done.stderr and "bad/mp4" in done.stdout + done.stderr
    good = _media_folder(tmp_path / "good")
    done = _cli("verify", good, "--decode")
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- view


def test_view_grid_has_thumbnails_for_audio_and_video(tmp_path: Path) -> None:
    folder = _media_folder(tmp_path, corrupt=True)
    with Viewer(folder, port=0).start() as viewer:
        grid = get(viewer.url, "/")[2].decode()
        assert "placeholder" not in grid.split("<div class=grid>")[1]
        for index in range(4):
            assert f'src="/thumb/{index}"' in grid
            status, headers, body = get(viewer.url, f"/thumb/{index}")
            assert status == 200 and headers["Content-Type"] == "image/jpeg"
            assert headers["X-Content-Type-Options"] == "nosniff"
            with Image.open(io.BytesIO(body)) as img:
                pixels = np.asarray(img.convert("RGB")).astype(int)
            assert max(img.size) <= 160 and pixels.std() > 10  # drawn, not blank
        # a clip that does not decode is a 415, never a crash
        assert get(viewer.url, "/thumb/4")[0] == 415
        assert get(viewer.url, "/thumb/5")[0] == 415
        sample = get(viewer.url, "/sample/2")[2].decode()
        assert 'poster="/thumb/2/0"' in sample and "<video" in sample
        page = get(viewer.url, "/stats")[2].decode()
        assert "<h2>audio and video</h2>" in page
        assert "16000 Hz (2)" in page and "22050 Hz (1)" in page and "25 fps (2)" in page
