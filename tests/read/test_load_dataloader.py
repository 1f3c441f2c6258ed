"""Load: a long read of many small shards through ``DataLoader(num_workers=2)`` for
several epochs, with fresh and with persistent workers.

Every epoch yields every sample exactly once; after the first epoch the main process's
open file descriptors stay the same and its RSS grows by less than 20 MB; once the
loader is deleted, no worker process is left.
"""

from __future__ import annotations

import gc
import os
import time
from collections import Counter
from typing import Any

import pytest
from helpers.pipeline import write_shards
from helpers.procs import descendants, still_alive

from shardkit import Dataset

SHARDS, PER_SHARD, EPOCHS = 200, 10, 5
TOTAL = SHARDS * PER_SHARD
RSS_SLACK = 20 << 20


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("load"))
    write_shards(folder, [PER_SHARD] * SHARDS, payload=64)
    return os.path.join(folder, "manifest.json")


def _fds(settle_to: int | None = None) -> int:
    """Open fds of this process; with ``settle_to``, waits up to 2 s for the count to come
    down to it (a worker's queue closes its pipe from a feeder thread, a moment later)."""
    deadline = time.monotonic() + 2
    while True:
        count = len(os.listdir("/proc/self/fd"))
        if settle_to is None or count <= settle_to or time.monotonic() > deadline:
            return count
        time.sleep(0.02)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _read_epochs(manifest: str, *, persistent: bool) -> list[dict[str, Any]]:
    """Read EPOCHS epochs; per epoch: the keys seen, fds and RSS measured after it."""
    from torch.utils.data import DataLoader

    ds = Dataset(manifest, seed=5, equalize="drop").shuffle(50).to_tuple("__key__", "cls")
    loader: Any = DataLoader(
        ds, batch_size=16, num_workers=2, persistent_workers=persistent, collate_fn=list
    )
    epochs: list[dict[str, Any]] = []
    workers: set[int] = set()
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        keys = []
        for batch in loader:
            keys += [key for key, cls in batch if int(key[1:]) == int(cls)]
            workers |= set(descendants())
        gc.collect()
        fds = _fds(int(epochs[0]["fds"]) if epochs else None)
        epochs.append({"keys": keys, "fds": fds, "rss": _rss()})
    del loader
    gc.collect()
    epochs.append({"workers": workers})
    return epochs


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh", "persistent"])
def test_five_epochs_of_many_shards_without_leaks(many_shards: str, persistent: bool) -> None:
    before = set(descendants())
    *epochs, last = _read_epochs(many_shards, persistent=persistent)
    expected = {f"s{i:05d}" for i in range(TOTAL)}
    orders = []
    for number, epoch in enumerate(epochs):
        counts = Counter(epoch["keys"])
        assert len(epoch["keys"]) == TOTAL, f"epoch {number}: {len(epoch['keys'])} samples"
        assert set(counts) == expected and max(counts.values()) == 1, f"epoch {number}"
        orders.append(tuple(epoch["keys"]))
    assert len(set(orders)) == EPOCHS  # a new shuffle each epoch
    fds = [e["fds"] for e in epochs]
    rss = [e["rss"] for e in epochs]
    # No epoch ends holding more fds than the first did. (Fewer is fine: the first count
    # can still include a worker pipe that a feeder thread closes a moment later.)
    assert max(fds[1:]) <= fds[0], f"open fds per epoch: {fds}"
    assert max(rss[1:]) - rss[0] < RSS_SLACK, f"RSS per epoch (MB): {[r >> 20 for r in rss]}"
    workers = last["workers"] - before
    assert workers, "the loader started no worker process"
    assert not still_alive(workers, timeout=15), "workers left after the loader was deleted"
    assert set(descendants()) <= before
