"""Commit benchmark: shards committed per second into an object store, serial vs pooled.

Run: ``PATH=.venv/bin:$PATH scripts/test-services .venv/bin/python bench/commit.py
[--shards 1000] [--threads 0,16]`` (SeaweedFS on this machine; any S3 endpoint in
``SHARDKIT_TEST_S3_ENDPOINT`` or ``AWS_ENDPOINT_URL`` with ``AWS_*`` keys works).

What is timed is the driver's commit of a pass-through build into ``s3://``: per task
(one shard each here) its journal record (one PUT), then its part's rename to the final
name (a server-side COPY and a DELETE), then the wait for all of them before the manifest,
through :class:`shardkit.builder._commit.Renamer` exactly as ``build`` drives it. The part
objects (1 KB each: commit cost does not depend on shard size, a COPY stays in the
server) are uploaded first, untimed. ``--threads 0`` is the serial commit of before;
``16`` is what a build into an object store uses now (``COMMIT_THREADS``). The commit of
before is measured by running this script with ``PYTHONPATH`` at an older ``src``
(``--threads 0``). SeaweedFS answers from the same (2-core, shared) machine in ~1 ms;
``--rtt MS`` adds that much waiting to every request, as a distant server would (a
rename is three requests).

``--assembled`` times an assembled build's commits instead (resized images, Python
samples, URLs: shards cut by the driver and assembled by the workers): per shard its
chunk's journal record, the shard's record and the chunk part's deletion (three requests
too), through :class:`shardkit.builder._assembly.WorkerAssembler`.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

from _results import Results, add_json_option


def run(url: str, shards: int, threads: int, rtt: float) -> tuple[float, float]:
    from shardkit.builder._commit import Renamer
    from shardkit.builder._journal import Journal
    from shardkit.builder._store import ObjectStore
    from shardkit.builder._worker import TaskResult
    from shardkit.formats.record import ShardRecord

    store = ObjectStore(url)
    names = [f".shard-task{t:06d}-part000.tar" for t in range(shards)]
    store.fs.pipe({store.path(n): os.urandom(1024) for n in names})  # untimed, concurrent
    journal = Journal(store, {"shardkit_journal": 1, "bench": url})
    journal.start(fresh=True)
    if rtt:  # a distant server: each request waits ``rtt`` more (rename: HEAD, COPY, DELETE)
        _add_latency(store, journal, rtt)
    pooled = {"threads": threads} if threads else {}  # the serial commit of before takes none
    renamer = Renamer(store, journal, lambda i: f"shard-{i:06d}.tar", **pooled)
    record = getattr(renamer, "record", journal.record)
    results = [TaskResult(t, [ShardRecord(names[t], 1, 1024, "")]) for t in range(shards)]
    started, cpu = time.perf_counter(), time.process_time()
    try:
        for result in results:
            record(result)
            renamer.add(result)
        renamer.finish()
    finally:
        if hasattr(renamer, "close"):
            renamer.close()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    final = store.sizes()
    missing = [i for i in range(shards) if f"shard-{i:06d}.tar" not in final]
    if missing or any(n in final for n in names):
        raise SystemExit(f"{len(missing)} shards missing or parts left over at {url}")
    return seconds, cpu


def run_assembled(url: str, shards: int, threads: int, rtt: float) -> tuple[float, float]:
    """The same for an assembled build (resized images, Python samples): per chunk task its
    journal record (a PUT); per shard, once a worker assembled it, its record (a PUT) and
    the deletion of the chunk part it read (a DELETE), through the WorkerAssembler."""
    from shardkit.builder._assembly import WorkerAssembler
    from shardkit.builder._journal import Journal
    from shardkit.builder._store import ObjectStore
    from shardkit.builder._worker import TaskResult
    from shardkit.builder.options import BuildOptions
    from shardkit.formats.record import ShardRecord

    store = ObjectStore(url)
    names = [f".shard-task{t:06d}-part000.tar" for t in range(shards)]
    store.fs.pipe({store.path(n): os.urandom(1024) for n in names})  # untimed, concurrent
    journal = Journal(store, {"shardkit_journal": 1, "bench": url})
    journal.start(fresh=True)
    if rtt:
        _add_latency(store, journal, rtt)
    pooled = {"threads": threads} if threads else {}  # the serial commit of before takes none
    options = BuildOptions(max_count=1)  # one chunk of one sample per shard
    assembler = WorkerAssembler(store, journal, lambda i: f"shard-{i:06d}.tar", options, **pooled)
    results = [
        TaskResult(t, [ShardRecord(names[t], 1, 1024, "")], sizes=[1024]) for t in range(shards)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    try:
        for result in results:
            assembler.record(result)
            assembler.add(result)
            _assembled(assembler)
        assembler.finish()
        _assembled(assembler)
        getattr(assembler, "drain", lambda: None)()
    finally:
        assembler.close()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    left = [n for n in names if n in store.sizes()]
    if left or len(assembler.committed) != shards:
        raise SystemExit(f"{len(left)} parts left over at {url}")
    return seconds, cpu


def _assembled(assembler: Any) -> None:
    """What the driver does when workers return the shards it planned (none is written:
    the commit is what is timed)."""
    from shardkit.builder._manifest import ShardRecord

    for plan in assembler.ready:
        assembler.done(plan, ShardRecord(plan.name, plan.samples, plan.size, ""))
    assembler.ready.clear()


def _add_latency(store: Any, journal: Any, rtt: float) -> None:
    rename, write, remove = store.rename, journal._log.append, store.remove

    def slow_rename(src: str, dst: str) -> None:
        time.sleep(3 * rtt)
        rename(src, dst)

    def slow_write(*args: Any) -> None:
        time.sleep(rtt)
        write(*args)

    def slow_remove(names: Any) -> None:
        names = list(names)
        time.sleep(rtt * len(names))
        remove(names)

    store.rename, journal._log.append, store.remove = slow_rename, slow_write, slow_remove


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--threads", default="0,16", help="comma-separated pool sizes")
    parser.add_argument(
        "--rtt", type=float, default=0.0, metavar="MS", help="added latency per request (ms)"
    )
    parser.add_argument(
        "--assembled", action="store_true", help="an assembled build's commits (resize, Python)"
    )
    add_json_option(parser, "commit")
    args = parser.parse_args()
    results = Results("commit")
    rows = []
    endpoint = os.environ.get("SHARDKIT_TEST_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        raise SystemExit("no S3 endpoint: run under scripts/test-services")
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    bucket = f"commit-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    try:
        print("| threads | shards | seconds | shards/s | driver CPU ms per shard |")
        print("|---|---|---|---|---|")
        for threads in (int(t) for t in args.threads.split(",")):
            url = f"s3://{bucket}/t{threads}"
            timed = run_assembled if args.assembled else run
            seconds, cpu = timed(url, args.shards, threads, args.rtt / 1000)
            rate, per = args.shards / seconds, cpu / args.shards * 1000
            print(f"| {threads} | {args.shards} | {seconds:.2f} | {rate:,.0f} | {per:.1f} |")
            name = "shardkit, serial" if threads == 0 else f"shardkit, pool of {threads}"
            rows.append({"name": name, "rate": round(rate)})
        title = f"commit {args.shards} shards into S3, {args.rtt:g} ms added per request"
        results.section(title, "shards/s", rows[::-1])
        results.write(args.json)
    finally:
        fs.rm(bucket, recursive=True)


if __name__ == "__main__":
    main()
