"""URL-list benchmark: `shardkit build` against `img2dataset` on the same http URL list.

Run: ``scripts/test-services .venv/bin/python bench/urls.py [--images N] [--workers W]
[--img2dataset /tmp/i2d-venv/bin/img2dataset] [--repeat R]``

scripts/test-services starts nginx on loopback; this script links the corpus of
``bench/build.py`` (JPEGs of 200-800 px, plus zero-byte, truncated and non-image files;
cached under ``/dev/shm/shardkit-bench/``) into nginx's folder and writes one URL list:
every corpus file (the corrupt ones included), 3% URLs that answer 404, and 20 URLs to a
dead port, in a shuffled order. img2dataset 1.47 runs from its own venv (``pip install
img2dataset==1.47.0`` into a venv under /tmp; it is not a shardkit dependency).

Both run as whole CLI processes with the same number of processes (``--workers``), the
same shard size, and no retries of their own beyond their defaults: pass-through
(img2dataset: ``--resize_mode no --disable_all_reencoding True``), then the shorter side
scaled to 256 (``--resize 256``; img2dataset: ``--image_size 256 --resize_mode
keep_ratio --resize_only_if_bigger False``), JPEG quality 90 for both. Reported:
images/s over the images packed, by the wall time of the whole command (startup
included) and by the run time each tool reports itself ("own s": shardkit's summary line,
img2dataset's URL count over its own URLs/s),
peak RSS (largest process and sum over the process tree, VmHWM from /proc), and how
many corrupt images each packed (shardkit's header check over every output JPEG).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build as buildbench  # bench/build.py: the corpus and the measuring
from _results import Results, add_json_option

SHARD_COUNT = 1_000  # samples per shard, for both (img2dataset splits work by shard)
MISSING_SHARE = 0.03
DEAD_URLS = 20
RESIZE = 256
QUALITY = 90


def url_list(corpus: str, base: str, folder: str, info: dict[str, Any]) -> list[str]:
    """Link the corpus into nginx's folder; every file's URL, 404s and a dead port."""
    link = os.path.join(folder, "corpus")
    if not os.path.exists(link):
        os.symlink(corpus, link)
    urls = [f"{base}/corpus/{rel}" for _, rel in buildbench.list_files(corpus)]
    missing = int(len(urls) * MISSING_SHARE)
    urls += [f"{base}/corpus/missing/img_{i:06d}.jpg" for i in range(missing)]
    with socket.create_server(("127.0.0.1", 0)) as sock:
        dead = sock.getsockname()[1]
    urls += [f"http://127.0.0.1:{dead}/img_{i:06d}.jpg" for i in range(DEAD_URLS)]
    random.Random(0).shuffle(urls)
    info.update(missing=missing, dead=DEAD_URLS, urls=len(urls))
    return urls


def shardkit_cmd(urls: str, out: str, workers: int, resize: bool) -> list[str]:
    cmd = [sys.executable, "-m", "shardkit", "-q", "build", urls, out, "--workers", str(workers)]
    cmd += ["--max-count", str(SHARD_COUNT), "--no-shuffle"]
    if resize:
        cmd += ["--resize", str(RESIZE), "--quality", str(QUALITY)]
    return cmd


def img2dataset_cmd(exe: str, urls: str, out: str, workers: int, resize: bool) -> list[str]:
    cmd = [exe, f"--url_list={urls}", "--input_format=txt", f"--output_folder={out}"]
    cmd += ["--output_format=webdataset", f"--processes_count={workers}", "--thread_count=32"]
    cmd += [f"--number_sample_per_shard={SHARD_COUNT}", "--distributor=multiprocessing"]
    cmd += ["--enable_wandb=False", f"--encode_quality={QUALITY}"]
    if resize:
        cmd += [f"--image_size={RESIZE}", "--resize_mode=keep_ratio"]
        cmd += ["--resize_only_if_bigger=False"]
    else:
        cmd += ["--resize_mode=no", "--disable_all_reencoding=True"]
    return cmd


def measure(cmd: list[str], out: str) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env
    )
    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            buildbench._tree_hwm(proc.pid, peaks, cpu)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    stdout, stderr = proc.communicate()
    stop.set()
    thread.join()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {stderr.decode()[-2000:]}")
    images = _packed(out)
    return {
        "wall": wall,
        "images": len(images),
        "rate": len(images) / wall,
        "rss_max": max(peaks.values(), default=0) / 1024,
        "rss_sum": sum(peaks.values()) / 1024,
        "cpu": sum(cpu.values()),
        "bad_packed": _bad(images),
        "self_s": _self_seconds(stdout.decode() + stderr.decode()),
        "summary": stdout.decode().strip().splitlines()[-2:],
    }


def _self_seconds(text: str) -> float:
    """The run time a tool reports itself (after its startup): shardkit's summary line,
    img2dataset's last ``total`` line (its count over its images per second)."""
    shardkit = re.findall(r"skipped, ([0-9.]+) s ->", text)
    if shardkit:
        return float(shardkit[-1])
    found = re.findall(r"images per sec: ([0-9.]+) - count: (\d+)", text)
    rate, count = found[-1] if found else ("nan", "0")
    return int(count) / float(rate)


