from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

import pytest
from helpers.pipeline import write_shards

import shardkit
from shardkit import Dataset


def test_is_an_iterable_dataset() -> None:
    from torch.utils.data import IterableDataset

    assert isinstance(Dataset("nowhere/a-{0..3}.tar"), IterableDataset)


def test_pickles_small_and_opens_nothing_before_iteration(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(str(tmp_path), "missing-{000..999}.tar")
    ds = Dataset(missing, seed=3).shuffle(100).decode("rgb8").to_tuple("jpg", "cls").batched(8)
    data = pickle.dumps(ds)
    assert len(data) < 3000
    back = pickle.loads(data)
    assert repr(back) == repr(ds)
    with pytest.raises(shardkit.StorageError, match="no such file"):
        next(iter(back))


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip()


def test_torch_is_not_imported_but_registered_when_it_is(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [3, 3])
    code = f"""
import sys, shardkit
ds = shardkit.Dataset({folder!r}).shuffle(3).decode().batched(2, collate=None)
n = sum(len(b) for b in ds)
print(n, "torch" in sys.modules, "numpy" in sys.modules)
import torch.utils.data
print(isinstance(ds, torch.utils.data.IterableDataset))
"""
    assert _run(code).split() == ["6", "False", "False", "True"]
    before = "import torch.utils.data, shardkit; "
    check = "print(isinstance(shardkit.Dataset('a.tar'), torch.utils.data.IterableDataset))"
    assert _run(before + check) == "True"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_split_the_shards(tmp_path: os.PathLike[str], context: str) -> None:
    from torch.utils.data import DataLoader

    folder = str(tmp_path)
    write_shards(folder, [5, 4, 6, 3], manifest=False)
    ds = Dataset(folder).shuffle(4).decode().to_tuple("__key__", "cls")
    loader: DataLoader[Any] = DataLoader(
        ds, batch_size=4, num_workers=2, multiprocessing_context=context
    )
    seen = [key for keys, _ in loader for key in keys]
    assert sorted(seen) == [f"s{i:05d}" for i in range(18)]


# (name, DataLoader keywords) read on each rank of a DDP launch; the rank's start method
# is spawn (torch.multiprocessing.spawn), so a worker without a context says spawn too.
_LAUNCH_CASES: list[tuple[str, dict[str, Any]]] = [
    ("main process", {"num_workers": 0}),
    ("fork x2", {"num_workers": 2, "multiprocessing_context": "fork"}),
    ("default x2 persistent", {"num_workers": 2, "persistent_workers": True}),
    ("forkserver x1", {"num_workers": 1, "multiprocessing_context": "forkserver"}),
]


def _read_each_way(rank: int, world: int, folder: str) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    ds = Dataset(folder, seed=1).to_tuple("__key__")
    out: dict[str, Any] = {"len": len(ds)}
    for name, options in _LAUNCH_CASES:
        loader: DataLoader[Any] = DataLoader(ds, batch_size=5, collate_fn=list, **options)
        epochs = 2 if options.get("persistent_workers") else 1
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            out[f"{name} epoch {epoch}"] = [key for batch in loader for (key,) in batch]
    batches = shardkit.Loader(ds.map(_first).batched(5, collate=None), num_workers=2)
    out["Loader"] = []
    for batch in batches:  # the state after the first batch, from the same two workers
        if not out["Loader"]:
            out["Loader state"] = batches.state_dict()["streams"]
        out["Loader"] += batch
    return out


def _first(item: tuple[Any, ...]) -> Any:
    return item[0]


def test_ddp_ranks_split_the_samples_in_every_dataloader_mode(tmp_path: os.PathLike[str]) -> None:
    """torch.multiprocessing.spawn + init_process_group (no RANK / WORLD_SIZE): with 0,
    1 or 2 workers under fork, spawn and forkserver, persistent or not, and through
    shardkit.Loader, the two ranks read disjoint halves (torchrun's environment: the
    exactly-once matrix)."""
    from helpers.launch import launch

    folder = str(tmp_path)
    write_shards(folder, [6, 5, 7, 4, 8])  # 30 samples
    ranks = launch(_read_each_way, 2, "spawn", folder)
    names = [name for name in ranks[0] if name not in ("len", "Loader state")]
    for name in names:
        halves = [result[name] for result in ranks]
        assert [len(h) for h in halves] == [15, 15], name
        assert sorted(halves[0] + halves[1]) == [f"s{i:05d}" for i in range(30)], name
    assert [result["len"] for result in ranks] == [15, 15]
    for rank, result in enumerate(ranks):
        assert {(s["rank"], s["world"]) for s in result["Loader state"]} == {(rank, 2)}


def test_a_worker_that_cannot_know_its_rank_raises(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset made inside a DataLoader worker never saw the parent's process: with
    MASTER_ADDR set (the parent may be in a group) it raises rather than read as rank 0
    of 1; given node=, it reads that rank's part."""
    from torch.utils.data import DataLoader, IterableDataset

    folder = str(tmp_path)
    write_shards(folder, [4, 4])

    class MadeInWorker(IterableDataset[Any]):
        def __init__(self, node: tuple[int, int] | None) -> None:
            self.node = node

        def __iter__(self) -> Any:
            return iter(Dataset(folder, node=self.node).to_tuple("__key__"))

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    loader: DataLoader[Any] = DataLoader(
        MadeInWorker(None), num_workers=1, multiprocessing_context="fork"
    )
    with pytest.raises(shardkit.ConfigError, match=r"MASTER_ADDR is set.*pass node="):
        list(loader)
    given: DataLoader[Any] = DataLoader(
        MadeInWorker((1, 2)), num_workers=1, multiprocessing_context="fork", collate_fn=list
    )
    assert len(list(given)) == 4
    assert len(list(Dataset(folder))) == 8  # the main process is a single process
