from __future__ import annotations

import collections
import json
import os
import random
from typing import Any

import numpy as np
import pytest
from helpers.pipeline import keys, write_shards
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit import Dataset, FormatError
from shardkit.pipeline import ShardList
from shardkit.pipeline._context import Context
from shardkit.pipeline._epochs import plan_stream, rank_samples, split_counts


@given(st.integers(0, 500), st.integers(1, 8), st.integers(1, 16))
def test_split_counts_keeps_batches_whole(total: int, parts: int, unit: int) -> None:
    sizes = split_counts(total, parts, unit)
    assert sum(sizes) == total and len(sizes) == parts
    assert sum(-(-s // unit) for s in sizes) == -(-total // unit)  # batches do not depend on parts
    assert max(sizes) - min(sizes) <= unit


def _stream_ids(shards: ShardList, ctx: Context, **kw: Any) -> list[int]:
    """Global sample ids a stream reads, from its plan (sample j of shard k)."""
    assert shards.counts is not None
    starts = np.cumsum((0, *shards.counts))
    ids = []
    for seg in plan_stream(shards, ctx, **kw).segments:
        stop = shards.counts[seg.shard] if seg.take is None else seg.skip + seg.take
        ids += [int(starts[seg.shard]) + j for j in range(seg.skip, stop)]
    return ids


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=7).filter(lambda c: sum(c) > 0),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from([1, 3]),
    st.sampled_from(["pad", "drop"]),
    st.integers(0, 3),
)
def test_equal_epochs_cover_the_data(
    counts: list[int], world: int, workers: int, unit: int, mode: str, epoch: int
) -> None:
    shards = ShardList(tuple(f"s{i}.tar" for i in range(len(counts))), tuple(counts))
    total, quota = sum(counts), rank_samples(sum(counts), world, mode)  # type: ignore[arg-type]
    seen: list[int] = []
    for rank in range(world):
        per_worker = [
            _stream_ids(
                shards,
                Context(seed=5, epoch=epoch, rank=rank, world=world, worker=w, workers=workers),
                mode=mode,
                shuffle=True,
                granularity=unit,
            )
            for w in range(workers)
        ]
        assert [len(ids) for ids in per_worker] == split_counts(quota, workers, unit)
        seen += [i for ids in per_worker for i in ids]
    if mode == "drop":
        assert len(seen) == len(set(seen)) == world * (total // world)
    else:
        assert set(seen) == set(range(total)) and len(seen) == world * -(-total // world)


def tag_worker(sample: dict[str, Any]) -> tuple[str, int]:
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return sample["__key__"], -1 if info is None else info.id


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("equalize", ["pad", "drop"])
def test_ddp_ranks_and_workers_get_equal_epochs(
    tmp_path: os.PathLike[str], world: int, equalize: str
) -> None:
    from torch.utils.data import DataLoader

    folder = str(tmp_path)
    write_shards(folder, [7, 3, 9, 1, 6], manifest=True)  # 26 samples, uneven shards
    per_rank = []
    for rank in range(world):
        ds = Dataset(folder, node=(rank, world), equalize=equalize, seed=3)  # type: ignore[arg-type]
        ds = ds.shuffle(4).map(tag_worker)
        items = list(DataLoader(ds, batch_size=None, num_workers=2))
        assert len(items) == len(ds)
        per_rank.append(items)
    counts = [collections.Counter(worker for _, worker in items) for items in per_rank]
    assert all(c == counts[0] for c in counts) and set(counts[0]) == {0, 1}
    assert max(counts[0].values()) - min(counts[0].values()) <= 1
    seen = [key for items in per_rank for key, _ in items]
    every = {f"s{i:05d}" for i in range(26)}
    if equalize == "drop":
        assert len(seen) == len(set(seen)) == world * (26 // world)
    else:
        assert set(seen) == every and len(seen) == world * -(-26 // world)


def test_shuffle_is_deterministic_and_leaves_global_rngs_alone(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [10] * 6, manifest=False)
    random.seed(1234)
    np.random.seed(1234)
    python_state, numpy_state = random.getstate(), np.random.get_state()

    def order(seed: int, epoch: int) -> list[str]:
        ds = Dataset(folder, seed=seed).shuffle(20)
        ds.set_epoch(epoch)
        return keys(list(ds))

    first = order(0, 0)
    assert first == order(0, 0) and sorted(first) == [f"s{i:05d}" for i in range(60)]
    assert first != order(0, 1) and first != order(1, 0)
    assert random.getstate() == python_state
    assert np.array_equal(np.random.get_state()[1], numpy_state[1])  # type: ignore[index]


def test_epochs_advance_on_each_iteration(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [10] * 4)
    ds = Dataset(folder).shuffle(8)
    epoch0, epoch1 = keys(list(ds)), keys(list(ds))
    assert epoch0 != epoch1 and ds.epoch == 2
    ds.set_epoch(0)
    assert keys(list(ds)) == epoch0


def test_shard_order_is_kept_without_shuffle(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [3] * 8, manifest=False)
    in_order = [f"s{i:05d}" for i in range(24)]
    assert keys(list(Dataset(folder))) == in_order
    shuffled = keys(list(Dataset(folder, shuffle_shards=True)))
    assert shuffled != in_order and sorted(shuffled) == in_order
    assert [shuffled[i : i + 3] for i in range(0, 24, 3)] == [
        sorted(shuffled[i : i + 3]) for i in range(0, 24, 3)
    ]  # whole shards moved, samples inside kept in order


def test_len(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, [5, 6, 3])  # 14 samples
    assert len(Dataset(folder)) == 14
    assert len(Dataset(folder, node=(1, 4))) == 4  # pad: ceil(14 / 4)
    assert len(Dataset(folder, node=(1, 4), equalize="drop")) == 3
    assert (
        len(Dataset(folder).batched(4)) == 4 and len(Dataset(folder).batched(4, partial=False)) == 3
    )
    with pytest.raises(TypeError, match="manifest"):
        len(Dataset(urls))
    with pytest.raises(TypeError, match="select"):
        len(Dataset(folder).select(bool))
    assert len(Dataset(urls).with_epoch(9)) == 9


def test_with_epoch_yields_exactly_n_per_rank(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, [4, 4, 4], manifest=False)
    long = keys(list(Dataset(urls).shuffle(3).with_epoch(30)))
    assert len(long) == 30 and set(long) == {f"s{i:05d}" for i in range(12)}
    short = [keys(list(Dataset(urls, node=(r, 2)).with_epoch(5))) for r in range(2)]
    assert [len(s) for s in short] == [5, 5] and not set(short[0]) & set(short[1])


def test_rank_and_world_size_from_the_environment(
    tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = str(tmp_path)
    write_shards(folder, [5, 6])
    seen = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        ds = Dataset(folder, equalize="drop")
        seen.append(keys(list(ds)))
        assert len(seen[-1]) == len(ds) == 5
    assert not set(seen[0]) & set(seen[1])


# A stated count of 0 is checked like any other: a shard that holds samples is an error
# under handler="raise", never a silent skip of the whole shard.


def _state_zero(folder: str, shard: int) -> None:
    path = os.path.join(folder, "manifest.json")
    with open(path) as f:
        doc = json.load(f)
    doc["shards"][shard]["samples"] = 0
    with open(path, "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("node", [(0, 1), (1, 2)])
def test_a_manifest_count_of_0_for_a_shard_with_samples_is_an_error(
    tmp_path: Any, node: tuple[int, int]
) -> None:
    folder = str(tmp_path)
    write_shards(folder, [4, 5, 3])
    _state_zero(folder, 1 if node == (0, 1) else 2)  # the last: checked by the last rank
    with pytest.raises(FormatError, match="more samples than the 0"):
        list(Dataset(folder, node=node))
    quiet = list(Dataset(folder, node=node, handler="ignore"))  # other policies go on
    assert len(quiet) == len(Dataset(folder, node=node))


def test_a_true_count_of_0_reads_fine(tmp_path: Any) -> None:
    folder = str(tmp_path)
    write_shards(folder, [4, 0, 4, 0])
    assert len(keys(list(Dataset(folder)))) == 8
    assert sorted(
        keys(list(Dataset(folder, node=(0, 2)))) + keys(list(Dataset(folder, node=(1, 2))))
    ) == sorted(keys(list(Dataset(folder))))


def test_an_index_with_no_entries_for_a_shard_with_samples_is_an_error(tmp_path: Any) -> None:
    from shardkit import IndexedDataset
    from shardkit.tools.index import write_indexes

    folder = str(tmp_path)
    write_indexes(write_shards(folder, [3, 4], manifest=False))
    path = os.path.join(folder, "shard-000001.tar.idx")
    with open(path) as f:
        doc = json.load(f)
    doc.update(keys=[], offsets=[], sizes=[])
    doc.pop("members", None)  # an index without a member table: a table's lies, test_member_table
    with open(path, "w") as f:
        json.dump(doc, f)
    with pytest.raises(FormatError, match="more samples than the 0"):
        list(Dataset(folder))
    with pytest.raises(FormatError, match="more samples than the 0"):
        len(IndexedDataset(folder))
