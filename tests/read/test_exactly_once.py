"""The exactly-once matrix: real DDP processes (gloo on CPU), delivered keys checked.

launchers {env (torchrun's variables), torch.multiprocessing.spawn (no RANK/WORLD_SIZE)}
x DataLoader workers {0, 2} x sources {Dataset with a manifest, mix of two,
IndexedDataset + DistributedSampler (torchdata's StatefulDataLoader)} x {no stop, stop at a
random step then resume on the same topology, resume on another topology (2x2 -> 3x1,
3x1 -> 1x2)}. docs/reliability.md lists each cell and what it asserts.

Each launcher is one test of three launches (2 ranks, 3 ranks, 1 rank); every cell of a
topology runs inside its launch, so the whole matrix is six process launches.
"""

from __future__ import annotations

import collections
import os
import random
from typing import Any

import pytest
from helpers.launch import Launcher, launch
from helpers.pipeline import write_shards

from shardkit import ConfigError, Dataset, IndexedDataset, Loader, mix
from shardkit.tools import write_indexes

BATCH = 3
SOURCES = ("manifest", "mix", "indexed")
ELASTIC = ("manifest", "mix")  # IndexedDataset's position belongs to the sampler


def _tag(sample: dict[str, Any]) -> str:
    """``folder/key``: unique over the two sources of the mix."""
    return f"{os.path.basename(os.path.dirname(sample['__url__']))}/{sample['__key__']}"


def _all_keys(folder: str) -> list[str]:
    return [f"{os.path.basename(folder)}/s{i:05d}" for i in range(60)]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("exact")
    a, b = str(root / "a"), str(root / "b")
    urls = write_shards(a, [7, 5, 9, 6, 8, 4, 10, 11])  # 60 samples
    write_shards(b, [12, 9, 15, 12, 12])  # 60 samples
    write_indexes(urls)
    return {"a": a, "b": b}


# ------------------------------------------------------------------ in each rank


class _Cell:
    """One source read by one rank with ``workers`` DataLoader workers."""

    def __init__(self, source: str, data: dict[str, str], workers: int) -> None:
        self.source, self.data, self.workers = source, data, workers

    def loader(self, rank: int, world: int) -> Any:
        context = {"multiprocessing_context": "fork"} if self.workers else {}
        if self.source == "indexed":
            from torch.utils.data import DistributedSampler
            from torchdata.stateful_dataloader import StatefulDataLoader

            ds = IndexedDataset(self.data["a"]).map(_tag)
            sampler = DistributedSampler(ds, num_replicas=world, rank=rank, seed=3)
            sampler.set_epoch(0)
            return StatefulDataLoader(
                ds, batch_size=BATCH, sampler=sampler, num_workers=self.workers,
                collate_fn=list, **context,
            )  # fmt: skip
        if self.source == "manifest":
            ds = Dataset(self.data["a"], seed=3, shuffle_shards=True)
        else:
            ds = mix([Dataset(self.data["a"], seed=3), Dataset(self.data["b"], seed=4)], seed=5)
        staged = ds.map(_tag).batched(BATCH, collate=None)
        return Loader(staged, num_workers=self.workers, **context)

    def step(self, batches: int, launcher: str) -> int:
        """The random step this cell stops at (the same on every rank)."""
        name = f"{launcher}/{self.source}/{self.workers}"
        return random.Random(name).randrange(1, batches)


def _head(loader: Any, steps: int) -> tuple[list[list[str]], Any]:
    head = []
    for batch in loader:
        head.append(batch)
        if len(head) == steps:
            break
    return head, loader.state_dict()


def _rest(loader: Any, state: Any) -> list[list[str]]:
    """The documented resume loop: load the state, then set the epoch, then iterate."""
    loader.load_state_dict(state)
    if isinstance(loader, Loader):
        for epoch in range(loader.epoch, 1):
            loader.set_epoch(epoch)
            return list(loader)
        return []
    return list(loader)


