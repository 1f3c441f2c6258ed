"""Where a pass-through build worker spends its CPU, per image, stage by stage.

Run: ``.venv/bin/python bench/build_profile.py [--quick] [--hash blake3] [--against TREE]``

Runs the build's tasks in this process (one worker, the corpus of ``bench/build.py``,
cached under ``/dev/shm/shardkit-bench/``) and reports CPU microseconds per image (user +
system, ``getrusage``, best of ``--rounds``) for the whole task and for each stage run
alone over the same files: read (stat, open, fstat, read, close), validate (the header
check), header (the ``json`` text and the tar headers), hash (the digest over every
byte written), write (one ``writev`` per sample); the last four over the first 2,000
good files (hash and write cycle over the 8 nearest the mean size: a task hashes and
writes each sample right after reading it, from the CPU's cache). ``rest`` is the whole
minus the stages: the loop, the part writer, progress and commits (stages measured alone
do not add up exactly: it can come out slightly negative). What the whole task and the
write stage wrote is removed after each run, untimed: a build keeps what it writes (on
tmpfs, freeing the pages cost ~5 us per image, counted before). Peak RSS is this
process's, with the listing and 2,000 images held. ``--against TREE`` runs the same in a
child process with ``TREE/src`` first on ``sys.path`` (another checkout, such as the
previous version) and prints both side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from _results import Results, add_json_option

STAGES = ("whole task", "read", "validate", "header", "hash", "write", "rest")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def profile(src: str, hash_name: str, rounds: int) -> dict[str, float]:
    """CPU us per image of each stage, for the shardkit on ``sys.path``."""
    from shardkit.builder import _worker as worker
    from shardkit.builder._folders import list_image_folder
    from shardkit.builder._plan import cut_tasks, estimator, order_items
    from shardkit.builder._store import LocalStore
    from shardkit.builder._validate import check_image
    from shardkit.builder.options import BuildOptions
    from shardkit.errors import DataError

    try:
        from shardkit.formats.tar import tar_chunks
    except ImportError:  # an older version kept it in the part writer
        from shardkit.builder._partwriter import tar_chunks  # type: ignore[no-redef]

    new_hasher: Callable[[], Any]
    if "hash" in inspect.signature(BuildOptions).parameters:
        from shardkit.digest import new_hasher as by_name

        kw: dict[str, Any] = {"hash": hash_name}
        new_hasher = lambda: by_name(hash_name)  # noqa: E731
    else:  # a version before --hash: sha256 always
        import hashlib

        kw, new_hasher = {}, hashlib.sha256
    out = tempfile.mkdtemp(prefix="shardkit-profile-", dir="/dev/shm")
    listing = list_image_folder(src)
    items = list(listing.items or [])
    options = BuildOptions(workers=1, max_size=100_000_000, max_count=10_000, **kw)
    ordered = order_items(items, options)
    tasks = list(cut_tasks(ordered, options, estimator(options, listing.classes)))
    store = LocalStore(out, **kw)
    classes = tuple(listing.classes)
    source = listing.source
    context = worker.WorkerContext(store, options, source, classes)
    if hasattr(worker, "current_run"):  # the build's state travels with each task
        from shardkit.engines import InlineExecutor

        inline = InlineExecutor(init=worker.init_worker, context=context)

        def run_task(task: Any) -> Any:
            return inline.submit(worker.run_task, task).result()
    else:  # a version that installs it in the process
        worker.init_worker(context, None)
        run_task = worker.run_task
    loaded: list[tuple[Any, bytes]] = []  # the first 2,000 good files, for the stages
    for item in items[:2000]:
        try:
            data = source.load(item)
            check_image(data, item.ext)
        except DataError:
            continue
        loaded.append((item, data))

    def fields(item: Any, data: bytes) -> list[tuple[str, bytes]]:
        meta = source.json_text(item, classes).encode()
        return [(item.ext, data), ("cls", b"%d" % item.label), ("json", meta)]

    # Hashed and written as a task does it, right after the read: from the CPU's cache
    # (8 samples, ~0.6 MB, over and over), not 2,000 samples from memory. Both cost in
    # proportion to the bytes: the 8 are those nearest the mean size (the first 8 files
    # were 18% larger than the mean, and so were the hash and write figures).
    mean = sum(len(data) for _, data in loaded) / max(len(loaded), 1)
    typical = sorted(loaded, key=lambda pair: abs(len(pair[1]) - mean))[:8]
    hot = [tar_chunks(item.key, fields(item, data))[0] for item, data in typical]
    chunked = [hot[i % len(hot)] for i in range(len(loaded))]
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the tasks

    def whole() -> None:
        nonlocal peak_rss
        for task in tasks:
            run_task(task)
        peak_rss = max(peak_rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    # As a task reads and checks: a local folder's files by path where the version has
    # that path, the pixel limit looked up once where it takes it.
    local_loader = getattr(worker, "local_loader", None)
    load = (local_loader(source) if local_loader else None) or source.load
    checks: dict[str, Any] = {}
    if "max_pixels" in inspect.signature(check_image).parameters:
        from shardkit.budget import limit

        checks["max_pixels"] = limit("image_pixels")

    def read() -> None:
        for item in items:
            with contextlib.suppress(DataError):
                load(item)

    def validate() -> None:
        for item, data in loaded:
            check_image(data, item.ext, "header", **checks)

    def header() -> None:
        for item, data in loaded:
            tar_chunks(item.key, fields(item, data))

    def hashing() -> None:
        hasher = new_hasher()
        if hasher is not None:
            for chunks in chunked:
                for chunk in chunks:
                    hasher.update(chunk)

    def write() -> None:
        path = os.path.join(out, "written")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for chunks in chunked:
            os.writev(fd, chunks)
        os.close(fd)

    stages = dict(zip(STAGES, (whole, read, validate, header, hashing, write), strict=False))
    result: dict[str, float] = {}
    for name, fn in stages.items():
        best = float("inf")
        for _ in range(rounds):
            started = _cpu()
            fn()
            best = min(best, _cpu() - started)
            for name_written in os.listdir(out):  # not timed: a build keeps what it wrote
                os.unlink(os.path.join(out, name_written))
        result[name] = best / (len(items) if name in ("whole task", "read") else len(loaded)) * 1e6
    result["rest"] = result["whole task"] - sum(result[s] for s in STAGES[1:-1])
    result["peak RSS MB"] = peak_rss
    result["images"] = len(items)
    shutil.rmtree(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 images instead of 20,000")
    parser.add_argument("--cache", default="/dev/shm/shardkit-bench")
    parser.add_argument("--hash", default="blake3")
    parser.add_argument("--rounds", type=int, default=3, help="best of R runs per stage")
    parser.add_argument("--against", help="another checkout to profile side by side")
    parser.add_argument("--child-json", action="store_true", help=argparse.SUPPRESS)
    add_json_option(parser, "build_profile")
    args = parser.parse_args()
    count = 3_000 if args.quick else 20_000
    src = os.path.join(args.cache, f"corpus-{count}-100")
    if not os.path.exists(os.path.join(src, ".complete.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from build import make_corpus

        make_corpus(src, count, 100)
    if args.child_json:
        print(json.dumps(profile(src, args.hash, args.rounds)))
        return
    columns = {"this tree": profile(src, args.hash, args.rounds)}
    if args.against:
        env = {**os.environ, "PYTHONPATH": os.path.join(args.against, "src")}
        cmd = [sys.executable, os.path.abspath(__file__), "--child-json", "--hash", args.hash]
        cmd += ["--rounds", str(args.rounds), "--cache", args.cache] + ["--quick"] * args.quick
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        columns[args.against] = json.loads(done.stdout.strip().splitlines()[-1])
    images = int(columns["this tree"]["images"])
    print(f"\npass-through worker, {images} files, hash {args.hash}: CPU us per image\n")
    print("| stage | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for stage in (*STAGES, "peak RSS MB"):
        print(f"| {stage} | " + " | ".join(f"{c[stage]:.1f}" for c in columns.values()) + " |")
    results = Results("build_profile")
    for stage in STAGES:
        rows = [
            {"name": f"shardkit ({name})", "rate": round(c[stage], 1)}
            for name, c in columns.items()
        ]
        results.section(f"pass-through worker: {stage}", "CPU us/image", rows, better="lower")
    results.write(args.json)


if __name__ == "__main__":
    main()
