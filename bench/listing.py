"""Listing benchmark: an image folder in an object store, or on local disk, listed by the
build driver.

Run: ``PATH=.venv/bin:$PATH scripts/test-services .venv/bin/python bench/listing.py
[--folders 200] [--objects 50] [--rtt 20] [--base /work/wt/base/src] [--in-flight 16]``
(SeaweedFS on this machine; any S3 endpoint in ``SHARDKIT_TEST_S3_ENDPOINT`` or
``AWS_ENDPOINT_URL`` with ``AWS_*`` keys works).

``--local FOLDER [--base SRC] [--rounds 5]`` times instead the driver's own work on a local
image folder before its first task (what ``shardkit build FOLDER OUT`` does between its
imports and starting the pool): ``list_image_folder`` (the walk, the samples, the keys,
the fingerprint), then ``order_items`` and ``cut_tasks`` at the default options, each
tree in a process of its own, the trees alternating round by round (``--rounds``), each
round the best of ``--repeats`` listings. It reports the CPU time of this thread
(steadier than the wall time on a shared machine) in ms and per file, and the ratio.

A bucket of ``--folders`` class folders of ``--objects`` tiny ``.jpg`` objects each is
uploaded first, untimed. What is timed is ``list_remote_folder`` (what ``shardkit build
s3://...`` does before it plans): every folder's listing, the sorted runs and the items,
each run in a process of its own, through a loopback proxy that holds every request
``--rtt`` ms before passing it on (``slow_proxy`` of ``tests/helpers/remote.py``, the one
the tests use), as a distant server would. SeaweedFS itself answers in ~1 ms.

``--base SRC`` runs the same listing with another tree's ``src`` (before: one folder at a
time). ``--in-flight N,...`` runs this tree with ``storage.REQUESTS_IN_FLIGHT`` set to each
N (the default is the tree's own, 16; the S3 client's connection pool stays at 16, so
values above it are capped there). Each row gives the wall time, the listing requests
the proxy saw, the most it held at once (requests the client had on the wire at the
same time), the child's CPU time (``os.wait4``) and its peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from _results import Results, add_json_option, builder_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the tests' proxy: one copy


def child(url: str, in_flight: int, repeats: int) -> None:
    """List ``url`` once untimed (the client is made, its first connections opened), then
    ``repeats`` times; print the best wall time, the median and the item count as JSON."""
    from shardkit import storage

    list_remote_folder = builder_module("folders").list_remote_folder

    if in_flight:
        storage.REQUESTS_IN_FLIGHT = in_flight
    items = len(list_remote_folder(url).items or [])
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        list_remote_folder(url)
        times.append(time.perf_counter() - started)
    row = {"best": min(times), "median": statistics.median(times), "items": items}
    row["in_flight"] = getattr(storage, "REQUESTS_IN_FLIGHT", 1)  # before it: one at a time
    print(json.dumps(row))


def local_child(folder: str, repeats: int) -> None:
    """List ``folder``, order and cut it ``repeats`` times; print the best thread CPU time
    of each step (s) and the item count as JSON."""
    from shardkit.builder import BuildOptions

    list_image_folder = builder_module("folders").list_image_folder
    plan = builder_module("plan")
    options = BuildOptions()
    best = {"list": float("inf"), "order": float("inf"), "cut": float("inf")}
    items = 0
    for _ in range(repeats):
        started = time.thread_time()
        listing = list_image_folder(folder)
        listed = time.thread_time()
        ordered = plan.order_items(listing.items, options)
        done = time.thread_time()
        estimate = plan.estimator(options, listing.classes)
        tasks = sum(1 for _ in plan.cut_tasks(ordered, options, estimate))
        cut = time.thread_time()
        for step, seconds in (("list", listed - started), ("order", done - listed)):
            best[step] = min(best[step], seconds)
        best["cut"] = min(best["cut"], cut - done)
        items = len(listing.items)
    print(json.dumps({**best, "items": items, "tasks": tasks}))


def run_local(folder: str, src: str, repeats: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, src])}
    code = f"import listing; listing.local_child({folder!r}, {repeats})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"listing with {src} failed:\n{done.stderr}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main_local(args: argparse.Namespace) -> None:
    trees = [("now", os.path.abspath(os.path.join(HERE, "..", "src")))]
    if args.base:
        trees.append(("before", args.base))
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in trees}
    for _ in range(args.rounds):
        for name, src in trees:
            rows[name].append(run_local(args.local, src, args.repeats))
    steps = ("list", "order", "cut")
    print(
        f"{args.local}: thread CPU ms, median over {args.rounds} rounds of the best of "
        f"{args.repeats} (list_image_folder, order_items, cut_tasks at the defaults)"
    )
    print("| tree | files listed | list ms | order ms | cut ms | total ms | us per file |")
    print("|---|---|---|---|---|---|---|")
    totals = {}
    for name, _ in trees:
        median = {step: statistics.median(r[step] for r in rows[name]) for step in steps}
        totals[name] = sum(median.values())
        items = rows[name][0]["items"]
        cells = " | ".join(f"{median[step] * 1000:.1f}" for step in steps)
        print(
            f"| {name} | {items:,} | {cells} | {totals[name] * 1000:.1f} | "
            f"{totals[name] * 1e6 / items:.2f} |"
        )
    if args.base:
        print(f"now/before, total: {totals['now'] / totals['before']:.2f}x")


def run_child(url: str, src: str, endpoint: str, in_flight: int, repeats: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, src]), "AWS_ENDPOINT_URL": endpoint}
    code = f"import listing; listing.child({url!r}, {in_flight}, {repeats})"
    argv = [sys.executable, "-c", code]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    stdout = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"listing with {src} failed")
    row: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    row["cpu_s"] = usage.ru_utime + usage.ru_stime
    row["rss_mb"] = usage.ru_maxrss / 1024
    return row


def upload(fs: Any, prefix: str, folders: int, objects: int) -> None:
    names = [f"{prefix}/c{c:05d}/{i:06d}.jpg" for c in range(folders) for i in range(objects)]
    for start in range(0, len(names), 2000):
        fs.pipe({name: b"x" for name in names[start : start + 2000]})


def main() -> None:
    from helpers.remote import Held, slow_proxy

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folders", type=int, default=200)
    parser.add_argument("--objects", type=int, default=50, help="objects per folder")
    parser.add_argument("--rtt", type=float, default=20.0, metavar="MS", help="added per request")
    parser.add_argument("--base", help="another tree's src to compare (before)")
    parser.add_argument("--in-flight", default="", help="comma-separated REQUESTS_IN_FLIGHT")
    parser.add_argument("--repeats", type=int, default=3, help="timed listings per row")
    parser.add_argument("--local", metavar="FOLDER", help="time a local folder's listing")
    parser.add_argument("--rounds", type=int, default=5, help="--local: rounds per tree")
    add_json_option(parser, "listing")
    args = parser.parse_args()
    if args.local:
        main_local(args)
        return
    results, rows = Results("listing"), []
    endpoint = os.environ.get("SHARDKIT_TEST_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        raise SystemExit("no S3 endpoint: run under scripts/test-services")
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    bucket = f"listing-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    trees = [("now", os.path.abspath(os.path.join(HERE, "..", "src")), 0)]
    trees += [("now", trees[0][1], int(n)) for n in args.in_flight.split(",") if n]
    if args.base:
        trees.append(("before", args.base, 0))
    try:
        upload(fs, bucket, args.folders, args.objects)
        url = f"s3://{bucket}"
        print(
            f"{args.folders} folders x {args.objects} objects, {args.rtt:g} ms added per "
            f"request; seconds per listing, best (median) of {args.repeats}"
        )
        print(
            "| tree | in flight | most at once at the server | items | requests per listing | "
            "seconds | ms per folder | CPU s (all listings) | peak RSS MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, src, in_flight in trees:
            held = Held()
            with slow_proxy(endpoint, args.rtt / 1000, held=held) as proxy:
                row = run_child(url, src, proxy, in_flight, args.repeats)
            listed = sum(1 for line in held.requests if "list-type=2" in line)
            listed //= args.repeats + 1
            best, median = row["best"], row["median"]
            print(
                f"| {name} | {row['in_flight']} | {held.peak} | {row['items']:,} | {listed:,} | "
                f"{best:.2f} ({median:.2f}) | {best * 1000 / args.folders:.1f} | "
                f"{row['cpu_s']:.2f} | {row['rss_mb']:.0f} |",
                flush=True,
            )
            label = f"shardkit ({name}, {row['in_flight']} in flight)"
            rows.append({"name": label, "rate": round(args.folders / best, 1)})
        title = f"list {args.folders} folders x {args.objects} objects in S3, +{args.rtt:g} ms"
        results.section(title, "folders/s", rows)
        results.write(args.json)
    finally:
        fs.rm(bucket, recursive=True)


if __name__ == "__main__":
    main()
