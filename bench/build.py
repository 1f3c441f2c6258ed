"""Build benchmark: `shardkit build` against the usual ways of packing an image folder.

Run: ``.venv/bin/python bench/build.py [--quick] [--targets /dev/shm,/tmp] [--repeat R]
[--only NAME,...] [--base OTHER_CHECKOUT]``, or ``bench/build.py --vs-tar [--images N]
[--repeat R] [--targets /dev/shm] [--base OTHER_CHECKOUT]``: the command
``shardkit build SRC OUT -q`` at its defaults (BLAKE3 digests, header validation, every
core, ``.idx`` files) against ``tar --sort=name -cf`` on the same corpus (12,000 images by
default), each a whole process run directly (no wrapper), alternating within each round,
with wall time, CPU seconds of every process and peak RSS (with ``--base``, the same
command run from another checkout's ``src`` in the same rounds: the previous version);
then ``shardkit.build`` timed in a process after its imports. It writes
``bench/results/build.json`` (GNU tar's wall time over shardkit's, per round, in the
section title). shardkit's bytecode is compiled first, as an installed package has it.

The corpus (default 20,000 JPEGs of 200-800 px in 100 classes, ~60 KB median, plus a few
zero-byte, truncated and non-image files) is generated once and cached under
``/dev/shm/shardkit-bench/``. ``--quick`` uses 3,000 images. Every contender runs in its
own subprocess, one after the other, on the same corpus, writing to each target folder
(tmpfs and disk): their figures come from one run on one machine state.

Pass-through contenders: ``shardkit build`` (default validation); GNU ``tar cf``;
webdataset's ``ShardWriter`` in one process; a ``multiprocessing.Pool`` whose workers send
every sample to one manager-shared ``ShardWriter`` under a lock; one webdataset
``ShardWriter`` per pool worker; MosaicML streaming's ``MDSWriter`` (one process) and
``litdata.optimize(num_workers=2)``, run from their own venv (see ``PEERS``) with a
stand-in ``torchvision`` (``bench/standins/``: ``import streaming`` needs one, the
registry's wheels do not load against the pinned CPU torch, MDSWriter never uses it).
Resize contenders (shorter side to 224, JPEG quality 90,
TFRecord output): ``shardkit build --resize 224 --format tfrecord`` against pool workers
that decode and resize with Pillow and feed one ``tf.io.TFRecordWriter`` through a queue.
The peers are written the way such one-off scripts usually are: plain, no validation.

Reported: images/s and MB/s over the corpus (time measured inside each process after its
imports, so TensorFlow's and torch's import time is not counted against anyone, nor the
import of shardkit's build machinery, which ``shardkit.build`` loads on its first call), wall
time (imports included), CPU seconds of the whole process tree and per file, peak RSS of
the largest process and the sum over the process tree (VmHWM sampled from /proc), how
many of the corpus's corrupt files ended up in the output, and shardkit's speed-up over
each peer by throughput and by wall time. The rows of the README's Speed table come from
``--targets /dev/shm --repeat 2`` on a quiet machine; ``--base DIR`` adds the shardkit rows
of another checkout (``shardkit@base``: the previous version), run in the same rounds and
compared with this tree's. ``bench/build_profile.py`` splits a worker's CPU per image by
stage.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from _results import Results, add_json_option

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BASE_CLI = "shardkit@base build (CLI, defaults)"
SHARD_SIZE = 100_000_000
SHARD_COUNT = 10_000
RESIZE = 224
QUALITY = 90
BAD = {"zero": 5, "truncated": 10, "text": 5}

# --------------------------------------------------------------------------- corpus

_canvases: list[Any] = []


def _canvas(seed: int, side: int = 1024) -> Any:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (side // 24, side // 24, 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(small).resize((side, side), Image.Resampling.BICUBIC))
    noisy = smooth.astype(np.int16) + rng.integers(-12, 13, (side, side, 3), dtype=np.int16)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _make_image(seed: int) -> bytes:
    from PIL import ImageDraw

    if not _canvases:
        _canvases.extend(_canvas(s) for s in range(8))
    rng = random.Random(seed)
    w, h = rng.randint(200, 800), rng.randint(200, 800)
    x, y = rng.randrange(1024 - w), rng.randrange(1024 - h)
    image = _canvases[rng.randrange(8)].crop((x, y, x + w, y + h))
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(1, 4)):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        box = (x0, y0, x0 + rng.randint(10, w // 2), y0 + rng.randint(10, h // 2))
        draw.ellipse(box, fill=tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=rng.randint(84, 94))
    return out.getvalue()


def _write_image(args: tuple[str, int]) -> int:
    path, seed = args
    data = _make_image(seed)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def make_corpus(folder: str, count: int, classes: int) -> dict[str, Any]:
    """Generate (or reuse) the corpus; returns its description."""
    marker = os.path.join(folder, ".complete.json")
    if os.path.exists(marker):
        with open(marker) as f:
            return dict(json.load(f))
    import multiprocessing

    shutil.rmtree(folder, ignore_errors=True)
    names = [f"class_{c:03d}" for c in range(classes)]
    for name in names:
        os.makedirs(os.path.join(folder, name))
    jobs = [(os.path.join(folder, names[i % classes], f"img_{i:06d}.jpg"), i) for i in range(count)]
    started = time.perf_counter()
    with multiprocessing.Pool() as pool:
        sizes = pool.map(_write_image, jobs, chunksize=64)
    bad = _add_bad_files(folder, names)
    info = {
        "images": count,
        "classes": classes,
        "bytes": sum(sizes) + sum(os.path.getsize(os.path.join(folder, p)) for p in bad),
        "median": sorted(sizes)[len(sizes) // 2],
        "bad": bad,
        "files": count + len(bad),
        "seconds": round(time.perf_counter() - started, 1),
    }
    with open(marker, "w") as f:
        json.dump(info, f)
    return info


def _add_bad_files(folder: str, names: list[str]) -> list[str]:
    bad = []
    for kind, n in BAD.items():
        for i in range(n):
            rel = f"{names[i % len(names)]}/bad_{kind}_{i}.jpg"
            if kind == "zero":
                data = b""
            elif kind == "truncated":
                full = _make_image(10_000_000 + i)
                data = full[: len(full) * (i % 4 + 3) // 8]
            else:
                data = b"<html>not an image</html>\n" * (i + 1)
            with open(os.path.join(folder, rel), "wb") as f:
                f.write(data)
            bad.append(rel)
    return bad


def list_files(src: str) -> list[tuple[int, str]]:
    """(label, relative path) of every file under the class folders, sorted."""
    classes = sorted(d for d in os.listdir(src) if not d.startswith("."))
    out = []
    for label, name in enumerate(classes):
        for file in sorted(os.listdir(os.path.join(src, name))):
            out.append((label, f"{name}/{file}"))
    return out


def _key(rel: str) -> str:
    return rel.rsplit(".", 1)[0].replace(".", "_")


# --------------------------------------------------------------------------- contenders


def c_shardkit(src: str, out: str, workers: int) -> dict[str, Any]:
    from shardkit import BuildOptions, build

    options = BuildOptions(workers=workers, max_size=SHARD_SIZE, max_count=SHARD_COUNT)
    result = build(src, out, options=options)
    return {"samples": result.samples}


def c_shardkit_defaults(src: str, out: str, workers: int) -> dict[str, Any]:
    """``shardkit.build`` at its defaults (BLAKE3, header validation, every core, .idx)."""
    from shardkit import build

    return {"samples": build(src, out).samples}


def c_shardkit_sha256(src: str, out: str, workers: int) -> dict[str, Any]:
    """The build before BLAKE3 was the default digest."""
    from shardkit import BuildOptions, build

    options = BuildOptions(workers=workers, max_size=SHARD_SIZE, max_count=SHARD_COUNT)
    result = build(src, out, options=dataclasses.replace(options, hash="sha256"))
    return {"samples": result.samples}


def c_shardkit_1worker(src: str, out: str, workers: int) -> dict[str, Any]:
    return c_shardkit(src, out, 1)


def c_gnu_tar(src: str, out: str, workers: int) -> dict[str, Any]:
    subprocess.run(["tar", "cf", os.path.join(out, "all.tar"), "-C", src, "."], check=True)
    return {}


def c_wds_single(src: str, out: str, workers: int) -> dict[str, Any]:
    import webdataset as wds

    files = list_files(src)
    pattern = os.path.join(out, "wds-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=SHARD_COUNT, maxsize=SHARD_SIZE, verbose=0) as sink:
        for label, rel in files:
            with open(os.path.join(src, rel), "rb") as f:
                data = f.read()
            sink.write({"__key__": _key(rel), "jpg": data, "cls": label})
    return {"samples": len(files)}


_shared: Any = None


def _shared_init(writer: Any, lock: Any, src: str) -> None:
    global _shared
    _shared = (writer, lock, src)


def _shared_write(item: tuple[int, str]) -> None:
    writer, lock, src = _shared
    label, rel = item
    with open(os.path.join(src, rel), "rb") as f:
        data = f.read()
    with lock:
        writer.write({"__key__": _key(rel), "jpg": data, "cls": label})


def c_wds_manager(src: str, out: str, workers: int) -> dict[str, Any]:
    import multiprocessing
    from multiprocessing.managers import BaseManager

    import webdataset as wds

    class Manager(BaseManager):
        pass

    Manager.register("ShardWriter", wds.ShardWriter)
    files = list_files(src)
    with Manager() as manager:
        pattern = os.path.join(out, "mgr-%06d.tar")
        writer = manager.ShardWriter(  # type: ignore[attr-defined]
            pattern, maxcount=SHARD_COUNT, maxsize=SHARD_SIZE, verbose=0
        )
        lock = multiprocessing.Lock()
        with multiprocessing.Pool(workers, _shared_init, (writer, lock, src)) as pool:
            pool.map(_shared_write, files, chunksize=64)
        writer.close()
    return {"samples": len(files)}


def _own_writer(args: tuple[int, str, str, list[tuple[int, str]]]) -> int:
    import webdataset as wds

    index, src, out, files = args
    pattern = os.path.join(out, f"w{index}-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=SHARD_COUNT, maxsize=SHARD_SIZE, verbose=0) as sink:
        for label, rel in files:
            with open(os.path.join(src, rel), "rb") as f:
                data = f.read()
            sink.write({"__key__": _key(rel), "jpg": data, "cls": label})
    return len(files)


def c_wds_per_worker(src: str, out: str, workers: int) -> dict[str, Any]:
    import multiprocessing

    files = list_files(src)
    jobs = [(i, src, out, files[i::workers]) for i in range(workers)]
    with multiprocessing.Pool(workers) as pool:
        counts = pool.map(_own_writer, jobs)
    return {"samples": sum(counts)}


def _peer_bad(src: str, packed: list[tuple[int, str]]) -> int:
    """How many of the corpus's corrupt files a peer packed (MDS and litdata outputs are
    not tar: the peer counts what it took, it packs whatever bytes it is given)."""
    with open(os.path.join(src, ".complete.json")) as f:
        bad = set(json.load(f)["bad"])
    return sum(1 for _, rel in packed if rel in bad)


def c_mds_writer(src: str, out: str, workers: int) -> dict[str, Any]:
    """MosaicML streaming's MDSWriter, one process (it has no parallel writer)."""
    from streaming import MDSWriter

    files = list_files(src)
    columns = {"key": "str", "jpg": "bytes", "cls": "int"}
    with MDSWriter(out=out, columns=columns, size_limit=SHARD_SIZE) as sink:
        for label, rel in files:
            with open(os.path.join(src, rel), "rb") as f:
                data = f.read()
            sink.write({"key": _key(rel), "jpg": data, "cls": label})
    return {"samples": len(files), "bad_packed": _peer_bad(src, files)}