def _two_ranks(rank: int, world: int, data: dict[str, str], launcher: str) -> dict[str, Any]:
    """No stop and same-topology resume of every cell; the states to resume elsewhere."""
    out: dict[str, Any] = {}
    for workers in (0, 2):
        for source in SOURCES:
            cell = _Cell(source, data, workers)
            full = list(cell.loader(rank, world))
            step = cell.step(len(full), launcher)
            head, state = _head(cell.loader(rank, world), step)
            rest = _rest(cell.loader(rank, world), state)
            out[f"{source}/{workers}"] = {"full": full, "head": head, "rest": rest}
            if workers == 2 and source in ELASTIC:
                out[f"{source}/{workers}"]["state"] = state
    return out


def _resume_on(
    rank: int, world: int, data: dict[str, str], workers: int, states: dict[str, Any]
) -> dict[str, Any]:
    """Resume every source of ``states`` (all saved ranks' states) here; then stop this
    topology at its third batch and save its own states."""
    out: dict[str, Any] = {}
    for source, saved in states.items():
        cell = _Cell(source, data, workers)
        try:
            rest = _rest(cell.loader(rank, world), saved)
        except ConfigError as exc:
            out[source] = {"refused": str(exc)}
            continue
        head, state = _head(cell.loader(rank, world), 3)
        out[source] = {"rest": rest, "head": head, "state": state}
    return out


# ------------------------------------------------------------------ checks


def _flat(batches: list[list[str]]) -> list[str]:
    return [key for batch in batches for key in batch]


def _expected(source: str, data: dict[str, str]) -> list[str]:
    keys = _all_keys(data["a"])
    return keys + _all_keys(data["b"]) if source == "mix" else keys


def _check_epoch(parts: list[list[str]], expected: list[str], slack: int, cell: str) -> None:
    """Every key delivered, at most ``slack`` repeats (pad), nothing foreign."""
    counts = collections.Counter(key for part in parts for key in part)
    assert set(counts) == set(expected), cell
    assert sum(counts.values()) - len(expected) <= slack, cell


@pytest.mark.parametrize("launcher", ["env", "spawn"])
def test_every_sample_exactly_once_however_launched_and_resumed(
    data: dict[str, str], launcher: Launcher
) -> None:
    two = launch(_two_ranks, 2, launcher, data, launcher)
    for workers in (0, 2):
        for source in SOURCES:
            name = f"{launcher}/{source}/{workers}"
            cells = [ranks[f"{source}/{workers}"] for ranks in two]
            fulls = [_flat(c["full"]) for c in cells]
            # no stop: the multiset of keys is the dataset's, the same count on each rank
            _check_epoch(fulls, _expected(source, data), 0, name + " no stop")
            assert len({len(f) for f in fulls}) == 1, name
            # stop and resume on the same topology: the uninterrupted run, batch for batch
            for c in cells:
                assert c["head"] + c["rest"] == c["full"], name + " same topology"

    # 2 ranks x 2 workers -> 3 ranks x 1 worker
    saved = {s: [ranks[f"{s}/2"]["state"] for ranks in two] for s in ELASTIC}
    three = launch(_resume_on, 3, launcher, data, 1, saved)
    for source in ELASTIC:
        name = f"{launcher}/{source} 2x2 -> 3x1"
        if source == "mix":  # documented: a mix resumes only on its own topology
            refusals = [r["mix"].get("refused", "") for r in three]
            assert all("resumes only on the ranks and workers" in r for r in refusals)
            continue
        heads = [_flat(ranks[f"{source}/2"]["head"]) for ranks in two]
        rests = [_flat(r[source]["rest"]) for r in three]
        _check_epoch(heads + rests, _expected(source, data), 3, name)
        assert len({len(r) for r in rests}) == 1, name

    # 3 ranks x 1 worker (stopped at its third batch) -> 1 rank x 2 workers
    again = {"manifest": [r["manifest"]["state"] for r in three]}
    one = launch(_resume_on, 1, launcher, data, 2, again)
    heads = [_flat(r["manifest"]["head"]) for r in three]
    rest = _flat(one[0]["manifest"]["rest"])
    _check_epoch([*heads, rest], _all_keys(data["a"]), 1, f"{launcher}/manifest 3x1 -> 1x2")
