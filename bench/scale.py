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

``--driver-memory`` measures the build driver alone (no cluster needed):

    .venv/bin/python bench/scale.py --driver-memory [--items 1000000,10000000]
        [--base /work/wt/base/src] [--folder 1000000] [--build 1000000]

For each item count, in a child process: list a synthetic source (a map-style dataset of
N tiny items), fix its order (seeded shuffle) and cut every task, as the driver does
before it submits them; it prints the child's peak RSS (``wait4``), the listing and the
ordering+cutting seconds, and the slope of the peak RSS in bytes per item between the
smallest and the largest count. ``--base SRC`` runs the same steps with another tree's
``src`` (the previous driver) for comparison; ``--folder N[,M]`` adds an image folder of N
empty ``.jpg`` files under /tmp (a real walk, sort and key check), ``--table N[,M]`` a CSV
list of N http URLs (read, checked for repeats, keyed; nothing is fetched); ``--build
N[,M]`` a whole ``shardkit.build`` of N tiny samples (TFRecord, 2 workers), whose driver
RSS includes running, journaling and committing the tasks; ``--resume N[,M]`` the same
build interrupted (in another process) once all but its last shards are done, then
resumed: the row is the resumed driver's (its journal holds all but the last few chunks), with
the task records alive after it loaded the journal and at the manifest.
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

from _results import Results, add_json_option, builder_module

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
    lines = stdout.strip().splitlines()
    data: dict[str, Any] = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    data["rss_mb"] = usage.ru_maxrss / 1024
    return data


def corpus(name: str, count: int) -> str:
    from shardkit.demo import make_image_folder

    folder = os.path.join(ROOT, f"{name}-{count}")
    if not os.path.isdir(folder):
        make_image_folder(folder + ".tmp", count=count, seed=1)
        os.rename(folder + ".tmp", folder)
    return folder


