"""What a clip costs: ``shardkit.video(frames=16)`` from the middle of a ~200 MB field.

Run: ``.venv/bin/python bench/clip.py [--frames 2000] [--dir /dev/shm/shardkit-clip]``

Writes (once, kept in ``--dir``) a tar shard holding one H.264 video of noise that
scrolls (640x360, 30 fps, a keyframe every 60 frames, near-lossless: ~100 KB a frame, so
2,000 frames are a ~200 MB field). Then, each in a fresh process:

* the imports alone (Python, numpy, PyAV, shardkit, and whatever else the decoding
  process had loaded by its end): the constant every process pays;
* ``Dataset(shard, copy=...).decode(video(frames=16, start=MIDDLE))``, its first sample,
  with ``copy=True`` (the field read into ``bytes``) and ``copy=False`` (a memoryview of
  the memory-mapped shard, which PyAV reads through ``codecs.ViewFile``): peak RSS
  (VmHWM: anonymous memory and the pages of the map it touched) and seconds;
* with ``copy=False``, how many frames each clip decoded (the clip's and those since the
  keyframe it sought to) at a keyframe, between keyframes and just before one.

The target (issue 22): with ``copy=False``, peak RSS < the constant + 2x the decoded clip.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _results import Results, add_json_option  # noqa: E402

FPS, GOP = 30, 60
HEAVY = ("numpy", "av", "torch", "soundfile", "PIL")

_PEAK = r"""
def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

def peak_mb():
    return status_mb("VmHWM")
"""

_IMPORTS = (
    _PEAK
    + r"""
import importlib, json, sys
import shardkit
for name in json.loads(sys.stdin.read()):
    try:
        importlib.import_module(name)
    except Exception:  # a module only its package imports the right way
        pass
print(json.dumps({"peak_mb": peak_mb()}))
"""
)

_DECODE = (
    _PEAK
    + r"""
import json, sys, time
import shardkit
shard, copy, start = sys.argv[1], sys.argv[2] == "True", float(sys.argv[3])
asked = json.loads(sys.argv[4])
dataset = shardkit.Dataset(shard, copy=copy).decode(
    shardkit.video(frames=16, start=start), only="mp4", threads=1
)
started = time.perf_counter()
sample = next(iter(dataset))
seconds = time.perf_counter() - started
clip = sample["mp4"].frames
result = {"peak_mb": peak_mb(), "seconds": seconds, "clip_mb": clip.nbytes / 2**20,
          "shape": list(clip.shape), "modules": sorted(m for m in sys.modules if m != "__main__")}
result["resident"] = {k: status_mb(k) for k in ("RssAnon", "RssFile", "RssShmem")}
if asked["seeks"]:  # frames each clip decodes, on the mapped field (after the peak was read)
    from shardkit.codecs._video import read_clip
    raw = next(iter(shardkit.Dataset(shard, copy=False)))["mp4"]
    result["field"] = f"{type(raw).__name__}, {len(raw) / 2**20:.0f} MB"
    result["decoded"] = {
        f"{at:.3f}": read_clip(raw, 16, start=at, fraction=0.0).decoded for at in asked["seeks"]
    }
