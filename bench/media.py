"""Audio and video corpora: write shards and read them back decoded, shardkit vs webdataset.

Run: ``.venv/bin/python bench/media.py [--quick] [--audio 2000] [--videos 200]``

Generates (once per run, in a temporary folder) an audio corpus of FLAC clips (16 kHz
mono, 2 to 4 seconds of tones and noise) each with a transcript, and a video corpus of
H.264 MP4 clips made with PyAV (160x120, 24 fps, 48 frames, a keyframe every 12 frames).
Then each case runs in a fresh process that warms up on two samples first (imports:
webdataset imports torch; shardkit loads its modules on first use) and reports samples
per second, the process's peak RSS (``VmHWM``, imports included) and what the timed run
added to it over the warmed-up process:

- write: the corpus files into 64-sample shards, ``shardkit.ShardWriter`` (which also
  writes each shard's ``.idx``) vs webdataset's ``ShardWriter``;
- read and decode: ``shardkit.Dataset(...).decode(shardkit.audio())`` /
  ``.decode(shardkit.video(frames=8))`` vs ``webdataset.WebDataset(...)`` with a ``.map``
  that decodes with soundfile / PyAV directly. webdataset's own ``torch_audio`` and
  ``torch_video`` decoders need torchaudio / torchvision, which do not work with the torch
  pinned here; the ``.map`` does the work they do (``torchaudio.load`` decodes the whole
  file, ``torchvision.io.read_video`` every frame), and a second video row decodes only the
  first 8 frames, the least any decoder without seeking can do.

``--quick``: 200 clips and 20 videos (under a minute). Results: bench/results/media.json.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import Results, add_json_option

RATE = 16000
FPS = 24
VIDEO_FRAMES = 48
CLIP = 8  # frames a read decodes from each video
PER_SHARD = 64
WORDS = "the a speech sound river light stone quiet green over under after seven north"


# --------------------------------------------------------------------------- corpora


def make_audio(folder: str, count: int) -> None:
    import numpy as np
    import soundfile as sf

    rng = np.random.default_rng(0)
    words = random.Random(0)
    for i in range(count):
        seconds = 2 + 2 * rng.random()
        t = np.arange(int(seconds * RATE), dtype=np.float32) / RATE
        tone = 0.3 * np.sin(2 * np.pi * (150 + 400 * rng.random()) * t)
        noise = 0.05 * rng.standard_normal(t.size)
        sf.write(os.path.join(folder, f"{i:06d}.flac"), (tone + noise).astype(np.float32), RATE)
        text = " ".join(words.choice(WORDS.split()) for _ in range(words.randint(5, 15)))
        with open(os.path.join(folder, f"{i:06d}.txt"), "w", encoding="utf-8") as file:
            file.write(text)


def make_videos(folder: str, count: int) -> None:
    import av
    import numpy as np

    rng = np.random.default_rng(1)
    for i in range(count):
        base = rng.integers(0, 255, (120, 160, 3), np.uint8)
        with av.open(os.path.join(folder, f"{i:06d}.mp4"), mode="w") as out:
            stream = out.add_stream("libx264", rate=FPS, options={"preset": "ultrafast"})
            stream.width, stream.height, stream.pix_fmt, stream.gop_size = 160, 120, "yuv420p", 12
            for f in range(VIDEO_FRAMES):
                image = np.roll(base, 2 * f, axis=1)
                for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        with open(os.path.join(folder, f"{i:06d}.txt"), "w", encoding="utf-8") as file:
            file.write(f"clip {i}")


def corpus_samples(folder: str) -> Iterator[dict[str, Any]]:
    """The corpus files as samples: ``000001.flac`` + ``000001.txt`` is one."""
    sample: dict[str, Any] = {}
    for name in sorted(os.listdir(folder)):  # a sample's files are adjacent: read as they come
        key, ext = name.split(".", 1)
        if sample and sample["__key__"] != key:
            yield sample
            sample = {}
        with open(os.path.join(folder, name), "rb") as file:
            sample.setdefault("__key__", key)
            sample[ext] = file.read()
    if sample:
        yield sample


# --------------------------------------------------------------------------- cases


def shardkit_write(corpus: str, out: str, limit: int | None = None) -> int:
    import shardkit

    count = 0
    with shardkit.ShardWriter(os.path.join(out, "shard-%06d.tar"), max_count=PER_SHARD) as sink:
        for sample in itertools.islice(corpus_samples(corpus), limit):
            sink.write(sample)
            count += 1
    return count


def webdataset_write(corpus: str, out: str, limit: int | None = None) -> int:
    import webdataset as wds

    count = 0
    pattern = os.path.join(out, "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=PER_SHARD, verbose=0) as sink:
        for sample in itertools.islice(corpus_samples(corpus), limit):
            sink.write(sample)
            count += 1
    return count


def _shards(folder: str) -> list[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tar"))


def shardkit_read_audio(shards: str, limit: int | None = None) -> int:
    import shardkit

    count = 0
    dataset = shardkit.Dataset(_shards(shards)).decode(shardkit.audio())
    for sample in itertools.islice(dataset, limit):
        assert sample["flac"].samples.dtype.name == "float32" and sample["txt"]
        count += 1
    return count


def _soundfile_decode(sample: dict[str, Any]) -> dict[str, Any]:
    import soundfile as sf

    samples, rate = sf.read(io.BytesIO(sample["flac"]), dtype="float32", always_2d=True)
    return {**sample, "flac": (samples.T.copy(), rate), "txt": sample["txt"].decode("utf-8")}


def webdataset_read_audio(shards: str, limit: int | None = None) -> int:
    import webdataset as wds

    count = 0
    dataset = wds.WebDataset(_shards(shards), shardshuffle=False).map(_soundfile_decode)
    for sample in itertools.islice(dataset, limit):
        assert sample["flac"][0].dtype.name == "float32" and sample["txt"]
        count += 1
    return count


def shardkit_read_video(shards: str, limit: int | None = None) -> int:
    import shardkit

    count = 0
    dataset = shardkit.Dataset(_shards(shards)).decode(shardkit.video(frames=CLIP))
    for sample in itertools.islice(dataset, limit):
        assert sample["mp4"].frames.shape[0] == CLIP
        count += 1
    return count


def _pyav_frames(data: bytes, limit: int | None) -> Any:
    import av
    import numpy as np

    frames = []
    with av.open(io.BytesIO(data)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="rgb24"))
            if limit is not None and len(frames) == limit:
                break
    return np.stack(frames)


def _whole_video(sample: dict[str, Any]) -> dict[str, Any]:
    frames = _pyav_frames(sample["mp4"], None)  # what torchvision.io.read_video returns
    start = random.Random(sample["__key__"]).randrange(len(frames) - CLIP + 1)
    return {**sample, "mp4": frames[start : start + CLIP]}


def _first_frames(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "mp4": _pyav_frames(sample["mp4"], CLIP)}


def _webdataset_video(
    shards: str, decode: Callable[[dict[str, Any]], dict[str, Any]], limit: int | None
) -> int:
    import webdataset as wds

    count = 0
    dataset = wds.WebDataset(_shards(shards), shardshuffle=False).map(decode)
    for sample in itertools.islice(dataset, limit):
        assert sample["mp4"].shape[0] == CLIP
        count += 1
    return count


# case -> run(source, output folder, at most this many samples)
CASES: dict[str, Callable[[str, str, int | None], int]] = {
    "shardkit-write": shardkit_write,
    "webdataset-write": webdataset_write,
    "shardkit-read-audio": lambda shards, _, n: shardkit_read_audio(shards, n),
    "webdataset-read-audio": lambda shards, _, n: webdataset_read_audio(shards, n),
    "shardkit-read-video": lambda shards, _, n: shardkit_read_video(shards, n),
    "webdataset-read-video-whole": lambda s, _, n: _webdataset_video(s, _whole_video, n),
    "webdataset-read-video-first": lambda s, _, n: _webdataset_video(s, _first_frames, n),
}


def _peak_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(case: str, source: str, out: str) -> None:
    """One case, after a warm-up on its first two samples (which imports and loads what
    it uses: webdataset imports torch, shardkit loads its modules on first use), so the
    seconds and the peak RSS added are the work's own."""
    with tempfile.TemporaryDirectory() as warm:
        CASES[case](source, warm, 2)
    base = _peak_mb()
    started = time.perf_counter()
    count = CASES[case](source, out, None)
    seconds = time.perf_counter() - started
    peak = _peak_mb()
    result = {"count": count, "seconds": seconds, "peak_mb": peak, "added_mb": peak - base}
    print(json.dumps(result))


