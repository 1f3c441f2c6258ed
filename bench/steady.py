"""In-process steady-state reading, as a training loop sees a loader (``bench/read.py --steady``).

Each contender runs in a fresh child process: imports, builds its dataset object, reads
one warm pass, then ``--passes`` timed passes (the best is its figure, and the least
process CPU time per sample of a pass is reported beside it: a busy machine moves it
less); the same child reports its peak RSS (VmHWM). A second child per contender reads
one pass from a cold interpreter (imports and construction included): the whole-process
figure, with the process's CPU time (least of the runs). Contenders run interleaved,
``--repeat`` rounds, side by side in one run, on two sample sets:

* ``small``: 200,000 samples of ~1 KB text + ``cls``, written by ``ShardWriter`` at its
  defaults (``.idx`` files included);
* ``jpeg``: 6,000 JPEGs of ~67 KB + ``cls``, ``shardkit build --index`` output.

Contenders: shardkit ``Dataset`` (``copy=True``, the default, and ``copy=False``),
litdata 0.2.76 ``StreamingDataset`` (its chunks written by one ``BinaryWriter``: one
worker), MosaicML streaming (MDS) ``StreamingDataset`` and webdataset ``WebDataset``
over the tar shards. MDS and webdataset are slow enough that a pass of theirs is capped
(``CAPS``); their rate is over the samples read. The peers run in ``--peers PYTHON`` (a
venv with torch 2.13, litdata, mosaicml-streaming, webdataset; ``bench/standins`` first on
``PYTHONPATH``, see ``bench/read.py``).

``--workers N`` (``bench/results/read-loader.json``): each pass is an epoch through N
DataLoader workers in batches of ``--batch`` (512), one loader per child: shardkit
``Loader``, litdata ``StreamingDataLoader``, webdataset ``WebLoader`` (batched in the
workers), MDS through a torch ``DataLoader`` (``LOADER_CAPS``: its ``epoch_size``). One
collate for all, :func:`count_items`; CPU time counts the workers'; an epoch that gives
fewer samples than the set (or the cap) fails the run. No whole-process children.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = {"small": 200_000, "jpeg": 6_000}
CAPS = {"mds": 2_000, "webdataset": 20_000}  # samples per pass of the slow peers
LOADER_CAPS = {"mds": 20_000}  # samples per epoch with --workers (MDS's epoch_size)
CONTENDERS = ["shardkit", "shardkit copy=False", "litdata", "mds", "webdataset"]
PEERS = {"litdata", "mds", "webdataset"}
_CHUNK = 64_000_000


def _folder(root: str, name: str, kind: str) -> str:
    return os.path.join(root, name, kind)


def _text(rng: random.Random) -> bytes:
    words = [
        rng.choice(("data", "shard", "sample", "tensor", "loader", "read", "token"))
        for _ in range(180)
    ]
    return " ".join(words).encode()[: rng.randint(900, 1100)]


def prepare_shardkit(root: str) -> None:
    """The tar shards of both sets (once)."""
    small = _folder(root, "small", "tar")
    if not os.path.exists(os.path.join(small, "done")):
        from shardkit import ShardWriter

        os.makedirs(small, exist_ok=True)
        rng = random.Random(0)
        with ShardWriter(os.path.join(small, "shard-%06d.tar")) as sink:
            for i in range(SETS["small"]):
                sink.write({"__key__": f"s{i:08d}", "txt": _text(rng), "cls": b"%d" % (i % 1000)})
        open(os.path.join(small, "done"), "w").close()
    jpeg = _folder(root, "jpeg", "tar")
    if not os.path.exists(os.path.join(jpeg, "done")):
        sys.path.insert(0, HERE)
        from read import _jpeg_pool

        images = _folder(root, "jpeg", "images")
        pool = _jpeg_pool(300, size=(400, 400))
        for i in range(SETS["jpeg"]):
            folder = os.path.join(images, f"class{i % 10}")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"img{i:06d}.jpg"), "wb") as out:
                out.write(pool[i % len(pool)])
        command = [sys.executable, "-m", "shardkit", "build", images, jpeg, "--index", "-q"]
        subprocess.run(command, check=True)
        open(os.path.join(jpeg, "done"), "w").close()


def prepare_peers(root: str, name: str) -> None:
    """litdata's chunks (one writer) and MDS shards of one set, from its tar shards (once)."""
    from shardkit import Dataset

    tar = _folder(root, name, "tar")

    def items() -> Iterable[dict[str, Any]]:
        for sample in Dataset(tar):
            field = "jpg" if "jpg" in sample else "txt"
            yield {"key": sample["__key__"], field: sample[field], "cls": sample["cls"]}

    lit = _folder(root, name, "litdata")
    if not os.path.exists(os.path.join(lit, "index.json")):
        from litdata.streaming.writer import BinaryWriter

        writer = BinaryWriter(lit, chunk_bytes=_CHUNK)
        for index, item in enumerate(items()):
            writer.add_item(index, item)
        writer.done()
        writer.merge()
    mds = _folder(root, name, "mds")
    if not os.path.exists(os.path.join(mds, "index.json")):
        from streaming import MDSWriter

        field = "jpg" if name == "jpeg" else "txt"
        columns = {"key": "str", field: "bytes", "cls": "bytes"}
        with MDSWriter(out=mds, columns=columns, size_limit=_CHUNK) as out:
            for item in items():
                out.write(item)


