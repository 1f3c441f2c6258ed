"""``shardkit view``'s memory under issue 28's case-6 loads (the server in a subprocess,
its memory read from /proc; the dataset helpers are tests/helpers/view.py's).

Run: ``PYTHONPATH=src .venv/bin/python bench/view_memory.py giant|page|page-idx [--kill-gb 4]``

- ``giant``: six parallel ``/thumb/I`` requests, each for a 169-Mpx PNG (a flat colour);
- ``page``: one grid page of 100 samples of 20 MB (a sparse tar shard), read forward;
- ``page-idx``: the same with the shard's ``.idx``.

Prints the answers, the time they took, the server's peak RSS (VmHWM) and its anonymous
memory after (RssAnon), and whether it still answers ``/``. A watchdog kills the server
past ``--kill-gb`` of RSS (the code before the budgets took 7-8 GB for ``giant``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers.tools import write_shards
from helpers.view import flat_png, get, memory, served, sparse_shard


def _dataset(root: Path, what: str) -> str:
    folder = root / "d"
    if what == "giant":
        png = flat_png(13_000, 13_000)
        write_shards(str(folder), [{"__key__": f"g/{i}", "png": png} for i in range(6)])
        return str(folder)
    os.makedirs(folder)
    shard = folder / "shard-000000.tar"
    sparse_shard(shard, 100, 20_000_000)
    if what == "page-idx":
        from shardkit.tools.index import write_indexes

        write_indexes([str(shard)])
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["giant", "page", "page-idx"])
    parser.add_argument("--kill-gb", type=float, default=4.0)
    args = parser.parse_args()
    folder = _dataset(Path(tempfile.mkdtemp()), args.what)
    with served(folder) as (url, process):
        killed = threading.Event()

        def watch() -> None:
            while process.poll() is None:
                try:
                    if memory(process.pid)["VmRSS"] > args.kill_gb * 1e9:
                        killed.set()
                        process.kill()
                except (OSError, KeyError):
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()

        def status(path: str) -> object:
            try:
                return get(url, path, timeout=600)[0]
            except OSError as exc:
                return type(exc).__name__

        paths = [f"/thumb/{i}" for i in range(6)] if args.what == "giant" else ["/?size=100"]
        start = time.perf_counter()
        with ThreadPoolExecutor(len(paths)) as pool:
            answers = list(pool.map(status, paths))
        took = time.perf_counter() - start
        alive = process.poll() is None
        mem = memory(process.pid) if alive else {}
        print(
            f"{args.what}: answers {answers} in {took:.1f} s; killed past "
            f"{args.kill_gb:g} GB: {killed.is_set()}; peak RSS {mem.get('VmHWM', 0) / 1e6:.0f} MB; "
            f"anonymous after {mem.get('RssAnon', 0) / 1e6:.0f} MB; "
            f"then / answers {status('/') if alive else None}"
        )


if __name__ == "__main__":
    main()
