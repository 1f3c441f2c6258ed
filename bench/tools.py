"""Shard-tool benchmark: ``shardkit cat``, ``split`` and ``verify`` against ``cat`` and ``tar -t``.

Run: ``.venv/bin/python bench/tools.py [--quick] [--gb 2] [--dir /dev/shm] [--repeat 3]
[--base OTHER_CHECKOUT]``

Makes a dataset of tar shards on tmpfs (image-like samples: 20-180 KB of bytes plus a
``cls`` and a ``json`` field; and a small-sample profile of ~3 KB samples), then times, in
one run and interleaved, every contender on the same bytes, each as its own process (the
console script, so start-up counts) whose peak RSS comes from ``os.wait4``:

- ``cat``: GNU cat of every shard into one file, against ``shardkit cat SHARDS -o FILE``;
- ``split``: GNU cat again (the bytes a splitter must copy), against ``shardkit split``;
- ``verify``: ``tar -t`` over every shard, against ``shardkit verify`` (headers, grouping,
  end marker); and ``sha256sum``, against ``shardkit verify`` of the folder with its
  manifest (every byte hashed and compared).

Throughput is dataset bytes / best wall time; the ratio is shardkit's throughput over the
baseline's (>= 0.5 is the goal). ``--base DIR`` adds the shardkit rows of another checkout
(``NAME@base``, run with ``DIR/src`` first on the path, bytecode compiled first), in the
same interleaved rounds: the previous version against this one, side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from _results import Results, add_json_option

BIN = os.path.dirname(sys.executable)
SHARDKIT = os.path.join(BIN, "shardkit")
GNU_TIME = "/usr/bin/time"


@dataclass
class Timing:
    name: str
    seconds: float
    rss_mb: float


def run(
    argv: Sequence[str] | str, *, shell: bool = False, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one contender and the processes it waited for.

    The peak RSS comes from GNU time (a small C parent, so the figure is the contender's,
    not this script's) or, without it, from ``os.wait4`` (then at least this script's RSS,
    which a forked child inherits in its high-water mark)."""
    command: list[str] = ["sh", "-c", str(argv)] if shell else [str(a) for a in argv]
    with tempfile.NamedTemporaryFile("r") as rss_file:
        if os.path.exists(GNU_TIME):
            command = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *command]
        started = time.perf_counter()
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"{argv!r} failed with status {proc.returncode}")
        text = rss_file.read().strip().splitlines()
    kb = int(text[-1]) if text and text[-1].isdigit() else usage.ru_maxrss
    return elapsed, kb / 1024