def _dataset(contender: str, root: str, name: str) -> Callable[[], Iterable[Any]]:
    """A function giving one pass over the contender's samples (its dataset built once)."""
    tar = _folder(root, name, "tar")
    if contender.startswith("shardkit"):
        from shardkit import Dataset

        ds = Dataset(tar, copy=contender == "shardkit")
        return lambda: ds
    if contender == "litdata":
        from litdata import StreamingDataset

        lit = StreamingDataset(_folder(root, name, "litdata"))
        return lambda: lit
    if contender == "mds":
        from streaming import StreamingDataset as MDS

        mds = MDS(local=_folder(root, name, "mds"), shuffle=False, batch_size=1)
        return lambda: itertools.islice(mds, CAPS["mds"])
    import webdataset as wds

    web = wds.WebDataset(_tar_urls(tar), shardshuffle=False)
    return lambda: itertools.islice(web, CAPS["webdataset"])


def _tar_urls(tar: str) -> list[str]:
    return sorted(os.path.join(tar, n) for n in os.listdir(tar) if n.endswith(".tar"))


def _peak_mb(pid: str = "self") -> float:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # a child gone since it was listed
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(contender: str, root: str, name: str, passes: int, whole: bool) -> None:
    start = time.perf_counter()
    one_pass = _dataset(contender, root, name)
    n = sum(1 for _ in one_pass())  # the warm pass (or, whole: the only one)
    first = time.perf_counter() - start
    best, cpu = 0.0, float("inf")
    for _ in range(0 if whole else passes):
        t, c = time.perf_counter(), time.process_time()
        n = sum(1 for _ in one_pass())
        best = max(best, n / (time.perf_counter() - t))
        cpu = min(cpu, (time.process_time() - c) / n * 1e6)
    found = {"samples": n, "rate": best, "first_s": first, "peak_mb": _peak_mb()}
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the whole process, imports included
    cpu_s = usage.ru_utime + usage.ru_stime
    print(json.dumps({**found, "cpu_us": None if whole else cpu, "cpu_s": cpu_s}))


# ------------------------------------------------------------- --workers N: epochs of a loader


def count_items(batch: list[Any]) -> int:
    """The collate function of every contender with ``--workers``: the batch's length.
    Nothing is made a tensor, and only an int goes back to the parent (``copy=False``'s
    memoryviews, which cannot be pickled, never have to be)."""
    return len(batch)


def _loader(contender: str, root: str, name: str, workers: int, batch: int) -> tuple[Any, int]:
    """The contender's loader, whose iteration is one epoch of batch sizes, and the samples
    an epoch must hold."""
    every, tar = SETS[name], _folder(root, name, "tar")
    options: dict[str, Any] = {"num_workers": workers, "batch_size": batch}
    options["collate_fn"] = count_items
    if contender.startswith("shardkit"):
        from shardkit import Dataset, Loader

        return Loader(Dataset(tar, copy=contender == "shardkit"), **options), every
    if contender == "litdata":
        from litdata import StreamingDataLoader, StreamingDataset

        return StreamingDataLoader(
            StreamingDataset(_folder(root, name, "litdata")), **options
        ), every
    if contender == "mds":  # a plain torch DataLoader; MDS's own epoch_size caps the epoch
        from streaming import StreamingDataset as MDS
        from torch.utils.data import DataLoader

        cap = min(every, LOADER_CAPS["mds"])
        mds = MDS(local=_folder(root, name, "mds"), shuffle=False, batch_size=batch, epoch_size=cap)
        return DataLoader(mds, **options), cap
    import webdataset as wds  # batched in the workers, as its docs do: WebLoader(batch_size=None)

    web = wds.WebDataset(_tar_urls(tar), shardshuffle=False).batched(
        batch, collation_fn=count_items
    )
    return wds.WebLoader(web, num_workers=workers, batch_size=None), every


def _children() -> list[str]:
    """This process's live children (the workers of a loader that keeps them)."""
    pids: list[str] = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children", encoding="ascii") as children:
                pids += children.read().split()
        except OSError:
            pass
    return pids