def run_case(case: str, source: str, out: str = "-") -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", case, source, out],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{case} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def _row(name: str, result: dict[str, float]) -> dict[str, Any]:
    return {
        "name": name,
        "rate": round(result["count"] / result["seconds"], 1),
        "peak_mb": round(result["peak_mb"], 1),
        "added_mb": round(result["added_mb"], 1),
    }


def _print(title: str, rows: list[dict[str, Any]]) -> None:
    print(title)
    ours = rows[0]["rate"]
    for row in rows:
        ratio = "" if row is rows[0] else f"  (shardkit {ours / row['rate']:.2f}x)"
        memory = f"peak RSS {row['peak_mb']:>4.0f} MB (run +{row['added_mb']:.0f})"
        print(f"  {row['name']:<40} {row['rate']:>8,.1f}/s  {memory}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 clips, 20 videos")
    parser.add_argument("--audio", type=int, default=2000, help="audio clips")
    parser.add_argument("--videos", type=int, default=200, help="video clips")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    add_json_option(parser, "media")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    clips, videos = (200, 20) if args.quick else (args.audio, args.videos)
    results = Results("media")
    with tempfile.TemporaryDirectory(prefix="shardkit-media-") as root:
        for kind, count, make, reads in (
            (
                "audio",
                clips,
                make_audio,
                [
                    ("shardkit .decode(shardkit.audio())", "shardkit-read-audio"),
                    ("webdataset .map(soundfile)", "webdataset-read-audio"),
                ],
            ),
            (
                "video",
                videos,
                make_videos,
                [
                    (f"shardkit .decode(shardkit.video({CLIP}))", "shardkit-read-video"),
                    ("webdataset .map(PyAV, every frame)", "webdataset-read-video-whole"),
                    (f"webdataset .map(PyAV, first {CLIP})", "webdataset-read-video-first"),
                ],
            ),
        ):
            corpus = os.path.join(root, kind)
            os.makedirs(corpus)
            make(corpus, count)
            size = sum(os.path.getsize(os.path.join(corpus, n)) for n in os.listdir(corpus))
            what = "FLAC clips + transcripts" if kind == "audio" else "MP4 clips + captions"
            label = f"{count:,} {what}, {size / 2**20:.1f} MB"
            outs = {name: os.path.join(root, f"{kind}-{name}") for name in ("sk", "wds")}
            for out in outs.values():
                os.makedirs(out)
            rows = [
                _row("shardkit ShardWriter", run_case("shardkit-write", corpus, outs["sk"])),
                _row("webdataset ShardWriter", run_case("webdataset-write", corpus, outs["wds"])),
            ]
            _print(f"{kind} write: {label}", rows)
            results.section(f"{kind} write ({label})", "samples/s", rows)
            rows = [_row(name, run_case(case, outs["sk"])) for name, case in reads]
            _print(f"{kind} read and decode: {label}", rows)
            results.section(f"{kind} read and decode ({label})", "samples/s", rows)
    results.write(args.json)


if __name__ == "__main__":
    main()
