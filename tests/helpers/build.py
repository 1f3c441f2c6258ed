"""Helpers for the build tests: small image corpora with bad files, output snapshots."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from typing import Any

from shardkit.demo import make_image_folder, make_jpeg

BAD_FILES = {
    "circle/empty.jpg": "empty file",
    "circle/cut.jpg": "truncated JPEG",
    "square/cut.png": "truncated PNG",
    "square/notes.jpg": "not an image",
    "stripes/readme.txt": "no image, audio or video file shares its name",
}


def make_png(seed: int = 0, size: tuple[int, int] = (40, 30)) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def make_flac(seconds: float = 0.25, seed: int = 0, rate: int = 16000) -> bytes:
    """A stereo FLAC tone of ``seconds`` (16-bit, ``rate`` Hz); ``seed`` sets its pitch."""
    import numpy as np
    import soundfile as sf

    t = np.arange(int(rate * seconds), dtype=np.float32) / rate
    tone = 0.3 * np.sin(2 * np.pi * (220 + 20 * seed) * t)
    buffer = io.BytesIO()
    sf.write(buffer, np.stack([tone, tone / 2], 1), rate, format="FLAC", subtype="PCM_16")
    return buffer.getvalue()


def make_mp4(frames: int = 12, width: int = 32, height: int = 24) -> bytes:
    """An MPEG-4 video of ``frames`` frames at 30 fps, frame i all of value 8 * i."""
    import av
    import numpy as np

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            image = np.full((height, width, 3), 8 * i % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buffer.getvalue()


def make_corpus_jpeg(seed: int = 0) -> bytes:
    return make_jpeg(random.Random(seed), 0)


def make_corpus(folder: str, count: int = 120, *, bad: bool = True, seed: int = 0) -> str:
    """An ImageFolder of ``count`` small JPEGs in three classes, plus the BAD_FILES."""
    make_image_folder(folder, count=count, seed=seed)
    if bad:
        good = make_jpeg(random.Random(seed + 1), 0)
        write(folder, "circle/empty.jpg", b"")
        write(folder, "circle/cut.jpg", good[: len(good) // 2])
        write(folder, "square/cut.png", make_png(seed)[:-20])
        write(folder, "square/notes.jpg", b"this is not an image\n")
        write(folder, "stripes/readme.txt", b"notes\n")
    return folder


def write(folder: str, rel: str, data: bytes) -> str:
    path = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def snapshot(out: str) -> dict[str, Any]:
    """Every visible file's bytes, with manifest.json parsed and its timing dropped."""
    files: dict[str, Any] = {}
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        if name == "manifest.json":
            manifest = json.loads(data)
            manifest.pop("timing")
            files[name] = manifest
        else:
            files[name] = data
    return files


def read_samples(out: str) -> list[dict[str, Any]]:
    """All samples of a tar build, in manifest order."""
    from shardkit.formats.tar import iter_samples

    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    samples = []
    for shard in manifest["shards"]:
        with open(os.path.join(out, shard["name"]), "rb") as f:
            samples.extend(iter_samples(f))
    return samples


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardkit", "build", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def resume_after(source: Any, out: str, options: Any, shards: int = 1) -> Any:
    """Build ``source`` into ``out``, stopped (KeyboardInterrupt) once ``shards`` shards
    are committed and before its manifest, then run again to the end; returns the
    resumed build's result."""
    import shardkit

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= shards:
            raise KeyboardInterrupt

    try:
        shardkit.build(source, out, options=options, progress=stop)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the build ended before it was stopped")
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    result = shardkit.build(source, out, options=options)
    assert result.resumed_tasks >= 1
    return result