def _litdata_item(item: tuple[str, int, str]) -> dict[str, Any]:
    src, label, rel = item
    with open(os.path.join(src, rel), "rb") as f:
        return {"key": _key(rel), "jpg": f.read(), "cls": label}


def c_litdata(src: str, out: str, workers: int) -> dict[str, Any]:
    """``litdata.optimize(num_workers=2)``: its workers read and write chunks."""
    import litdata

    files = list_files(src)
    inputs = [(src, label, rel) for label, rel in files]
    litdata.optimize(
        fn=_litdata_item,
        inputs=inputs,
        output_dir=out,
        num_workers=2,
        chunk_bytes=SHARD_SIZE,
        mode="overwrite",
    )
    return {"samples": len(files), "bad_packed": _peer_bad(src, files)}


def c_shardkit_resize(src: str, out: str, workers: int) -> dict[str, Any]:
    from shardkit import BuildOptions, build

    options = BuildOptions(
        workers=workers,
        max_size=SHARD_SIZE,
        max_count=SHARD_COUNT,
        resize=RESIZE,
        quality=QUALITY,
        format="tfrecord",
    )
    result = build(src, out, options=options)
    return {"samples": result.samples}


def _resize_producer(src: str, files: list[tuple[int, str]], queue: Any) -> None:
    from PIL import Image

    for label, rel in files:
        try:
            with Image.open(os.path.join(src, rel)) as image:
                image = image.convert("RGB")
                w, h = image.size
                scale = RESIZE / min(w, h)
                size = (max(1, round(w * scale)), max(1, round(h * scale)))
                image = image.resize(size, Image.Resampling.BICUBIC)
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=QUALITY)
            queue.put((buffer.getvalue(), label, size[1], size[0], rel))
        except Exception:
            continue
    queue.put(None)