def _packed(out: str) -> list[bytes]:
    from shardkit.formats.tar import iter_members

    images = []
    for name in sorted(os.listdir(out)):
        if name.endswith(".tar"):
            with open(os.path.join(out, name), "rb") as f:
                images += [m.data for m in iter_members(f) if m.name.endswith(".jpg")]
    return images


def _bad(images: list[bytes]) -> int:
    from shardkit.builder._validate import check_image
    from shardkit.errors import DataError

    bad = 0
    for data in images:
        try:
            check_image(data, "jpg")
        except DataError:
            bad += 1
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--cache", default="/dev/shm/shardkit-bench")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="best of R rounds per contender")
    parser.add_argument("--img2dataset", default="/tmp/i2d-venv/bin/img2dataset")
    parser.add_argument("--only", default="", help="pass or resize")
    add_json_option(parser, "urls")
    args = parser.parse_args()
    folder = os.environ.get("SHARDKIT_TEST_HTTP_ROOT")
    base = os.environ.get("SHARDKIT_TEST_HTTP_URL")
    if not folder or not base:
        raise SystemExit("no nginx: run this through scripts/test-services")
    corpus = os.path.join(args.cache, f"corpus-{args.images}-{args.classes}")
    info = buildbench.make_corpus(corpus, args.images, args.classes)
    work = os.path.join("/dev/shm", f"shardkit-urls-{os.getpid()}")
    os.makedirs(work)
    try:
        listing = os.path.join(work, "urls.txt")
        urls = url_list(corpus, base, folder, info)
        with open(listing, "w") as f:
            f.write("\n".join(urls) + "\n")
        csv = os.path.join(work, "urls.csv")
        with open(csv, "w") as f:
            f.write("path\n" + "\n".join(urls) + "\n")
        rows = []
        for resize in (False, True):
            if args.only and args.only != ("resize" if resize else "pass"):
                continue
            out = os.path.join(work, "out")
            commands = {
                "shardkit": shardkit_cmd(csv, out, args.workers, resize),
                "img2dataset": img2dataset_cmd(
                    args.img2dataset, listing, out, args.workers, resize
                ),
            }
            for name, cmd in commands.items():
                best = max((measure(cmd, out) for _ in range(args.repeat)), key=lambda r: r["rate"])
                best["cmd"] = " ".join(cmd)
                rows.append(("resize 256" if resize else "pass-through", name, best))
                print(json.dumps({"mode": rows[-1][0], "contender": name, **best}), flush=True)
        results = Results("urls")
        report(rows, info, args.workers, results)
        results.write(args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(
    rows: list[tuple[str, str, dict[str, Any]]],
    info: dict[str, Any],
    workers: int,
    results: Results,
) -> None:
    print(
        f"\n{info['urls']} URLs: {info['images']} JPEGs, {len(info['bad'])} corrupt files, "
        f"{info['missing']} missing (404), {info['dead']} to a dead port; {workers} processes"
    )
    print(
        "| mode | contender | images | images/s | wall s | own s | CPU s | RSS max MB | "
        "RSS sum MB | corrupt packed | shardkit / img2dataset (wall; own; per CPU s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    own = {(mode, name): r["images"] / r["self_s"] for mode, name, r in rows}
    per_cpu = {(mode, name): r["images"] / r["cpu"] for mode, name, r in rows}
    rates = {(mode, name): r["rate"] for mode, name, r in rows}
    for mode, name, r in rows:
        peer = rates.get((mode, "img2dataset"))
        ratio = ""
        if name == "shardkit" and peer:
            mine, theirs = own[(mode, "shardkit")], own[(mode, "img2dataset")]
            ratio = f"{rates[(mode, 'shardkit')] / peer:.2f}x; {mine / theirs:.2f}x"
            cpu_ratio = per_cpu[(mode, "shardkit")] / per_cpu[(mode, "img2dataset")]
            ratio += f"; {cpu_ratio:.2f}x"
        print(
            f"| {mode} | {name} | {r['images']} | {r['rate']:.0f} | {r['wall']:.1f} | "
            f"{r['self_s']:.1f} | "
            f"{r['cpu']:.1f} | {r['rss_max']:.0f} | {r['rss_sum']:.0f} | {r['bad_packed']} | "
            f"{ratio} |"
        )
    for mode in dict.fromkeys(mode for mode, _, _ in rows):
        results.section(
            f"build from {info['urls']} http URLs, {mode}",
            "images/s",
            [
                {"name": name, "rate": round(r["rate"]), "peak_mb": round(r["rss_sum"])}
                for m, name, r in rows
                if m == mode
            ],
        )


if __name__ == "__main__":
    main()