class TinyDataset:
    """``count`` samples of a few bytes, made on demand (pickles small)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"cls": index % 100}  # 100 classes: class counts stay small


def driver_child(kind: str, count: int, out: str) -> None:
    """List, order and cut (or build) in this process; prints seconds as JSON."""
    import inspect
    import resource

    from shardkit import BuildOptions, build

    api, plan = builder_module("api"), builder_module("plan")

    makers = {"folder": folder_source, "table": table_source}
    source: Any = makers[kind](count) if kind in makers else TinyDataset(count)
    options = BuildOptions(max_count=1000, format="tfrecord", workers=2)
    start = time.perf_counter()
    if kind in ("build", "resume"):
        shutil.rmtree(out, ignore_errors=True)
        if kind == "resume":  # the interrupted build runs in another process
            code = f"import scale; scale.interrupted_build({count}, {out!r})"
            subprocess.run([sys.executable, "-c", code], check=True)
            start = time.perf_counter()
            first = resource.getrusage(resource.RUSAGE_CHILDREN)  # not the resumed build's
            first_cpu = first.ru_utime + first.ru_stime
        held = _count_held_records()
        result = build(source, out, options=options)
        if kind == "resume" and not result.resumed_tasks:
            raise SystemExit("the resumed build resumed nothing")
        shutil.rmtree(out, ignore_errors=True)
        seconds = time.perf_counter() - start
        figures = {"list_s": 0.0, "order_s": seconds, "tasks": len(result.shards)}
        if kind == "resume":
            figures["first_cpu_s"] = first_cpu
        print(json.dumps({**figures, **held}))
        return
    spill_module = None
    if "spill" in inspect.signature(api.list_source).parameters:
        spill_module = builder_module("spill")
    with spill_module.Spill() if spill_module else contextlib.nullcontext() as spill:
        extra = {"spill": spill} if spill_module else {}
        listing = api.list_source(source, out, options, **extra)
        listed = time.perf_counter()
        ordered = plan.order_items(listing.items, options, *extra.values())
        if listing.sizes_known:
            tasks = plan.cut_tasks(ordered, options, plan.estimator(options, listing.classes))
        else:
            tasks = plan.chunk_stream(iter(ordered), plan.CHUNK)
        number = sum(1 for _ in tasks)
    done = time.perf_counter()
    print(json.dumps({"list_s": listed - start, "order_s": done - listed, "tasks": number}))


def interrupted_build(count: int, out: str) -> None:
    """The ``--resume`` row's first run: the build of :func:`driver_child`, stopped (as
    by Ctrl-C) once all but its last 2 shards are done, leaving its journal in ``out``."""
    from shardkit import BuildOptions, BuildProgress, build

    options = BuildOptions(max_count=1000, format="tfrecord", workers=2)
    last = -(-count // options.max_count) - 2

    def stop(progress: BuildProgress) -> None:
        if progress.shards >= last:
            raise KeyboardInterrupt

    with contextlib.suppress(KeyboardInterrupt):
        build(TinyDataset(count), out, options=options, progress=stop)
        raise SystemExit("the build to resume was not interrupted")


def _count_held_records() -> dict[str, int]:
    """Hook the driver's manifest step: the task records (TaskResult) alive then, and
    their size (a ``sys.getsizeof`` walk, allocator overhead not counted), filled in the
    returned dict when the build reaches it; and the records alive once the driver has
    loaded (and checked) the journal of a build it resumes."""
    import gc

    run = builder_module("run")
    TaskResult = builder_module("worker").TaskResult

    held = {"records": 0, "records_bytes": 0}
    finish, prepare = run._Driver._finish, run._Driver.prepare

    def preparing(driver: Any) -> Any:
        done = prepare(driver)
        if driver.resumed:
            gc.collect()
            held["loaded"] = sum(type(o) is TaskResult for o in gc.get_objects())
        return done

    def size(obj: Any, seen: set[int]) -> int:
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        total = sys.getsizeof(obj)
        if isinstance(obj, dict):
            total += sum(size(k, seen) + size(v, seen) for k, v in obj.items())
        elif isinstance(obj, list | tuple | set):
            total += sum(size(x, seen) for x in obj)
        elif hasattr(obj, "__dict__"):
            total += size(vars(obj), seen)
        return total

    def counting(driver: Any) -> Any:
        gc.collect()
        records = [o for o in gc.get_objects() if isinstance(o, TaskResult)]
        seen: set[int] = set()
        held.update(records=len(records), records_bytes=sum(size(r, seen) for r in records))
        return finish(driver)

    run._Driver._finish = counting  # type: ignore[method-assign]
    run._Driver.prepare = preparing  # type: ignore[method-assign]
    return held


def _report_self() -> None:
    """The driver process's own peak RSS (wait4 also counts its workers, the largest)."""
    import resource

    print(json.dumps({"self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def folder_source(count: int) -> str:
    """An image folder of ``count`` empty .jpg files (100 classes, 1,000 per folder)."""
    folder = f"/tmp/shardkit-bench-empty-{count}"  # on disk: a million inodes
    if not os.path.isdir(folder):
        for i in range(0, count, 1000):
            sub = os.path.join(folder + ".tmp", f"c{i // 1000 % 100:02d}", f"{i // 100000:05d}")
            os.makedirs(sub, exist_ok=True)
            for j in range(i, min(i + 1000, count)):
                open(os.path.join(sub, f"{j:09d}.jpg"), "wb").close()
        os.rename(folder + ".tmp", folder)
    return folder


def table_source(count: int) -> str:
    """A CSV list of ``count`` http(s) URLs with an int label (nothing is fetched)."""
    path = f"/tmp/shardkit-bench-list-{count}.csv"
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write("path,label\n")
            for i in range(count):
                f.write(f"http://127.0.0.1:9/images/{i // 1000:06d}/{i:09d}.jpg,{i % 1000}\n")
        os.rename(path + ".tmp", path)
    return path


def run_driver(kind: str, count: int, src: str) -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, src])}
    out = ROOT + "/out-driver"
    code = f"import scale; scale.driver_child({kind!r}, {count}, {out!r}); scale._report_self()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    stdout = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"driver run {kind} {count} with {src} failed")
    lines = stdout.strip().splitlines()
    data: dict[str, Any] = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    data["rss_mb"] = usage.ru_maxrss / 1024
    data["cpu_s"] = usage.ru_utime + usage.ru_stime - data.pop("first_cpu_s", 0.0)
    return data


