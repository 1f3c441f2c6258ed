"""Re-batching in the main process: .unbatched() and shardkit.from_iterable over a
DataLoader (webdataset's WebLoader(...).unbatched().shuffle(n).batched(b))."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest_pipeline import write_shards

import shardkit
from shardkit.pipeline.collate import collate_batch, uncollate


@pytest.mark.parametrize(
    "items",
    [
        [(1, "a", b"x"), (2, "b", b"y"), (3, "c", b"z")],
        [{"cls": 1, "txt": "a"}, {"cls": 2, "txt": "b"}],
        [np.zeros((2, 3)) + i for i in range(4)],
        [7, 8, 9],
        [("k1", np.zeros(2)), ("k2", np.ones(2))],
    ],
)
def test_uncollate_inverts_collate(items: list[object]) -> None:
    for mode in ("auto", "numpy"):
        batch = collate_batch(list(items), mode)  # type: ignore[arg-type]
        got = list(uncollate(batch))
        if isinstance(batch, tuple):  # a DataLoader hands tuples on as lists
            assert repr(list(uncollate(list(batch)))) == repr(got)
        assert len(got) == len(items)
        for a, b in zip(got, items, strict=True):
            if isinstance(b, np.ndarray):
                assert np.array_equal(a, b)
            elif isinstance(b, tuple):
                assert len(a) == len(b)
                for x, y in zip(a, b, strict=True):
                    assert np.array_equal(x, y) if isinstance(y, np.ndarray) else x == y
            elif isinstance(b, dict):
                assert {k: v.item() if hasattr(v, "item") else v for k, v in a.items()} == b
            else:
                assert a == b


def test_uncollate_refuses_ragged_columns() -> None:
    with pytest.raises(ValueError, match="different lengths"):
        list(uncollate(([1, 2], [3])))


def test_rebatch_a_dataloader_in_the_main_process(tmp_path: os.PathLike[str]) -> None:
    from torch.utils.data import DataLoader

    folder = os.path.join(tmp_path, "ds")
    write_shards(folder, [10, 10, 10, 7])
    ds = shardkit.Dataset(folder).decode().to_tuple("__key__", "cls").batched(4)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    main = shardkit.from_iterable(loader, seed=3).unbatched().shuffle(16).batched(10)
    batches = list(main)
    assert [len(keys) for keys, _ in batches] == [10, 10, 10, 7]
    keys = [k for batch_keys, _ in batches for k in batch_keys]
    assert sorted(keys) == [f"s{i:05d}" for i in range(37)]  # every sample once
    in_loader_order = [k for batch_keys, _ in DataLoader(ds, batch_size=None) for k in batch_keys]
    assert keys != in_loader_order  # shuffled across the workers' batches
    labels = np.concatenate([cls for _, cls in batches])
    assert sorted(labels.tolist()) == list(range(37))
    again = shardkit.from_iterable(loader, seed=3).unbatched().shuffle(16).batched(10)
    assert [list(k) for k, _ in again] == [list(k) for k, _ in batches]  # seeded


def test_len_and_with_epoch() -> None:
    items = shardkit.from_iterable([(1, 2), (3, 4)]).unbatched()
    with pytest.raises(TypeError, match="len"):
        len(items)
    cycled = shardkit.from_iterable(range(3)).with_epoch(7).batched(2)
    assert len(cycled) == 4
    assert [b.tolist() for b in cycled] == [[0, 1], [2, 0], [1, 2], [0]]
    with pytest.raises(TypeError, match="iterable"):
        shardkit.from_iterable(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unbatched"):
        len(shardkit.from_iterable(range(3)).with_epoch(3).unbatched())