def _cpu_s() -> float:
    """CPU seconds of this process, its reaped children (each epoch's workers, joined at
    its end) and its live ones (``/proc/PID/stat``): a difference of two counts every
    worker's time once, whether it was reaped in between or not."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for pid in _children():
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _worker_peak_mb() -> float:
    """The largest peak RSS of a worker: reaped (``RUSAGE_CHILDREN``) or live (VmHWM). A
    forked worker's counts the parent's pages it maps too (shared, not copied)."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return max([reaped, *(_peak_mb(pid) for pid in _children())])


def _epoch(loader: Any, contender: str, expected: int) -> int:
    n = sum(loader)
    if n != expected:
        raise SystemExit(
            f"{contender}: an epoch through DataLoader workers gave {n:,} samples, not {expected:,}"
        )
    return int(n)


def loader_child(contender: str, args: argparse.Namespace) -> None:
    """A warm epoch of the contender's loader, then ``--passes`` timed ones (one loader)."""
    start = time.perf_counter()
    loader, expected = _loader(contender, args.data, args.set, args.workers, args.batch)
    _epoch(loader, contender, expected)
    first = time.perf_counter() - start
    best, cpu, walls, workers = 0.0, float("inf"), [], 0.0
    for _ in range(args.passes):
        t, c = time.perf_counter(), _cpu_s()
        n = _epoch(loader, contender, expected)
        walls.append(time.perf_counter() - t)
        cpu = min(cpu, (_cpu_s() - c) / n * 1e6)
        best = max(best, n / walls[-1])
        workers = max(workers, _worker_peak_mb())
    found = {"samples": n, "rate": best, "first_s": first, "epoch_s": walls, "cpu_us": cpu}
    print(json.dumps({**found, "peak_mb": _peak_mb(), "worker_peak_mb": workers}))


def run_child(contender: str, args: argparse.Namespace, name: str, whole: bool) -> dict[str, Any]:
    python = args.peers if contender in PEERS else sys.executable
    src = os.path.join(os.path.dirname(HERE), "src")
    if contender.startswith("base "):  # the same contender, from another checkout's src
        src, contender = args.base_src, contender[len("base ") :]
    path = [os.path.join(HERE, "standins"), HERE, src]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [python, os.path.join(HERE, "read.py"), "--steady", "--child", contender]
    command += ["--data", args.data, "--set", name, "--passes", str(args.passes)]
    command += ["--whole"] if whole else []
    command += ["--workers", str(args.workers), "--batch", str(args.batch)]
    t = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if out.returncode:  # a failing contender fails the run, with its own words
        sys.stderr.write(out.stderr)
        raise SystemExit(f"bench/read.py --steady: {contender} on {name} failed ({out.returncode})")
    found: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    found["wall_s"] = wall
    return found


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steady", action="store_true", help="in-process steady-state mode")
    parser.add_argument("--set", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=3, help="timed passes per child (--steady)")
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--base-src", default=None, metavar="DIR", help="also run shardkit from this src (--steady)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="--steady: each pass an epoch through N DataLoader workers (0: in process)",
    )
    parser.add_argument(
        "--batch", type=int, default=512, metavar="B", help="batch size with --workers (512)"
    )


