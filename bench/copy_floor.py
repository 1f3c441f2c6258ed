"""The build worker's two kernel copies per image, alone, against GNU tar's.

Run: ``.venv/bin/python bench/copy_floor.py [--quick] [--rounds R] [--hash blake3]``

Over the corpus of ``bench/build.py`` (cached under ``/dev/shm/shardkit-bench/``), in this
process, one after the other in each round: the syscalls a build worker makes per image,
as it makes them (``stat``, ``open`` with ``O_NONBLOCK|O_NOATIME``, ``fstat``, one ``read``
of ``size + 1`` bytes into a fresh ``bytes``, ``close``, one ``writev`` of header, data and
padding into one output file on the same folder) and variants of it: without the
``stat`` before the open, without ``O_NOATIME``, reading into one reused buffer
(``os.readv``; no fresh ``bytes`` per file), each with the digest's updates as a task makes
them (``--hash none``: without); then ``tar --sort=name -cf`` over the same files, to the
same folder; the output is removed after each run, untimed. Reports user and system CPU
microseconds per file (``getrusage``, best of ``--rounds``: the machine is noisy) and
minor page faults per file (a fresh ``bytes`` that malloc had to fault in again would
show here). What it measures is the floor the worker's
Python sits on: the kernel's copies out of and into the page cache.
"""

from __future__ import annotations

import argparse
import os
import resource
import stat
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_OPEN = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_HEADER = bytes(512)
_PADS = [bytes(-n % 512) for n in range(512)]


def _usage(who: int) -> tuple[float, float, int]:
    usage = resource.getrusage(who)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def _files(src: str) -> list[tuple[str, int]]:
    found = []
    for folder, _, names in sorted(os.walk(src)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if not name.startswith(".") and os.path.isfile(path):
                found.append((path, os.path.getsize(path)))
    return found


def _copier(
    files: list[tuple[str, int]], out: str, hash_name: str, variant: str
) -> Callable[[], None]:
    """One pass over ``files`` as the worker copies them, changed as ``variant`` says."""
    flags = _OPEN | (0 if variant == "no O_NOATIME" else getattr(os, "O_NOATIME", 0))
    do_stat = variant != "no stat"
    buffer = memoryview(bytearray(max((size for _, size in files), default=0) + 1))

    def run() -> None:
        hasher: Any = None
        if hash_name != "none":
            from shardkit.digest import new_hasher

            hasher = new_hasher(hash_name)
        target = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for path, size in files:
                if do_stat and not stat.S_ISREG(os.stat(path).st_mode):
                    continue
                fd = os.open(path, flags)
                try:
                    if not stat.S_ISREG(os.fstat(fd).st_mode):
                        continue
                    if variant == "reused buffer":
                        data: Any = buffer[: os.readv(fd, [buffer[: size + 1]])]
                    else:
                        data = os.read(fd, size + 1)
                finally:
                    os.close(fd)
                chunks = [_HEADER, data, _PADS[len(data) % 512]]
                if hasher is not None:
                    for chunk in chunks:
                        hasher.update(chunk)
                os.writev(target, chunks)
        finally:
            os.close(target)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 images instead of 12,000")
    parser.add_argument("--cache", default="/dev/shm/shardkit-bench")
    parser.add_argument("--hash", default="none", help="digest updated per chunk (none: no)")
    parser.add_argument("--rounds", type=int, default=5, help="best of R runs per variant")
    args = parser.parse_args()
    count = 3_000 if args.quick else 12_000
    src = os.path.join(args.cache, f"corpus-{count}-100")
    if not os.path.exists(os.path.join(src, ".complete.json")):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from build import make_corpus

        make_corpus(src, count, 100)
    files = _files(src)
    out = os.path.join(os.path.dirname(src), f"copy-floor-{os.getpid()}")
    variants = ("worker", "no stat", "no O_NOATIME", "reused buffer")
    runs = {name: _copier(files, out, args.hash, name) for name in variants}
    best: dict[str, tuple[float, float, int]] = {}
    for _ in range(args.rounds):
        for name, run in runs.items():
            before = _usage(resource.RUSAGE_SELF)
            run()
            after = _usage(resource.RUSAGE_SELF)
            os.unlink(out)  # not timed, as tar's is not: a build keeps what it writes
            took = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
            if name not in best or sum(took[:2]) < sum(best[name][:2]):
                best[name] = took
        before = _usage(resource.RUSAGE_CHILDREN)
        subprocess.run(["tar", "--sort=name", "-cf", out, "-C", src, "."], check=True)
        after = _usage(resource.RUSAGE_CHILDREN)
        os.unlink(out)
        took = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
        if "GNU tar" not in best or sum(took[:2]) < sum(best["GNU tar"][:2]):
            best["GNU tar"] = took
    print(f"\n{len(files)} files, hash {args.hash}: CPU us per file, best of {args.rounds}\n")
    print("| copy | user | sys | all | minor faults |")
    print("|---|---|---|---|---|")
    for name, (user, system, faults) in best.items():
        per = [x / len(files) * 1e6 for x in (user, system, user + system)]
        print(
            f"| {name} | {per[0]:.1f} | {per[1]:.1f} | {per[2]:.1f} | {faults / len(files):.2f} |"
        )


if __name__ == "__main__":
    main()