def c_tf_queue(src: str, out: str, workers: int) -> dict[str, Any]:
    import multiprocessing

    import tensorflow as tf

    files = list_files(src)
    queue: Any = multiprocessing.Queue(maxsize=256)
    procs = [
        multiprocessing.Process(target=_resize_producer, args=(src, files[i::workers], queue))
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()

    def feature(value: Any, kind: str) -> Any:
        if kind == "bytes":
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    done, written, shard = 0, 0, 0
    writer = tf.io.TFRecordWriter(os.path.join(out, f"tf-{shard:06d}.tfrecord"))
    while done < workers:
        item = queue.get()
        if item is None:
            done += 1
            continue
        data, label, height, width, rel = item
        example = tf.train.Example(
            features=tf.train.Features(
                feature={
                    "image/encoded": feature(data, "bytes"),
                    "image/format": feature(b"jpeg", "bytes"),
                    "image/class/label": feature(label, "int"),
                    "image/height": feature(height, "int"),
                    "image/width": feature(width, "int"),
                    "image/filename": feature(rel.encode(), "bytes"),
                }
            )
        )
        writer.write(example.SerializeToString())
        written += 1
        if written % SHARD_COUNT == 0:
            writer.close()
            shard += 1
            writer = tf.io.TFRecordWriter(os.path.join(out, f"tf-{shard:06d}.tfrecord"))
    writer.close()
    for proc in procs:
        proc.join()
    return {"samples": written}


CONTENDERS: dict[str, tuple[str, Callable[[str, str, int], dict[str, Any]]]] = {
    "shardkit": ("pass", c_shardkit),
    "shardkit-1-worker": ("pass", c_shardkit_1worker),
    "shardkit-sha256": ("pass", c_shardkit_sha256),
    "shardkit-defaults": ("pass", c_shardkit_defaults),
    "gnu-tar": ("pass", c_gnu_tar),
    "wds-single": ("pass", c_wds_single),
    "wds-manager-lock": ("pass", c_wds_manager),
    "wds-per-worker": ("pass", c_wds_per_worker),
    "mds-writer": ("pass", c_mds_writer),
    "litdata-optimize-2": ("pass", c_litdata),
    "shardkit-resize": ("resize", c_shardkit_resize),
    "tf-queue-resize": ("resize", c_tf_queue),
}
# Peers installed in a venv of their own: `python3 -m venv /tmp/benchvenv;
# /tmp/benchvenv/bin/pip install torch==2.13.0 mosaicml-streaming litdata` (or
# SHARDKIT_BENCH_PEER_PYTHON). `import streaming` imports torchvision, whose registry
# wheels do not load against the pinned CPU torch: bench/standins/ holds a stand-in
# torchvision with just the names `import streaming` needs (MDSWriter never uses it).
PEERS = ("mds-writer", "litdata-optimize-2")
STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")
_IMPORTS = {
    "wds-single": "webdataset",
    "wds-manager-lock": "webdataset",
    "wds-per-worker": "webdataset",
    "tf-queue-resize": "tensorflow",
    "mds-writer": "streaming",
    "litdata-optimize-2": "litdata",
    # shardkit loads its build machinery at the first build() (~55 ms here, where no
    # bytecode is cached): an import like the peers', so it is done before the clock starts.
    "shardkit": "shardkit.builder._api",
    "shardkit-1-worker": "shardkit.builder._api",
    "shardkit-sha256": "shardkit.builder._api",
    "shardkit-defaults": "shardkit.builder._api",
    "shardkit-resize": "shardkit.builder._api",
}


def run_contender(name: str, src: str, out: str, workers: int) -> None:
    """Subprocess entry: import, time the work, print one JSON line."""
    if name in _IMPORTS:
        try:
            __import__(_IMPORTS[name])
        except ModuleNotFoundError:  # a --base tree from before builder/api.py was _api.py
            __import__(_IMPORTS[name].replace("._api", ".api"))
    started = time.perf_counter()
    info = CONTENDERS[name][1](src, out, workers)
    info["seconds"] = time.perf_counter() - started
    _stop_forkserver()
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children it waited for
    info["cpu"] = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    print(json.dumps(info))


def _stop_forkserver() -> None:
    """Stop and reap the forkserver a pool started (it reaped its workers), so that the
    CPU time of every worker counts in RUSAGE_CHILDREN (a private call, in a benchmark)."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        server._stop()


# --------------------------------------------------------------------------- measuring


_TICK = os.sysconf("SC_CLK_TCK")


def _role(pid: int, root: int, parent: int) -> str:
    """What a process of a build's session is: the driver (``root``), the pool's
    forkserver (a child of the driver; its workers, forked from it, have its command
    line), its resource tracker, or a worker."""
    if pid == root:
        return "driver"
    if parent != root:  # forked by the forkserver
        return "worker"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return "worker"
    for role in (b"forkserver", b"resource_tracker"):
        if role in cmdline:
            return role.decode()
    return "worker"


def _tree_hwm(
    root: int, peaks: dict[int, int], cpu: dict[int, float], roles: dict[int, str]
) -> None:
    """Record VmHWM (KiB), CPU seconds and role of every process in ``root``'s session."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != root:  # session id
                continue
            cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime
            if roles.get(int(pid), "worker") == "worker":  # a child before its exec: again
                roles[int(pid)] = _role(int(pid), root, int(fields[1]))
            with open(f"/proc/{pid}/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        peaks[int(pid)] = max(peaks.get(int(pid), 0), int(line.split()[1]))
        except (OSError, IndexError, ValueError):
            continue


def run_tree(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` in a new session; its wall time, the CPU seconds and the peak RSS (MB:
    the largest process, and the sum) of every process in the session (and the CPU
    seconds by role: driver, forkserver, resource tracker, workers), and its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, start_new_session=True, env=env)
    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}
    roles: dict[int, str] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            _tree_hwm(proc.pid, peaks, cpu, roles)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    stdout, _ = proc.communicate()
    stop.set()
    thread.join()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed with status {proc.returncode}")
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # what sampling missed, roughly
    by_role: dict[str, float] = {}
    for pid, seconds in cpu.items():
        role = roles.get(pid, "worker")
        by_role[role] = by_role.get(role, 0.0) + seconds
    return {
        "wall": wall,
        "cpu": sum(cpu.values()),
        "cpu_roles": by_role,
        "workers": sum(1 for role in roles.values() if role == "worker"),
        "rss_max": max(peaks.values(), default=0) / 1024,
        "rss_sum": sum(peaks.values()) / 1024,
        "stdout": stdout.decode(),
        "children_cpu": kids.ru_utime + kids.ru_stime,
    }


def vs_tar(args: argparse.Namespace) -> None:
    """``shardkit build SRC OUT`` at its defaults against ``tar --sort=name -cf``, whole
    process (interpreter start, imports, pool start, manifest and .idx files included),
    alternating in each round on the same corpus and target; then ``shardkit.build`` in a
    process after its imports (the in-process figure). Ratios are GNU tar's wall time over
    shardkit's, per round (the machine's load moves both)."""
    count = args.images or 12_000
    src = os.path.join(args.cache, f"corpus-{count}-{args.classes}")
    corpus = make_corpus(src, count, args.classes)
    import compileall

    import shardkit

    # Bytecode, as an installed package has it (PYTHONDONTWRITEBYTECODE would otherwise
    # make every run compile ~100 modules from source: a cost of this checkout, not of use).
    compileall.compile_dir(os.path.dirname(shardkit.__file__), quiet=1)
    target = args.targets.split(",")[0]
    out = os.path.join(target, f"shardkit-bench-out-{os.getpid()}")
    tar_out = os.path.join(target, f"shardkit-bench-tar-{os.getpid()}.tar")
    commands = {
        "GNU tar --sort=name -cf": ["tar", "--sort=name", "-cf", tar_out, "-C", src, "."],
        "shardkit build (CLI, defaults)": [
            sys.executable,
            "-m",
            "shardkit",
            "build",
            src,
            out,
            "-q",
        ],
    }
    envs: dict[str, dict[str, str] | None] = {name: None for name in commands}
    if args.base:  # the previous version's CLI, in the same rounds (bytecode compiled too)
        base_src = os.path.join(args.base, "src")
        compileall.compile_dir(os.path.join(base_src, "shardkit"), quiet=1)
        commands[BASE_CLI] = commands["shardkit build (CLI, defaults)"]
        envs[BASE_CLI] = {**os.environ, "PYTHONPATH": base_src}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in [*commands, "in-process"]}
    for round_ in range(args.repeat):
        for name, cmd in commands.items():
            shutil.rmtree(out, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tar_out)
            runs[name].append(run_tree(cmd, envs[name]))
            print(f"[{round_ + 1}] {name}: {runs[name][-1]['wall']:.2f} s", file=sys.stderr)
        runs["in-process"].append(measure("shardkit-defaults", src, out, args.workers))
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tar_out)
    tar, ours = runs["GNU tar --sort=name -cf"], runs["shardkit build (CLI, defaults)"]
    ratios = sorted(t["wall"] / s["wall"] for t, s in zip(tar, ours, strict=True))
    files, megabytes = corpus["files"], corpus["bytes"] / 1e6
    print(f"\ncorpus: {corpus['images']} JPEGs + {len(corpus['bad'])} corrupt, {megabytes:.0f} MB")
    print("| round | GNU tar wall s | shardkit wall s | tar/shardkit | CPU s tar / shardkit |")
    print("| shardkit peak RSS MB (largest process / sum) | in-process s (after imports) |")
    for i, (t, s, p) in enumerate(zip(tar, ours, runs["in-process"], strict=True)):
        print(
            f"| {i + 1} | {t['wall']:.2f} | {s['wall']:.2f} | {t['wall'] / s['wall']:.2f}x | "
            f"{t['cpu']:.2f} / {s['cpu']:.2f} | {s['rss_max']:.0f} / {s['rss_sum']:.0f} | "
            f"{p['seconds']:.2f} |"
        )
    print(f"tar/shardkit wall, median of {len(ratios)}: {ratios[len(ratios) // 2]:.2f}x")
    print("| round | shardkit CPU s: driver / forkserver / workers (n) | build s (its own clock) |")
    for i, s in enumerate(ours):
        print(f"| {i + 1} | {_roles(s)} | {_build_seconds(s['stdout'])} |")
    if args.base:
        base = runs[BASE_CLI]
        print(
            "| round | shardkit@base wall s | CPU s | peak RSS MB (largest / sum) | "
            "CPU s: driver / forkserver / workers (n) | build s |"
        )
        for i, b in enumerate(base):
            rss = f"{b['rss_max']:.0f} / {b['rss_sum']:.0f}"
            print(
                f"| {i + 1} | {b['wall']:.2f} | {b['cpu']:.2f} | {rss} | {_roles(b)} | "
                f"{_build_seconds(b['stdout'])} |"
            )
        for label, key in (("wall", "wall"), ("CPU", "cpu")):
            pairs = sorted(b[key] / s[key] for b, s in zip(base, ours, strict=True))
            print(f"base/this tree {label}, median of {len(pairs)}: {pairs[len(pairs) // 2]:.2f}x")
    best = {
        name: min(r, key=lambda x: x["wall"]) for name, r in runs.items() if name != "in-process"
    }
    inproc = min(runs["in-process"], key=lambda x: x["seconds"])
    results = Results("build")
    results.section(
        f"build, {count:,} JPEGs ({megabytes:.0f} MB), whole process, best of {args.repeat}; "
        f"tar/shardkit per round: {', '.join(f'{r:.2f}x' for r in ratios)}",
        "images/s",
        [
            {
                "name": "shardkit build" + ("@base" if name == BASE_CLI else ""),
                "rate": round(files / best[name]["wall"]),
                "peak_mb": round(best[name]["rss_sum"]),
            }
            if name.startswith("shardkit")
            else {
                "name": name,
                "rate": round(files / best[name]["wall"]),
                "peak_mb": round(best[name]["rss_max"]),
            }
            for name in commands
        ],
    )
    results.section(
        f"shardkit.build in process (after imports), {count:,} JPEGs",
        "images/s",
        [
            {
                "name": "shardkit.build",
                "rate": round(files / inproc["seconds"]),
                "peak_mb": round(inproc["rss_sum"]),
            }
        ],
    )
    results.write(args.json)


def _roles(run: dict[str, Any]) -> str:
    """CPU seconds of a build's driver, forkserver and workers (their count)."""
    roles = run["cpu_roles"]
    return (
        f"{roles.get('driver', 0):.2f} / {roles.get('forkserver', 0):.2f} / "
        f"{roles.get('worker', 0):.2f} ({run['workers']})"
    )


def _build_seconds(stdout: str) -> str:
    """The seconds a ``shardkit build -q`` reports for its build (after its listing)."""
    found = re.search(r", ([0-9.]+) s -> ", stdout)
    return found.group(1) if found else "?"


def measure(name: str, src: str, out: str, workers: int, base: str = "") -> dict[str, Any]:
    """Run contender ``name`` in its own process; ``NAME@base`` runs shardkit's contender
    ``NAME`` with ``base/src`` (another checkout) first on its path."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    python, env = sys.executable, None
    if name in PEERS:  # their own venv (they pin other versions of torch's neighbours)
        python = os.environ.get("SHARDKIT_BENCH_PEER_PYTHON", "/tmp/benchvenv/bin/python")
        env = {**os.environ, "PYTHONPATH": STANDINS}
    if name.endswith("@base"):
        name = name.removesuffix("@base")
        env = {**os.environ, "PYTHONPATH": os.path.join(base, "src")}
    cmd = [python, os.path.abspath(__file__), "--contender", name]
    cmd += ["--src", src, "--out", out, "--workers", str(workers)]
    tree = run_tree(cmd, env)
    info: dict[str, Any] = json.loads(tree.pop("stdout").strip().splitlines()[-1])
    tree["cpu"] = max(tree["cpu"], info.get("cpu", 0.0))
    info.update(tree)
    if "bad_packed" not in info:
        info["bad_packed"] = count_bad(out)
    shutil.rmtree(out, ignore_errors=True)
    return info


def count_bad(out: str) -> int:
    """Images in the output that fail shardkit's header validation (truncated, empty...)."""
    from shardkit.builder._validate import check_image
    from shardkit.errors import DataError

    bad = 0
    for data in _output_images(out):
        try:
            check_image(data, "jpg")
        except DataError:
            bad += 1
    return bad


def _output_images(out: str) -> Any:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tar import iter_members
    from shardkit.formats.tfrecord import iter_records

    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if name.endswith(".tar"):
            with open(path, "rb") as f:
                for member in iter_members(f):
                    if member.name.lower().endswith((".jpg", ".jpeg")):
                        yield member.data
        elif name.endswith(".tfrecord"):
            with open(path, "rb") as f:
                for _, record in iter_records(f):
                    yield decode_example(record)["image/encoded"][0]


# --------------------------------------------------------------------------- report


def report(
    rows: list[tuple[str, str, dict[str, Any]]], corpus: dict[str, Any], results: Results
) -> None:
    """One table: throughput (time measured after imports), wall time (the whole process,
    imports and start-up included), CPU seconds and CPU microseconds per file (every
    process of the contender), peak RSS, corrupt files packed, and shardkit's speed-up by
    throughput and by wall time (shardkit's default row of the same kind and target)."""
    files, megabytes = corpus["files"], corpus["bytes"] / 1e6
    print(
        f"\ncorpus: {corpus['images']} JPEGs + {len(corpus['bad'])} corrupt files, "
        f"{corpus['classes']} classes, {megabytes:.0f} MB, median {corpus['median'] / 1e3:.0f} kB"
    )
    head = "| target | contender | images/s | MB/s | time s | wall s | CPU s | CPU us/file |"
    print("\n" + head + " RSS max MB | RSS sum MB | corrupt packed | shardkit speed-up | (wall) |")
    print("|" + "---|" * 13)
    ours: dict[tuple[str, str], dict[str, Any]] = {}
    for target, name, info in rows:
        ours[(target, name)] = info
        if name in ("shardkit", "shardkit-resize"):
            ours[(target, CONTENDERS[name][0])] = info
    for target, name, info in rows:
        rate = files / info["seconds"]
        if name.endswith("@base"):  # against the same contender of this tree
            mine = ours.get((target, name.removesuffix("@base")))
        else:
            mine = ours.get((target, CONTENDERS[name][0]))
        speedup = wall = ""
        if mine is not None and (name.endswith("@base") or not name.startswith("shardkit")):
            speedup = f"{info['seconds'] / mine['seconds']:.2f}x"
            wall = f"{info['wall'] / mine['wall']:.2f}x"
        print(
            f"| {target} | {name} | {rate:,.0f} | {megabytes / info['seconds']:,.0f} | "
            f"{info['seconds']:.2f} | {info['wall']:.2f} | {info['cpu']:.1f} | "
            f"{info['cpu'] / files * 1e6:.0f} | {info['rss_max']:.0f} | {info['rss_sum']:.0f} | "
            f"{info['bad_packed']} | {speedup} | {wall} |"
        )
    for target in dict.fromkeys(target for target, _, _ in rows):
        results.section(
            f"build, {corpus['images']} JPEGs, output in {target}",
            "images/s",
            [
                {"name": name, "rate": round(files / info["seconds"]), "peak_mb": info["rss_sum"]}
                for t, name, info in rows
                if t == target
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 images instead of 20,000")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--cache", default="/dev/shm/shardkit-bench")
    parser.add_argument("--targets", default="/dev/shm,/tmp")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1, help="best of R rounds per contender")
    parser.add_argument("--only", default="", help="comma-separated contender names")
    parser.add_argument(
        "--base", default="", help="another checkout: adds its shardkit rows (NAME@base)"
    )
    parser.add_argument(
        "--vs-tar",
        action="store_true",
        help="shardkit build (defaults, whole process) against tar --sort=name, side by side "
        "(default 12,000 images), and shardkit.build in process",
    )
    parser.add_argument("--contender", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    add_json_option(parser, "build")
    args = parser.parse_args()
    if args.contender:
        run_contender(args.contender, args.src, args.out, args.workers)
        return
    if args.vs_tar:
        vs_tar(args)
        return
    count = args.images or (3_000 if args.quick else 20_000)
    src = os.path.join(args.cache, f"corpus-{count}-{args.classes}")
    corpus = make_corpus(src, count, args.classes)
    names = [n for n in args.only.split(",") if n] or list(CONTENDERS)
    if args.base:  # the previous version's shardkit rows, interleaved with the others
        names += [f"{n}@base" for n in names if n.startswith("shardkit")]
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for round_ in range(args.repeat):  # rounds interleave contenders: fairer on a busy machine
        for target in args.targets.split(","):
            out = os.path.join(target, f"shardkit-bench-out-{os.getpid()}")
            for name in names:
                info = measure(name, src, out, args.workers, args.base)
                key = (target, name)
                if key not in best or info["seconds"] < best[key]["seconds"]:
                    best[key] = info
                print(f"[{round_ + 1}] {target} {name}: {info['seconds']:.2f} s", file=sys.stderr)
    rows = [(target, name, info) for (target, name), info in best.items()]
    results = Results("build")
    report(rows, corpus, results)
    results.write(args.json)


if __name__ == "__main__":
    main()