def main(args: argparse.Namespace, results: Any) -> None:
    if args.child:
        if args.child == "prepare-peers":
            prepare_peers(args.data, args.set)
        elif args.workers:
            loader_child(args.child, args)
        else:
            child(args.child, args.data, args.set, args.passes, args.whole)
        return
    if args.workers < 0 or args.batch < 1:
        raise SystemExit("bench/read.py --steady: --workers must be >= 0 and --batch >= 1")
    prepare_shardkit(args.data)
    contenders = [c for c in CONTENDERS if args.peers or c not in PEERS]
    if args.base_src:
        contenders[2:2] = ["base shardkit", "base shardkit copy=False"]
    if args.peers:
        for name in SETS:
            command = [args.peers, os.path.join(HERE, "read.py"), "--steady", "--data", args.data]
            command += ["--child", "prepare-peers", "--set", name]
            path = [
                os.path.join(HERE, "standins"),
                HERE,
                os.path.join(os.path.dirname(HERE), "src"),
            ]
            subprocess.run(
                command, check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)}
            )
    names = [n for n in SETS if not args.only or args.only in n]
    for name in names:
        steady: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
        whole: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
        load = os.getloadavg()[0]
        for _ in range(args.repeat):  # interleaved: a busy moment hits every contender
            for contender in contenders:
                steady[contender].append(run_child(contender, args, name, False))
                if not args.workers:
                    whole[contender].append(run_child(contender, args, name, True))
        print(
            f"\n{name}: load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        )
        if args.workers:
            _report_loader(name, steady, args, results)
        else:
            _report(name, steady, whole, results)


def _report(
    name: str,
    steady: dict[str, list[dict[str, Any]]],
    whole: dict[str, list[dict[str, Any]]],
    results: Any,
) -> None:
    what = f"{SETS[name]:,} " + ("~1 KB text + cls" if name == "small" else "~67 KB JPEGs + cls")
    lit = max(r["rate"] for r in steady["litdata"]) if "litdata" in steady else None
    rows, whole_rows = [], []
    print(f"\n{what}: in-process steady state (best of runs), and whole process (one pass)")
    for contender, runs in steady.items():
        rate = max(r["rate"] for r in runs)
        peak = max(r["peak_mb"] for r in runs)
        cpu = min(r["cpu_us"] for r in runs)
        cold = min(whole[contender], key=lambda r: r["wall_s"])
        cold_rate = cold["samples"] / cold["wall_s"]
        ratio = f"{rate / lit:.2f}x litdata" if lit else ""
        print(
            f"  {contender:26s} {rate:10,.0f}/s  {ratio:14s} CPU {cpu:6.2f} us/sample  "
            f"peak {peak:6.0f} MB   "
            f"whole process {cold['wall_s']:.2f} s ({cold_rate:,.0f}/s, "
            f"CPU {min(r['cpu_s'] for r in whole[contender]):.2f} s, "
            f"peak {cold['peak_mb']:.0f} MB)"
        )
        label = _label(contender)
        rows.append(
            {"name": label, "rate": round(rate), "peak_mb": round(peak), "cpu_us": round(cpu, 2)}
        )
        cold_cpu = min(r["cpu_s"] for r in whole[contender])
        whole_rows.append(
            {
                "name": label,
                "rate": round(cold_rate),
                "peak_mb": round(cold["peak_mb"]),
                "cpu_s": round(cold_cpu, 2),
            }
        )
    results.section(f"read in-process steady state, {what}", "samples/s", rows)
    results.section(f"read whole process (one pass), {what}", "samples/s", whole_rows)


_LABELS = {
    "litdata": "litdata StreamingDataset",
    "mds": "MDS StreamingDataset",
    "webdataset": "webdataset",
}
_LOADER_LABELS = {
    "litdata": "litdata StreamingDataLoader",
    "mds": "MDS StreamingDataset + DataLoader",
    "webdataset": "webdataset WebLoader",
}


def _label(contender: str, loader: bool = False) -> str:
    if contender.startswith(("shardkit", "base")):
        return contender.replace("shardkit", "shardkit Loader") if loader else contender
    return (_LOADER_LABELS if loader else _LABELS)[contender]


def _report_loader(
    name: str, runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace, results: Any
) -> None:
    what = f"{SETS[name]:,} " + ("~1 KB text + cls" if name == "small" else "~67 KB JPEGs + cls")
    how = f"DataLoader(num_workers={args.workers}, batch_size={args.batch})"
    best = {c: max(r["rate"] for r in found) for c, found in runs.items()}
    cpu = {c: min(r["cpu_us"] for r in found) for c, found in runs.items()}
    print(f"\n{what}: epochs after the first through {how} (best of runs)")
    rows, costs = [], []
    for contender, found in runs.items():
        epoch = min(min(r["epoch_s"]) for r in found)
        parent = max(r["peak_mb"] for r in found)
        worker = max(r["worker_peak_mb"] for r in found)
        ratio = (
            f"{best[contender] / best['litdata']:.2f}x / {cpu['litdata'] / cpu[contender]:.2f}x"
            if "litdata" in runs
            else ""
        )
        print(
            f"  {contender:26s} {best[contender]:10,.0f}/s  epoch {epoch:6.2f} s "
            f"({found[0]['samples']:,})  CPU {cpu[contender]:6.2f} us/sample  "
            f"litdata by wall / by CPU {ratio:14s}  peak {parent:5.0f} MB, worker {worker:5.0f} MB"
        )
        label = _label(contender, loader=True)
        rows.append(
            {
                "name": label,
                "rate": round(best[contender]),
                "peak_mb": round(parent),
                "worker_peak_mb": round(worker),
                "cpu_us": round(cpu[contender], 2),
                "epoch_s": round(epoch, 3),
                "samples": found[0]["samples"],
            }
        )
        costs.append({"name": label, "rate": round(cpu[contender], 2)})
    results.section(f"read through {how}, {what}", "samples/s", rows)
    results.section(
        f"CPU per sample through {how}, workers included, {what}",
        "CPU us per sample",
        costs,
        better="lower",
    )
