"""Scale-out benchmark: the same `shardkit build` on local processes, Ray and Dask.

Run under the local clusters (a Ray head, a Dask scheduler + 2 workers, 2 CPUs each):

    scripts/cluster-services .venv/bin/python bench/scale.py [--quick]

The corpus (default 12,000 small JPEGs, ``--quick`` 3,000) is generated once under
``/dev/shm/shardkit-bench-scale/``; outputs go to /dev/shm. Every contender runs in its own
subprocess, one after the other, in one run. For each engine it measures:

- startup: a build of 10 images (one task): connect, ship the context, first task, close;
- throughput: the whole corpus, ``max_count`` 1000 (few large tasks);
- per-task overhead: the same corpus cut into tasks of 25 images; (that time - the
  large-task time) / (extra tasks);
- peak RSS of the driver process (``wait4``), and the RSS of the cluster's own processes
  (Ray head and workers, Dask scheduler and workers: the siblings of this script under
  scripts/cluster-services) sampled after the runs.

Every build's shards are checked to be byte-identical to the local build's.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

ROOT = "/dev/shm/shardkit-bench-scale"
ENGINES = ("local", "ray", "dask")


def child(engine: str, src: str, out: str, max_count: int) -> None:
    """One build in this process; prints its seconds and a digest of its shards as JSON."""
    from shardkit import BuildOptions, build

    address = {
        "ray": os.environ.get("SHARDKIT_TEST_RAY_ADDRESS"),
        "dask": os.environ.get("SHARDKIT_TEST_DASK_ADDRESS"),
    }.get(engine)
    shutil.rmtree(out, ignore_errors=True)
    options = BuildOptions(max_count=max_count, engine=engine, address=address, workers=2)  # type: ignore[arg-type]
    start = time.perf_counter()
    result = build(src, out, options=options)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256("".join(s.sha256 for s in result.shards).encode()).hexdigest()
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"seconds": seconds, "shards": len(result.shards), "digest": digest}))


def run_child(engine: str, src: str, max_count: int) -> dict[str, Any]:
    out = os.path.join(ROOT, f"out-{engine}")
    argv = [sys.executable, __file__, "--child", engine, src, out, str(max_count)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    stdout = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} build failed ({proc.returncode})")
    data: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    data["rss_mb"] = usage.ru_maxrss / 1024
    return data


def corpus(name: str, count: int) -> str:
    from shardkit.demo import make_image_folder

    folder = os.path.join(ROOT, f"{name}-{count}")
    if not os.path.isdir(folder):
        make_image_folder(folder + ".tmp", count=count, seed=1)
        os.rename(folder + ".tmp", folder)
    return folder


def cluster_rss_mb() -> float:
    import psutil

    me = os.getpid()
    parent = psutil.Process(os.getppid())
    total = 0
    for process in parent.children(recursive=True):
        if process.pid != me:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
    return total / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3,000 images instead of 12,000")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        engine, src, out, max_count = args.child
        child(engine, src, out, int(max_count))
        return
    for engine, var in (
        ("ray", "SHARDKIT_TEST_RAY_ADDRESS"),
        ("dask", "SHARDKIT_TEST_DASK_ADDRESS"),
    ):
        if not os.environ.get(var):
            raise SystemExit(f"{var} is not set: run under scripts/cluster-services ({engine})")
    count = 3000 if args.quick else 12000
    tiny, big = corpus("tiny", 10), corpus("images", count)
    size = sum(e.stat().st_size for d in os.scandir(big) for e in os.scandir(d.path))
    rows: dict[str, dict[str, Any]] = {}
    for engine in ENGINES:
        startup = min(run_child(engine, tiny, 1000)["seconds"] for _ in range(2))
        large = run_child(engine, big, 1000)
        small = run_child(engine, big, 25)
        extra = small["shards"] - large["shards"]
        rows[engine] = {
            "startup": startup,
            "large": large,
            "small": small,
            "per_task_ms": 1000 * (small["seconds"] - large["seconds"]) / extra,
            "rss": max(large["rss_mb"], small["rss_mb"]),
        }
    report(rows, count, size)


def report(rows: dict[str, dict[str, Any]], count: int, size: int) -> None:
    base = rows["local"]
    print(f"\n{count} JPEGs, {size / 1e6:.0f} MB, 2 CPUs; outputs on /dev/shm\n")
    print(
        "| engine | startup s | build s (1000/task) | img/s | vs local | build s (25/task) "
        "| tasks | per-task ms | driver RSS MB | identical |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for engine, row in rows.items():
        large, small = row["large"], row["small"]
        same = (
            large["digest"] == base["large"]["digest"]
            and small["digest"] == base["small"]["digest"]
        )
        print(
            f"| {engine} | {row['startup']:.2f} | {large['seconds']:.2f} | "
            f"{count / large['seconds']:.0f} | "
            f"{base['large']['seconds'] / large['seconds']:.2f}x | "
            f"{small['seconds']:.2f} | {small['shards']} | {row['per_task_ms']:.1f} | "
            f"{row['rss']:.0f} | {'yes' if same else 'NO'} |"
        )
    print(
        "\ncluster processes (Ray head + workers, Dask scheduler + workers): "
        f"{cluster_rss_mb():.0f} MB RSS"
    )


if __name__ == "__main__":
    main()