def make_dataset(folder: str, total: int, sample_range: tuple[int, int], shard_size: int) -> int:
    from shardkit.writer import ShardWriter

    rng = random.Random(0)
    pool = rng.randbytes(1 << 22)
    os.makedirs(folder, exist_ok=True)
    written = 0
    index = 0
    pattern = os.path.join(folder, "shard-%06d.tar")
    with ShardWriter(pattern, max_size=shard_size, max_count=None, encode=False) as sink:
        while written < total:
            size = rng.randint(*sample_range)
            start = rng.randrange(len(pool) - size)
            label = rng.randrange(1000)
            sink.write(
                {
                    "__key__": f"s{index:09d}",
                    "jpg": pool[start : start + size],
                    "cls": b"%d" % label,
                    "json": b'{"label":%d,"w":640,"h":480}' % label,
                }
            )
            written += size + 1600
            index += 1
    shards = []
    for info in sink.shards:
        with open(info.url, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        name = os.path.basename(info.url)
        shards.append(
            {"name": name, "samples": info.samples, "bytes": info.bytes, "sha256": digest}
        )
    manifest = {"format": "tar", "samples": index, "shards": shards}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return index


def contenders(folder: str, out: str) -> dict[str, tuple[list[str] | str, bool]]:
    """name -> (argv or shell line, shell?) for every contender."""
    shards = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tar"))
    quoted = " ".join(shards)
    single = os.path.join(out, "cat.tar")
    pattern = os.path.join(out, "split", "s-%06d.tar")
    return {
        "GNU cat > file": (f"cat {quoted} > {single}", True),
        "shardkit cat -o file": ([SHARDKIT, "cat", *shards, "-o", single], False),
        "shardkit split --max-size 100MB": (
            [SHARDKIT, "split", *shards, "-o", pattern, "--max-size", "100MB"],
            False,
        ),
        "tar -t (each shard)": (f"for f in {quoted}; do tar -tf $f; done", True),
        "cat | tar -t (reads all)": (f"cat {quoted} | tar -t", True),
        "shardkit verify SHARDS": ([SHARDKIT, "verify", "-q", *shards], False),
        "sha256sum": (f"sha256sum {quoted}", True),
        "shardkit verify FOLDER (manifest)": ([SHARDKIT, "verify", "-q", folder], False),
        "shardkit --version": ([SHARDKIT, "--version"], False),
    }


# task -> contenders, the baseline first
TASKS = {
    "cat": ["GNU cat > file", "shardkit cat -o file"],
    "split": ["GNU cat > file", "shardkit split --max-size 100MB"],
    "verify": ["tar -t (each shard)", "cat | tar -t (reads all)", "shardkit verify SHARDS"],
    "verify+sha256": ["sha256sum", "shardkit verify FOLDER (manifest)"],
    "start-up": ["shardkit --version"],
}


BASE = "@base"


def with_base(
    commands: dict[str, tuple[list[str] | str, bool]], base: str
) -> dict[str, tuple[list[str] | str, bool, dict[str, str] | None]]:
    """``commands`` with their environments: with a ``base`` checkout, each shardkit
    contender again as ``NAME@base``, run with ``base/src`` first on the path."""
    out: dict[str, tuple[list[str] | str, bool, dict[str, str] | None]] = {}
    env = {**os.environ, "PYTHONPATH": os.path.join(base, "src")} if base else None
    for name, (argv, shell) in commands.items():
        out[name] = (argv, shell, None)
        if env is not None and name.startswith("shardkit"):
            out[name + BASE] = (argv, shell, env)
    return out


def tasks(base: str) -> dict[str, list[str]]:
    """:data:`TASKS`, with each shardkit contender's ``@base`` row after it."""
    if not base:
        return TASKS
    return {
        task: [m for n in names for m in ([n, n + BASE] if n.startswith("shardkit") else [n])]
        for task, names in TASKS.items()
    }


def bench_profile(
    label: str, folder: str, out: str, repeat: int, results: Results, base: str = ""
) -> None:
    data_bytes = sum(
        os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".tar")
    )
    best: dict[str, Timing] = {}
    for _ in range(repeat):  # interleaved: every contender once per round
        for name, (argv, shell, env) in with_base(contenders(folder, out), base).items():
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(os.path.join(out, "split"))
            seconds, rss = run(argv, shell=shell, env=env)
            old = best.get(name)
            if old is None or seconds < old.seconds:
                best[name] = Timing(name, seconds, max(rss, old.rss_mb if old else 0.0))
            else:
                old.rss_mb = max(old.rss_mb, rss)
    shutil.rmtree(out, ignore_errors=True)
    shards = sum(n.endswith(".tar") for n in os.listdir(folder))
    print(f"\n## {label}: {data_bytes / 1e9:.2f} GB in {shards} shards, best of {repeat}\n")
    for task, names in tasks(base).items():
        if task != "start-up":
            results.section(
                f"{task}, {label}",
                "MB/s",
                [
                    {
                        "name": name,
                        "rate": round(data_bytes / best[name].seconds / 1e6),
                        "peak_mb": round(best[name].rss_mb),
                    }
                    for name in names
                ],
            )
    print("| task | contender | MB/s | ratio vs baseline | wall s | peak RSS MB |")
    print("|---|---|---:|---:|---:|---:|")
    for task, names in tasks(base).items():
        baseline = data_bytes / best[names[0]].seconds / 1e6
        for i, name in enumerate(names):
            timing = best[name]
            mbps = data_bytes / timing.seconds / 1e6
            ratio = "baseline" if i == 0 else f"{mbps / baseline:.2f}x"
            shown = "-" if task == "start-up" else f"{mbps:,.0f}"
            print(
                f"| {task} | {name} | {shown} | {ratio} | {timing.seconds:.3f} "
                f"| {timing.rss_mb:.0f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="0.3 GB, one repeat")
    parser.add_argument("--gb", type=float, default=2.0, help="dataset size (default 2)")
    parser.add_argument("--dir", default="/dev/shm", help="where to put shards (tmpfs)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the generated shards")
    parser.add_argument(
        "--base", default="", help="another checkout: adds its shardkit rows (NAME@base)"
    )
    add_json_option(parser, "tools")
    args = parser.parse_args()
    if args.base:  # both trees' bytecode compiled first: a cost of a checkout, not of use
        import compileall

        import shardkit

        compileall.compile_dir(os.path.dirname(shardkit.__file__), quiet=1)
        compileall.compile_dir(os.path.join(args.base, "src", "shardkit"), quiet=1)
    results = Results("tools")
    total = int((0.3 if args.quick else args.gb) * 1e9)
    repeat = 1 if args.quick else args.repeat
    root = os.path.join(args.dir, f"shardkit-bench-tools-{os.getpid()}")
    profiles = [
        ("image-like samples (20-180 KB)", (20_000, 180_000), 256_000_000),
        ("small samples (1-5 KB)", (1_000, 5_000), 256_000_000),
    ]
    print(f"# shardkit tools benchmark ({os.cpu_count()} cores, Python {sys.version.split()[0]})")
    sys.stdout.flush()
    try:
        for label, sizes, shard_size in profiles:
            folder = os.path.join(root, "data")
            shutil.rmtree(folder, ignore_errors=True)
            size = total if sizes[0] > 10_000 else total // 4
            count = make_dataset(folder, size, sizes, shard_size if not args.quick else 64_000_000)
            title = f"{label}, {count} samples"
            bench_profile(title, folder, os.path.join(root, "out"), repeat, results, args.base)
            sys.stdout.flush()
        results.write(args.json)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
