"""Format benchmark: shardkit's tar and TFRecord readers/writers against their peers.

Run: ``.venv/bin/python bench/formats.py [--samples N] [--repeat R] [--dir /dev/shm]``;
``--import-only`` prints just the ``import shardkit`` time (medians of 20, wall and CPU).

Every contender works on the same in-memory samples (~60 KB JPEG-like payloads plus a
``cls`` and a ``json`` field), writes to / reads from the same folder (tmpfs by default, so
the figures measure the code, not the disk), and is timed best-of-R, interleaved, in one
run. Ratios are shardkit's throughput over each peer's.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable

from _results import Results, add_json_option

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

Sample = dict[str, object]


def make_samples(n: int, seed: int = 0) -> list[Sample]:
    rng = random.Random(seed)
    blob = rng.randbytes(100_000)
    out = []
    for i in range(n):
        size = rng.randint(40_000, 80_000)
        start = rng.randint(0, len(blob) - size)
        label = rng.randrange(1000)
        out.append(
            {
                "__key__": f"sample{i:08d}",
                "jpg": blob[start : start + size],
                "cls": str(label).encode(),
                "json": b'{"label": %d, "source": "bench"}' % label,
            }
        )
    return out


# --------------------------------------------------------------------------- tar writers


def shardkit_tar_write(samples: list[Sample], path: str) -> None:
    from shardkit.formats.tar import TarWriter

    with open(path, "wb") as f, TarWriter(f) as writer:
        for s in samples:
            writer.write(s)


def webdataset_tar_write(samples: list[Sample], path: str) -> None:
    import webdataset as wds

    with wds.TarWriter(path) as writer:
        for s in samples:
            writer.write(s)


def tarfile_write(samples: list[Sample], path: str) -> None:
    with tarfile.open(path, "w") as tf:
        for s in samples:
            for ext, value in s.items():
                if ext.startswith("__"):
                    continue
                data = value if isinstance(value, bytes) else str(value).encode()
                info = tarfile.TarInfo(f"{s['__key__']}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))


# --------------------------------------------------------------------------- tar readers


def shardkit_tar_read(path: str) -> int:
    from shardkit.formats.tar import iter_samples

    n = 0
    with open(path, "rb") as f:
        for _ in iter_samples(f, url=path):
            n += 1
    return n


def webdataset_tar_read(path: str) -> int:
    import webdataset as wds

    return sum(1 for _ in wds.WebDataset(path, shardshuffle=False))


def tarfile_read(path: str) -> int:
    keys = set()
    with tarfile.open(path, "r|") as tf:
        for member in tf:
            f = tf.extractfile(member)
            if f is not None:
                f.read()
                keys.add(member.name.split(".", 1)[0])
    return len(keys)


# --------------------------------------------------------------------------- TFRecord


def _features(s: Sample) -> dict[str, object]:
    return {"image": s["jpg"], "label": int(s["cls"]), "json": s["json"]}  # type: ignore[call-overload]


def shardkit_tfrecord_write(samples: list[Sample], path: str) -> None:
    from shardkit.formats.example import encode_example
    from shardkit.formats.tfrecord import frame_record

    with open(path, "wb") as f:
        for s in samples:
            f.write(frame_record(encode_example(_features(s))))


def tf_tfrecord_write(samples: list[Sample], path: str) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for s in samples:
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[s["jpg"]])),
                        "label": tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[int(s["cls"])])  # type: ignore[call-overload]
                        ),
                        "json": tf.train.Feature(bytes_list=tf.train.BytesList(value=[s["json"]])),
                    }
                )
            )
            writer.write(example.SerializeToString())


def shardkit_tfrecord_read(path: str) -> int:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    n = 0
    with open(path, "rb", buffering=1 << 20) as f:
        for offset, record in iter_records(f, url=path):
            features = decode_example(record, url=path, offset=offset)
            n += len(features["image"]) > 0
    return n


def tf_tfrecord_read(path: str) -> int:
    import tensorflow as tf

    spec = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "json": tf.io.FixedLenFeature([], tf.string),
    }
    n = 0
    for record in tf.data.TFRecordDataset(path):
        parsed = tf.io.parse_single_example(record, spec)
        n += len(parsed["image"].numpy()) > 0
    return n


# --------------------------------------------------------------------------- harness


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def race(
    title: str,
    contenders: dict[str, Callable[[], object]],
    n: int,
    repeat: int,
    results: Results | None = None,
) -> list[tuple[str, float]]:
    times = {name: float("inf") for name in contenders}
    for _ in range(repeat):  # interleaved rounds: noise hits everyone alike
        for name, fn in contenders.items():
            times[name] = min(times[name], best_of(fn, 1))
    ours = n / times["shardkit"]
    print(f"\n{title}")
    print(f"  {'contender':<28}{'samples/s':>12}{'shardkit is':>14}")
    rows = []
    for name, seconds in times.items():
        rate = n / seconds
        ratio = "" if name == "shardkit" else f"{ours / rate:.2f}x"
        print(f"  {name:<28}{rate:>12,.0f}{ratio:>14}")
        rows.append((name, rate))
    if results is not None:
        results.section(title, "samples/s", [{"name": k, "rate": round(v)} for k, v in rows])
    return rows


def import_time(runs: int = 20) -> str:
    """``python -c "import shardkit"`` beside ``python -c pass``, alternating: the median
    wall time and the median CPU time (user + sys, from os.wait4) of ``runs`` each."""
    times: dict[str, tuple[list[float], list[float]]] = {"pass": ([], []), "import": ([], [])}
    for _ in range(runs):
        for name, code in (("pass", "pass"), ("import", "import shardkit")):
            started = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-c", code])
            _, _, usage = os.wait4(child.pid, 0)
            times[name][0].append(time.perf_counter() - started)
            times[name][1].append(usage.ru_utime + usage.ru_stime)
    wall, cpu = (statistics.median(t) * 1000 for t in times["import"])
    base_wall, base_cpu = (statistics.median(t) * 1000 for t in times["pass"])
    return (
        f"python -c 'import shardkit': {wall:.0f} ms wall, {cpu:.0f} ms CPU "
        f"(python -c pass: {base_wall:.0f} / {base_cpu:.0f}; medians of {runs})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    parser.add_argument("--import-only", action="store_true", help="only the import time")
    add_json_option(parser, "formats")
    args = parser.parse_args()
    results = Results("formats")
    if args.import_only:
        print(import_time())
        return
    n = args.samples
    samples = make_samples(n)
    mb = sum(len(s["jpg"]) for s in samples) / 1e6  # type: ignore[arg-type]
    print(f"{n} samples, {mb:.0f} MB of payload, files in {args.dir}")
    base = os.path.join(args.dir, f"shardkit-bench-formats-{os.getpid()}")
    paths = {name: f"{base}-{name}" for name in ("sk.tar", "wds.tar", "tf.tar", "sk.tfr", "tf.tfr")}
    try:
        import tensorflow  # noqa: F401 - imported up front so its import is not timed
        import webdataset  # noqa: F401

        race(
            "tar write",
            {
                "shardkit": lambda: shardkit_tar_write(samples, paths["sk.tar"]),
                "webdataset TarWriter": lambda: webdataset_tar_write(samples, paths["wds.tar"]),
                "tarfile loop": lambda: tarfile_write(samples, paths["tf.tar"]),
            },
            n,
            args.repeat,
            results,
        )
        size = os.path.getsize(paths["sk.tar"]), os.path.getsize(paths["wds.tar"])
        print(f"  shard size: shardkit {size[0]:,} B, webdataset {size[1]:,} B")
        race(
            "tar read (raw samples)",
            {
                "shardkit": lambda: shardkit_tar_read(paths["sk.tar"]),
                "webdataset WebDataset": lambda: webdataset_tar_read(paths["sk.tar"]),
                "tarfile loop": lambda: tarfile_read(paths["sk.tar"]),
            },
            n,
            args.repeat,
            results,
        )
        race(
            "TFRecord write (Example encode + framing)",
            {
                "shardkit": lambda: shardkit_tfrecord_write(samples, paths["sk.tfr"]),
                "tf.io.TFRecordWriter": lambda: tf_tfrecord_write(samples, paths["tf.tfr"]),
            },
            n,
            args.repeat,
            results,
        )
        race(
            "TFRecord read + parse (CRC checked)",
            {
                "shardkit": lambda: shardkit_tfrecord_read(paths["tf.tfr"]),
                "tf.data + parse_single_example": lambda: tf_tfrecord_read(paths["tf.tfr"]),
            },
            n,
            args.repeat,
            results,
        )
        print(f"\n{import_time()}")
        results.write(args.json)
    finally:
        for path in paths.values():
            if os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":
    main()
