"""Hugging Face ``datasets.load_dataset("webdataset")`` reads shardkit's audio and video
builds (the real ``datasets``, offline, on local shards): the same bytes, and the same
decoded values as shardkit's ``audio()`` / ``video()`` and soundfile give.

Two limits are ``datasets``' own (docs/reading.md, "Hugging Face datasets"): its Audio
and Video features need torchcodec (an Audio column even to load, PR #7761), and it
refuses shards whose first samples have different fields (#7055). Both go away with
``features=`` naming the columns; the tests use that where the default cannot run.
"""

from __future__ import annotations

import glob
import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile

import shardkit
from shardkit import BuildOptions

RATE = 16000


def _sound(i: int, fmt: str) -> bytes:
    """Half a second of a tone (stereo for WAV, mono for FLAC), 16-bit."""
    t = np.arange(RATE // 2) / RATE
    tone = (0.3 * np.sin(2 * np.pi * (220 + 40 * i) * t)).astype(np.float32)
    samples = np.stack([tone, -tone], axis=1) if fmt == "WAV" else tone
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, RATE, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def _video(i: int) -> bytes:
    """30 frames (64x48, 30 fps), frame j flat grey 8 * ((i + j) % 30)."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt, stream.gop_size = 64, 48, "yuv420p", 10
        for j in range(30):
            image = np.full((48, 64, 3), 8 * ((i + j) % 30), np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def _build(folder: Path, files: dict[str, bytes]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``files`` (name: bytes) built with ``--layout samples``: the shards and their
    samples by key, as shardkit reads them."""
    source = folder / "src"
    source.mkdir()
    for name, data in files.items():
        (source / name).write_bytes(data)
    out = folder / "out"
    result = shardkit.build(str(source), str(out), options=BuildOptions(layout="samples"))
    assert not result.skipped
    shards = sorted(glob.glob(f"{out}/*.tar"))
    return shards, {s["__key__"]: s for s in shardkit.Dataset(shards)}


def _load(datasets: Any, shards: list[str], cache: Path, **columns: Any) -> Any:
    """``load_dataset("webdataset")`` of ``shards``; with ``columns``, those features."""
    features = None
    if columns:
        text = datasets.Value("string")
        features = datasets.Features({**columns, "__key__": text, "__url__": text})
    return datasets.load_dataset(
        "webdataset",
        data_files={"train": shards},
        split="train",
        cache_dir=str(cache),
        features=features,
    )


@pytest.mark.parametrize(("ext", "fmt"), [("flac", "FLAC"), ("wav", "WAV")])
def test_audio_with_transcripts_loads_with_the_same_bytes_and_samples(
    offline: Any, tmp_path: Path, ext: str, fmt: str
) -> None:
    files = {f"u{i}.{ext}": _sound(i, fmt) for i in range(4)}
    files |= {f"u{i}.txt": f"utterance {i}".encode() for i in range(4)}
    shards, ours = _build(tmp_path, files)
    binary, text = offline.Value("binary"), offline.Value("string")
    loaded = _load(offline, shards, tmp_path / "cache", **{ext: binary, "txt": text})
    assert sorted(row["__key__"] for row in loaded) == sorted(ours) == [f"u{i}" for i in range(4)]
    decoded = {
        key: audio
        for key, audio in shardkit.Dataset(shards).decode(shardkit.audio()).to_tuple("__key__", ext)
    }
    for row in loaded:
        key = row["__key__"]
        assert row[ext] == ours[key][ext] == files[f"{key}.{ext}"]
        assert row["txt"] == f"utterance {key[1:]}"
        samples, rate = soundfile.read(io.BytesIO(row[ext]), dtype="float32", always_2d=True)
        assert rate == decoded[key].rate == RATE
        np.testing.assert_array_equal(samples.T, decoded[key].samples)
    if importlib.util.find_spec("torchcodec") is None:  # datasets' Audio needs it to load
        with pytest.raises(offline.exceptions.DatasetGenerationError) as info:
            _load(offline, shards, tmp_path / "default")
        assert "install 'torchcodec'" in str(info.value.__cause__)


def test_video_with_captions_loads_with_the_same_bytes_and_clips(
    offline: Any, tmp_path: Path
) -> None:
    files = {f"c{i}.mp4": _video(i) for i in range(3)}
    files |= {f"c{i}.txt": f"caption {i}".encode() for i in range(3)}
    shards, ours = _build(tmp_path, files)
    loaded = _load(offline, shards, tmp_path / "cache")  # the default: a Video column
    assert isinstance(loaded.features["mp4"], offline.Video)
    loaded = loaded.cast_column("mp4", offline.Video(decode=False))  # decoding: torchcodec
    spec = shardkit.video(frames=4, start=0.5)
    clips = dict(shardkit.Dataset(shards).decode(spec).to_tuple("__key__", "mp4"))
    assert sorted(row["__key__"] for row in loaded) == sorted(clips) == ["c0", "c1", "c2"]
    for row in loaded:
        key = row["__key__"]
        assert row["mp4"]["bytes"] == ours[key]["mp4"] == files[f"{key}.mp4"]
        assert row["txt"] == f"caption {key[1:]}"
        theirs = spec("mp4", row["mp4"]["bytes"])
        assert theirs is not None
        np.testing.assert_array_equal(theirs.frames, clips[key].frames)
        np.testing.assert_array_equal(theirs.times, clips[key].times)


def test_samples_of_several_kinds_in_one_shard_load_with_features(
    offline: Any, tmp_path: Path
) -> None:
    files = {"a0.flac": _sound(0, "FLAC"), "a0.txt": b"speech", "v0.mp4": _video(0)}
    files |= {"v0.txt": b"a clip", "w0.wav": _sound(1, "WAV"), "w0.txt": b"a wave"}
    shards, ours = _build(tmp_path, files)
    with pytest.raises(ValueError, match="don't share the same prefix or the same types"):
        _load(offline, shards, tmp_path / "default")  # datasets #7055: theirs
    binary = offline.Value("binary")
    columns = {"flac": binary, "wav": binary, "mp4": binary, "txt": offline.Value("string")}
    loaded = _load(offline, shards, tmp_path / "cache", **columns)
    for row in loaded:
        sample = ours[row["__key__"]]
        for field in columns:  # what a sample lacks is None
            assert row[field] == (sample[field].decode() if field == "txt" else sample.get(field))


def test_the_hugging_face_example_of_docs_reading_runs(offline: Any, tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "reading.md").read_text()
    body = text.split("\n### Hugging Face `datasets`\n", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    files = {f"u{i}.flac": _sound(i, "FLAC") for i in range(2)}
    files |= {f"u{i}.txt": f"utterance {i}".encode() for i in range(2)}
    shards, _ = _build(tmp_path, files)
    for i, shard in enumerate(shards):
        Path(shard).rename(tmp_path / f"speech-{i:06d}.tar")
    (tmp_path / "example.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^u0 \(8000,\) 16000 utterance 0$", done.stdout, flags=re.M), done.stdout
