"""Reading benchmark: shardkit.Dataset against webdataset 1.0.2, a tarfile loop and tf.data.

Run: ``.venv/bin/python bench/read.py [--quick] [--repeat R] [--data DIR]``

The data (~20,000 samples of ~60 KB JPEGs plus a ``cls`` field; ``--quick``: 3,000) is
generated once into ``/dev/shm/shardkit-bench-read`` as tar shards and as TFRecord shards,
both written by shardkit, and reused by later runs. Every contender runs in a fresh
subprocess (best of R; imports happen before the clock starts), so its peak RSS is its own
(VmHWM; DataLoader workers' from ``RUSAGE_CHILDREN``) and the page cache is warm for all.
Groups, side by side:

* raw iteration (samples as dicts of bytes): shardkit vs webdataset vs a tarfile loop;
* ``decode("rgb8")``: shardkit vs webdataset;
* TFRecord read + parse: shardkit vs ``tf.data.TFRecordDataset`` + ``tf.io.parse_single_example``
  in eager Python iteration;
* ``DataLoader(num_workers=2, batch_size=32)`` over ``decode("rgb8").to_tuple("jpg", "cls")``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PER_SHARD = 1000
FULL, QUICK = 20_000, 3_000


# --------------------------------------------------------------------------- data


def _jpeg_pool(count: int, seed: int = 0) -> list[bytes]:
    """Distinct 384x384 JPEGs of ~60 KB: smooth colour fields with grain."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:384, 0:384].astype(np.float32) / 384
    out = []
    for _ in range(count):
        a, b, c = rng.uniform(0, 255, 3)
        base = np.stack([a * x + (255 - a) * y, b * y, c * (1 - x)], axis=-1)
        grain = rng.normal(0, 16, base.shape)
        pixels = np.clip(base + grain, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def ensure_data(root: str, samples: int) -> None:
    """Write ``samples`` samples as tar and TFRecord shards under ``root`` (once)."""
    stamp = os.path.join(root, f"done-{samples}")
    if os.path.exists(stamp):
        return
    from shardkit import ShardWriter

    pool = _jpeg_pool(400)
    for fmt in ("tar", "tfrecord"):
        folder = os.path.join(root, str(samples), fmt)
        os.makedirs(folder, exist_ok=True)
        pattern = os.path.join(folder, f"shard-%06d.{fmt}")
        with ShardWriter(pattern, max_count=PER_SHARD, max_size=None, encode=False) as sink:
            for i in range(samples):
                sink.write(
                    {"__key__": f"s{i:08d}", "jpg": pool[i % len(pool)], "cls": b"%d" % (i % 1000)}
                )
    open(stamp, "w").close()


def shards(root: str, samples: int, fmt: str, limit: int | None = None) -> list[str]:
    folder = os.path.join(root, str(samples), fmt)
    names = sorted(n for n in os.listdir(folder) if n.endswith(fmt))
    if limit is not None:
        names = names[: max(2, -(-limit // PER_SHARD))]
    return [os.path.join(folder, n) for n in names]


# --------------------------------------------------------------------------- contenders
# Each takes (root, samples, limit), does its imports, and returns the work to time: a
# function returning the number of samples it produced.

Work = Callable[[], int]


def _count(items: Iterable[Any]) -> int:
    n = 0
    for _ in items:
        n += 1
    return n


def _images() -> None:
    """Import what image decoding needs up front, for every contender alike."""
    import numpy  # noqa: F401
    import PIL.Image  # noqa: F401


def tarfile_raw(root: str, samples: int, limit: int) -> Work:
    import tarfile

    urls = shards(root, samples, "tar")

    def work() -> int:
        n, last = 0, None
        for path in urls:
            with tarfile.open(path, "r|") as tar:
                sample: dict[str, bytes] = {}
                for member in tar:
                    key, _, ext = member.name.partition(".")
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    if key != last:
                        n, last, sample = n + 1, key, {}
                    sample[ext] = data
        return n

    return work


def webdataset_raw(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    urls = shards(root, samples, "tar")
    return lambda: _count(wds.WebDataset(urls, shardshuffle=False))


def shardkit_raw(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tar")
    return lambda: _count(Dataset(urls))


def webdataset_rgb8(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    _images()
    urls = shards(root, samples, "tar", limit)
    return lambda: _count(wds.WebDataset(urls, shardshuffle=False).decode("rgb8"))


def shardkit_rgb8(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    _images()
    urls = shards(root, samples, "tar", limit)
    return lambda: _count(Dataset(urls).decode("rgb8"))


def tfdata_parse(root: str, samples: int, limit: int) -> Work:
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in ("__key__", "jpg", "cls")}
    urls = shards(root, samples, "tfrecord")

    def work() -> int:
        n = 0
        for record in tf.data.TFRecordDataset(urls):
            tf.io.parse_single_example(record, spec)
            n += 1
        return n

    return work


def shardkit_tfrecord(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tfrecord")
    return lambda: _count(Dataset(urls))


def _loader(dataset: Any) -> Work:
    from torch.utils.data import DataLoader

    def work() -> int:
        loader = DataLoader(dataset, batch_size=32, num_workers=2)
        return sum(len(labels) for _, labels in loader)

    return work


def webdataset_loader(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    urls = shards(root, samples, "tar", limit)
    return _loader(wds.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls"))


def shardkit_loader(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tar", limit)
    return _loader(Dataset(urls).decode("rgb8").to_tuple("jpg", "cls"))


GROUPS: dict[str, list[tuple[str, Callable[[str, int, int], Work]]]] = {
    "raw iteration": [
        ("shardkit", shardkit_raw),
        ("webdataset", webdataset_raw),
        ("tarfile loop", tarfile_raw),
    ],
    'decode("rgb8")': [("shardkit", shardkit_rgb8), ("webdataset", webdataset_rgb8)],
    "TFRecord read+parse": [("shardkit", shardkit_tfrecord), ("tf.data", tfdata_parse)],
    "DataLoader(workers=2) rgb8": [
        ("shardkit", shardkit_loader),
        ("webdataset", webdataset_loader),
    ],
}
CONTENDERS = {fn.__name__: fn for group in GROUPS.values() for _, fn in group}


# --------------------------------------------------------------------------- running


def peak_rss_mb() -> float:
    """This process's peak RSS. ``ru_maxrss`` survives exec on Linux (it would report the
    launching process's peak if that was larger), so read the memory map's own VmHWM."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished children (workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def child(name: str, root: str, samples: int, limit: int) -> None:
    """Run one contender in this (fresh) process and print its figures as JSON."""
    work = CONTENDERS[name](root, samples, limit)
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    count = work()
    seconds = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "samples": count,
        "seconds": seconds,
        "cpu_us": cpu / max(count, 1) * 1e6,
        "rss_mb": peak_rss_mb(),
        "worker_rss_mb": workers,
        "torch": "torch" in sys.modules,
    }
    print(json.dumps(result))


def run_child(name: str, root: str, samples: int, limit: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--data", root]
    command += ["--samples", str(samples), "--limit", str(limit)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = dict(min(runs, key=lambda r: r["seconds"]))
    best["rate"] = best["samples"] / best["seconds"]
    best["cpu_us"] = min(r["cpu_us"] for r in runs)
    best["rss_mb"] = max(r["rss_mb"] for r in runs)
    best["worker_rss_mb"] = max(r["worker_rss_mb"] for r in runs)
    return best


def report(results: dict[str, list[tuple[str, dict[str, Any]]]]) -> None:
    print(
        f"{'group':<28} {'contender':<14} {'samples':>8} {'samples/s':>10} {'ratio':>7} "
        f"{'CPU us/sample':>14} {'peak RSS MB':>12} {'worker RSS MB':>14} {'torch':>6}"
    )
    for group, rows in results.items():
        ours = rows[0][1]["rate"]
        for label, r in rows:
            ratio = ours / r["rate"]
            workers = f"{r['worker_rss_mb']:.0f}" if "DataLoader" in group else "-"
            print(
                f"{group:<28} {label:<14} {r['samples']:>8} {r['rate']:>10.0f} "
                f"{ratio:>6.2f}x {r['cpu_us']:>14.0f} {r['rss_mb']:>12.0f} {workers:>14} "
                f"{r['torch']!s:>6}"
            )
    print(
        "ratio = shardkit's samples/s over the contender's (best of the runs); CPU us/sample: "
        "user+sys time of all threads and workers (least of the runs), which a busy machine "
        "disturbs less than wall time; RSS: peak"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} samples, not {FULL}")
    parser.add_argument("--repeat", type=int, default=2, help="runs per contender (best)")
    parser.add_argument("--data", default="/dev/shm/shardkit-bench-read")
    parser.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    samples = args.samples or (QUICK if args.quick else FULL)
    limit = args.limit or min(samples, 4000)  # decode and DataLoader groups
    if args.child:
        child(args.child, args.data, samples, limit)
        return
    ensure_data(args.data, samples)
    print(f"{samples} samples of ~60 KB JPEGs in {args.data}; decode/DataLoader on ~{limit}")
    results = {}
    for group, contenders in GROUPS.items():
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in contenders}
        for _ in range(args.repeat):  # interleaved, so a busy moment hits every contender
            for label, fn in contenders:
                runs[label].append(run_child(fn.__name__, args.data, samples, limit))
        results[group] = [(label, best_of(runs[label])) for label, _ in contenders]
    report(results)


if __name__ == "__main__":
    main()