def driver_memory(args: argparse.Namespace) -> None:
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    trees = {"now": os.path.abspath(here)}
    if args.base:
        trees["base"] = args.base
    runs: list[tuple[str, str, int]] = [("dataset", t, n) for t in trees for n in args.items]
    for kind in ("folder", "table", "build", "resume"):
        counts = [int(n) for n in getattr(args, kind).split(",") if n]
        runs += [(kind, t, n) for t in trees for n in counts if t == "now" or n <= args.base_max]
    print(
        "| source | tree | items | list s | order+cut s (build: all) | tasks | CPU s "
        "(with workers) | driver peak RSS MB | with workers (wait4) | task records held at "
        "the manifest (build; resume: after loading the journal, at the manifest) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    peaks: dict[str, dict[int, float]] = {}
    for kind, tree, count in runs:
        if tree == "base" and count > args.base_max:
            continue  # the old driver holds every item: too big for this machine
        row = run_driver(kind, count, trees[tree])
        peaks.setdefault(f"{kind}, {tree}", {})[count] = row["self_mb"]
        print(
            f"| {kind} | {tree} | {count:,} | {row['list_s']:.1f} | {row['order_s']:.1f} | "
            f"{row['tasks']:,} | {row['cpu_s']:.1f} | {row['self_mb']:.0f} | "
            f"{row['rss_mb']:.0f} | {_held(row)} |",
            flush=True,
        )
    for tree, by_count in peaks.items():
        if len(by_count) > 1:
            low, high = min(by_count), max(by_count)
            slope = (by_count[high] - by_count[low]) * 2**20 / (high - low)
            print(f"\n{tree}: peak RSS slope {slope:.1f} bytes/item ({low:,} -> {high:,} items)")


def _held(row: dict[str, Any]) -> str:
    if "records" not in row:
        return ""
    loaded = f"{row['loaded']:,}, " if "loaded" in row else ""
    return f"{loaded}{row['records']:,} ({row['records_bytes'] / 2**20:.1f} MB)"


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
    parser.add_argument("--driver-memory", action="store_true", help="the driver alone")
    parser.add_argument("--items", default="1000000,10000000", help="item counts, a,b,...")
    parser.add_argument("--base", help="another tree's src to compare (the old driver)")
    parser.add_argument("--base-max", type=int, default=1000000, help="largest count for it")
    parser.add_argument("--folder", default="", help="files in image folder runs, a,b,...")
    parser.add_argument("--table", default="", help="rows of CSV lists of URLs, a,b,...")
    parser.add_argument("--build", default="", help="items in whole-build runs, a,b,...")
    parser.add_argument("--resume", default="", help="items in resumed-build runs, a,b,...")
    add_json_option(parser, "scale")
    args = parser.parse_args()
    if args.driver_memory:
        args.items = [int(n) for n in args.items.split(",") if n]
        os.makedirs(ROOT, exist_ok=True)
        driver_memory(args)
        return
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
    results = Results("scale")
    results.section(
        f"build {count} JPEGs by engine (1000 per task)",
        "images/s",
        [
            {
                "name": f"shardkit --engine {engine}",
                "rate": round(count / row["large"]["seconds"]),
                "peak_mb": round(row["rss"]),
            }
            for engine, row in rows.items()
        ],
    )
    report(rows, count, size)
    results.write(args.json)


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
