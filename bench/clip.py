"""What a clip costs: ``shardkit.video(frames=16)`` on one long video held in memory.

Run: ``.venv/bin/python bench/clip.py [--frames 3600] [--path /dev/shm/shardkit-clip.mp4]``

Writes (once) an H.264 video of noise that scrolls (640x360, 30 fps, a keyframe every 60
frames, near-lossless: ~100 KB a frame, so 3,600 frames are ~380 MB), then, each in a
fresh process that has read the file into memory (as a shard field is), decodes a
16-frame clip at the start, at a keyframe and just after one, and prints the frames it
decoded (the clip's and those since the keyframe it sought to), the seconds, and the
peak RSS it added over the loaded field, against the clip's own size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import sys, time
def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
import av, numpy  # their own memory is not the clip's
from shardkit.codecs._video import read_clip
data = open(sys.argv[1], "rb").read()
base = peak_mb()
started = time.perf_counter()
result = read_clip(data, 16, start=float(sys.argv[2]), fraction=0.0)
seconds = time.perf_counter() - started
print(f"start {sys.argv[2]:>5}s: decoded {result.decoded:>3} frames in {seconds:.3f} s; "
      f"peak RSS +{peak_mb() - base:.1f} MB over the {len(data) / 2**20:.0f} MB field; "
      f"the clip is {result.clip.frames.nbytes / 2**20:.1f} MB")
"""


def write_video(path: str, frames: int) -> None:
    import av
    import numpy as np

    width, height = 640, 360
    noise = np.random.default_rng(0).integers(0, 255, (height, width, 3), np.uint8)
    with av.open(path, mode="w") as out:
        stream = out.add_stream("libx264", rate=30, options={"preset": "ultrafast", "crf": "10"})
        stream.width, stream.height, stream.pix_fmt, stream.gop_size = width, height, "yuv420p", 60
        for i in range(frames):
            image = np.roll(noise, i, axis=1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=3600)
    parser.add_argument("--path", default="/dev/shm/shardkit-clip.mp4")
    args = parser.parse_args()
    if not os.path.exists(args.path):
        write_video(args.path, args.frames)
    middle = args.frames // 2 / 30
    env = {**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(HERE), "src")}
    for start in (0.0, middle, middle + 1.5):
        command = [sys.executable, "-c", _CHILD, args.path, f"{start:g}"]
        subprocess.run(command, check=True, env=env)


if __name__ == "__main__":
    main()
