from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

import pytest
from conftest_pipeline import write_shards

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
