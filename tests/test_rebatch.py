"""Re-batching in the main process: shardkit.from_iterable over a DataLoader (webdataset's
WebLoader(...).unbatched().shuffle(n).batched(b))."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest_pipeline import write_shards

import shardkit
from shardkit.pipeline import as_is


def test_rebatch_a_dataloader_in_the_main_process(tmp_path: os.PathLike[str]) -> None:
    from torch.utils.data import DataLoader

    folder = os.path.join(tmp_path, "ds")
    write_shards(folder, [10, 10, 10, 7])
    ds = shardkit.Dataset(folder).decode().to_tuple("__key__", "cls").batched(4)
    loader = DataLoader(ds, batch_size=None, num_workers=2, collate_fn=as_is)
    main = shardkit.from_iterable(loader, seed=3).unbatched().shuffle(16).batched(10)
    batches = list(main)
    assert [len(keys) for keys, _ in batches] == [10, 10, 10, 7]
    keys = [k for batch_keys, _ in batches for k in batch_keys]
    assert sorted(keys) == [f"s{i:05d}" for i in range(37)]  # every sample once
    in_loader_order = [k for batch_keys, _ in loader for k in batch_keys]
    assert keys != in_loader_order  # shuffled across the workers' batches
    labels = np.concatenate([cls for _, cls in batches])
    assert sorted(labels.tolist()) == list(range(37))
    again = shardkit.from_iterable(loader, seed=3).unbatched().shuffle(16).batched(10)
    assert [list(k) for k, _ in again] == [list(k) for k, _ in batches]  # seeded


def test_len_with_epoch_and_passes() -> None:
    items = shardkit.from_iterable([(1, 2), (3, 4)])
    with pytest.raises(TypeError, match="len"):
        len(items)
    cycled = shardkit.from_iterable(range(3)).with_epoch(7).batched(2)
    assert len(cycled) == 4
    assert [b.tolist() for b in cycled] == [[0, 1], [2, 0], [1, 2], [0]]
    assert list(shardkit.from_iterable(range(2)).repeat(2)) == [0, 1, 0, 1]
    with pytest.raises(TypeError, match="iterable"):
        shardkit.from_iterable(5)  # type: ignore[arg-type]


def test_state_dict_resumes_a_repeatable_iterable() -> None:
    run = shardkit.from_iterable(range(20), seed=1).shuffle(5)
    it = iter(run)
    head = [next(it) for _ in range(7)]
    state = run.state_dict()
    again = shardkit.from_iterable(range(20), seed=1).shuffle(5)
    again.load_state_dict(state)
    assert head + list(again) == list(shardkit.from_iterable(range(20), seed=1).shuffle(5))
