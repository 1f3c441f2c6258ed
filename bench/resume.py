"""Resume cost: the size of a loader state per rank, and the time from
``load_state_dict`` to the first batch.

Run: ``PYTHONPATH=src .venv/bin/python bench/resume.py [--shards 10000] [--workers 8]
[--samples 1000000]``.

* **State size**: ``shardkit.Loader(mix of 4 datasets over --shards shards in all,
  num_workers=--workers)``, stopped after a few batches; ``state_dict()`` as pickled (what
  ``torch.save`` writes) and as JSON, on one rank of 4 (``node=(1, 4)``), and with
  ``all_ranks=True``-style lists of every rank (4 x the rank's). Shards hold 1 sample each:
  the state does not depend on their size, only on their number (it does not: a stream's
  position is a few ints).
* **Time to the first batch**: a TFRecord dataset of --samples samples (1,000 shards, a
  manifest), the state of its one stream two batches before the end of the epoch (a state
  saved after one batch, its ``consumed`` set there: reading 1 M samples to reach it
  would only slow the benchmark down); the time from ``load_state_dict`` to the first
  batch, in the main process (no workers), against a fresh epoch's first batch. The
  source skips whole shards by their counts without opening them, and drops the rest of
  the last one before any stage runs, so nothing skipped is decoded.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time

from shardkit import Dataset, Loader, ShardWriter, mix


def _manifest(folder: str, shards: int, per_shard: int, fmt: str) -> str:
    """``shards`` shards of ``per_shard`` tiny samples each, and their manifest."""
    os.makedirs(folder, exist_ok=True)
    pattern = os.path.join(folder, f"s-%06d.{fmt}")
    entries = []
    index = 0
    with ShardWriter(pattern, max_count=per_shard, max_size=None) as sink:
        for _ in range(shards * per_shard):
            sink.write({"__key__": f"k{index:08d}", "cls": index})
            index += 1
    for shard in sink.shards:
        entries.append({"url": os.path.basename(shard.url), "samples": shard.samples})
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"shards": entries}, f)
    return folder


def _key(sample: dict[str, object]) -> object:
    return sample["__key__"]


def state_size(root: str, shards: int, workers: int) -> None:
    sources = [
        Dataset(_manifest(os.path.join(root, f"src{i}"), shards // 4, 1, "tar"), seed=i)
        for i in range(4)
    ]
    ds = mix(sources, weights=[4, 3, 2, 1], node=(1, 4)).map(_key).batched(16, collate=None)
    loader = Loader(ds, num_workers=workers, multiprocessing_context="fork")
    for step, _ in enumerate(loader):
        if step == workers:
            break
    state = loader.state_dict()
    raw, text = len(pickle.dumps(state)), len(json.dumps(state))
    print(f"state of one rank (mix of 4 over {shards} shards, {workers} workers): ", end="")
    print(f"{raw} bytes pickled, {text} bytes JSON; every rank of 4: {4 * raw} bytes pickled")


def first_batch(root: str, samples: int) -> None:
    folder = _manifest(os.path.join(root, "big"), 1000, samples // 1000, "tfrecord")

    def make() -> Dataset:
        return Dataset(folder, seed=1).decode().to_tuple("__key__", "cls").batched(64)

    fresh = make()
    start = time.perf_counter()
    next(iter(fresh))
    cold = time.perf_counter() - start
    head = make()
    next(iter(head))
    state = head.state_dict()  # after one batch: what a stream near the end differs by
    state["consumed"] = len(head) * 64 - 128  # two batches before the end of the epoch
    again = make()
    start = time.perf_counter()
    again.load_state_dict(state)
    next(iter(again))
    resumed = time.perf_counter() - start
    print(
        f"{samples} samples: first batch of a fresh epoch {cold * 1e3:.0f} ms; "
        f"load_state_dict at sample {state['consumed']} -> first batch {resumed * 1e3:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        state_size(root, args.shards, args.workers)
        first_batch(root, args.samples)


if __name__ == "__main__":
    main()