print(json.dumps(result))
"""
)


def write_shard(folder: str, frames: int, size: tuple[int, int] = (640, 360)) -> str:
    """The shard (written once): one sample, ``mp4`` the long video, ``txt`` a caption."""
    import av
    import numpy as np

    import shardkit

    shard = os.path.join(folder, "clip-000000.tar")
    if os.path.exists(shard):
        return shard
    os.makedirs(folder, exist_ok=True)
    video = os.path.join(folder, "long.mp4")
    width, height = size
    noise = np.random.default_rng(0).integers(0, 255, (height, width, 3), np.uint8)
    with av.open(video, mode="w") as out:
        stream = out.add_stream("libx264", rate=FPS, options={"preset": "ultrafast", "crf": "10"})
        stream.width, stream.height, stream.pix_fmt, stream.gop_size = width, height, "yuv420p", GOP
        for i in range(frames):
            image = np.roll(noise, i, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    with open(video, "rb") as file:
        data = file.read()
    with shardkit.ShardWriter(os.path.join(folder, "clip-%06d.tar")) as writer:
        writer.write({"__key__": "long", "mp4": data, "txt": "noise that scrolls"})
    os.remove(video)
    return shard


def child(code: str, *args: str, stdin: str = "") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(HERE), "src")}
    command = [sys.executable, "-c", code, *args]
    out = subprocess.run(command, check=True, env=env, capture_output=True, text=True, input=stdin)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--dir", default="/dev/shm/shardkit-clip")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each case (least kept)")
    add_json_option(parser, "clip")
    args = parser.parse_args()
    shard = write_shard(args.dir, args.frames)
    middle = args.frames // 2 / FPS
    keyframe = args.frames // 2 // GOP * GOP  # the keyframe before the middle
    seeks = [keyframe / FPS, middle, (keyframe + GOP - 1) / FPS]
    runs: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for _ in range(args.repeat):
        for copy in (True, False):
            asked = {"seeks": [] if copy else seeks}
            runs[copy].append(child(_DECODE, shard, str(copy), f"{middle!r}", json.dumps(asked)))
    loaded = sorted({m for run in runs[True] + runs[False] for m in run["modules"]})
    constant = min(child(_IMPORTS, stdin=json.dumps(loaded))["peak_mb"] for _ in range(args.repeat))
    small = write_shard(os.path.join(args.dir, "small"), 3 * GOP, size=(64, 48))
    asked = json.dumps({"seeks": []})
    warm = min(child(_DECODE, small, "False", "2.0", asked)["peak_mb"] for _ in range(args.repeat))
    best = {copy: min(runs[copy], key=lambda run: run["peak_mb"]) for copy in runs}
    clip = best[False]["clip_mb"]
    print(f"field: {best[False]['field']}; clip: 16 frames {best[False]['shape']}, {clip:.1f} MB")
    heavy = ", ".join(m for m in HEAVY if m in loaded)
    print(
        f"constant: {constant:.0f} MB (Python and the {len(loaded)} modules the decoding "
        f"process loaded, {heavy} among them, imported alone); {warm:.0f} MB with a clip of "
        "a 64x48 video decoded the same way (the decoder's code paged in, the reader's buffer)"
    )
    for copy in (True, False):
        run = best[copy]
        print(
            f"copy={copy}: peak RSS {run['peak_mb']:.0f} MB (+{run['peak_mb'] - constant:.0f} "
            f"over the constant, {(run['peak_mb'] - constant) / clip:.2f}x the clip), "
            f"{min(r['seconds'] for r in runs[copy]):.2f} s"
        )
    parts = ", ".join(f"{k} {v:.0f} MB" for k, v in best[False]["resident"].items())
    print(f"copy=False, resident at the end: {parts} (RssShmem: the map's pages it read)")
    for name, base in (("imports alone", constant), ("warm", warm)):
        target = base + 2 * clip
        verdict = "met" if best[False]["peak_mb"] < target else "NOT met"
        print(f"target, constant {name}: copy=False peak < {target:.0f} MB: {verdict}")
    for at, decoded in best[False]["decoded"].items():
        frame = round(float(at) * FPS)
        print(
            f"clip at {float(at):.2f} s (frame {frame}, {frame % GOP} after a keyframe): "
            f"{decoded} frames decoded (GOP {GOP})"
        )
    results = Results("clip")
    rows = [
        {"name": f"shardkit copy={copy}", "rate": best[copy]["peak_mb"]} for copy in (False, True)
    ]
    rows.append({"name": "imports alone", "rate": constant})
    rows.append({"name": "imports + a 64x48 clip", "rate": warm})
    results.section(
        "16-frame clip from the middle of a 200 MB field: peak RSS", "MB", rows, better="lower"
    )
    seconds = [
        {"name": f"shardkit copy={copy}", "rate": min(r["seconds"] for r in runs[copy])}
        for copy in (False, True)
    ]
    results.section("16-frame clip: seconds", "s", seconds, better="lower")
    results.write(args.json)


if __name__ == "__main__":
    main()
