"""shardkit.Loader: resume with DataLoader workers in one call, elastic resume on another
topology (ranks x workers), and stages in the main process after the DataLoader."""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

import pytest
from helpers.pipeline import write_shards
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit import ConfigError, Dataset, Loader
from shardkit.pipeline._elastic import merge
from shardkit.pipeline._epochs import stream_ranges, through_space
from shardkit.pipeline._state import Position

COUNTS = [10, 14, 9, 11, 12, 8]  # 64 samples


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("loader") / "shards")
    write_shards(path, COUNTS)
    return path


def _dataset(folder: str, node: tuple[int, int], batch: int = 4) -> Dataset:
    return (
        Dataset(folder, seed=5, shuffle_shards=True, node=node)
        .to_tuple("__key__")
        .map(lambda t: t[0])
        .batched(batch, collate=None)
    )


def _loader(folder: str, node: tuple[int, int], workers: int) -> Loader:
    return Loader(_dataset(folder, node), num_workers=workers, multiprocessing_context="fork")


def _take(loader: Loader, n: int) -> tuple[list[str], dict[str, Any]]:
    seen: list[str] = []
    for batch in loader:
        seen += batch
        if len(seen) >= n:
            break
    return seen, loader.state_dict()


@pytest.mark.slow
def test_loader_resumes_with_workers_in_one_call(folder: str) -> None:
    full = [k for batch in _loader(folder, (0, 1), 2) for k in batch]
    assert sorted(full) == sorted(set(full)) and len(full) == 64
    head, state = _take(_loader(folder, (0, 1), 2), 20)
    again = _loader(folder, (0, 1), 2)
    again.load_state_dict(state)
    rest = [k for batch in again for k in batch]
    assert head + rest == full  # each worker's stream, and their interleaving, continue
    assert again.epoch == 1 and again.state_dict()["streams"] == []


@pytest.mark.parametrize(
    ("before", "after"),
    [((2, 2), (4, 1)), ((2, 2), (1, 1)), ((1, 2), (2, 2)), ((2, 1), (1, 2))],
)
def test_elastic_resume_reads_each_remaining_sample_once(
    folder: str, before: tuple[int, int], after: tuple[int, int]
) -> None:
    ranks, workers = before
    seen: list[str] = []
    states = []
    for rank in range(ranks):
        head, state = _take(_loader(folder, (rank, ranks), workers), 12)
        seen += head
        states.append(state)
    ranks2, workers2 = after
    for rank in range(ranks2):
        loader = _loader(folder, (rank, ranks2), workers2)
        loader.load_state_dict(states)
        seen += [k for batch in loader for k in batch]
    counts = collections.Counter(seen)
    assert len(counts) == 64 and set(counts.values()) == {1}


def test_elastic_resume_of_an_elastic_resume(folder: str) -> None:
    seen, states = [], []
    for rank in range(2):
        head, state = _take(_loader(folder, (rank, 2), 1), 8)
        seen += head
        states.append(state)
    again = []
    for rank in range(3):
        loader = _loader(folder, (rank, 3), 1)
        loader.load_state_dict(states)
        head, state = _take(loader, 4)
        seen += head
        again.append(state)
    loader = _loader(folder, (0, 1), 2)
    loader.load_state_dict(again)
    seen += [k for batch in loader for k in batch]
    assert sorted(collections.Counter(seen).values()) == [1] * 64


def test_elastic_resume_is_refused_where_it_cannot_be_exact(folder: str) -> None:
    states = []
    for rank in range(2):
        ds = Dataset(folder, node=(rank, 2)).shuffle(10).to_tuple("__key__")
        it = iter(ds)
        next(it)
        states.append(ds.state_dict())
    other = Dataset(folder, node=(0, 3)).shuffle(10).to_tuple("__key__")
    other.load_state_dict(states)
    with pytest.raises(ConfigError, match=r"2 ranks x 1 workers on 3 x 1: a \.shuffle\(\) buffer"):
        next(iter(other))
    saved = Dataset(folder, node=(0, 2))
    next(iter(saved))
    plain = Dataset(folder, node=(0, 3))
    plain.load_state_dict([saved.state_dict()])  # one of the two ranks' states
    with pytest.raises(ConfigError, match="needs the states of all 2 ranks x 1 workers"):
        next(iter(plain))


def test_loader_applies_stages_in_the_main_process(folder: str) -> None:
    ds = _dataset(folder, (0, 1), batch=3)
    loader = Loader(ds, num_workers=2, multiprocessing_context="fork")
    rebatched = loader.unbatched().shuffle(8).batched(5, collate=None)
    first = list(rebatched)
    assert [len(b) for b in first] == [5] * 12 + [4]
    assert sorted(k for b in first for k in b) == sorted(k for b in loader for k in b)
    rebatched.set_epoch(0)
    assert list(rebatched) == first  # seeded from (seed, epoch, rank)
    with pytest.raises(ConfigError, match="stage Unbatched holds items back"):
        rebatched.state_dict()
    assert loader.map(len).state_dict()["epoch"] == 1  # the original loader is unchanged


def test_select_dropping_everything_ends_a_with_epoch_epoch(
    folder: str, caplog: pytest.LogCaptureFixture
) -> None:
    ds = Dataset(folder).select(lambda s: False).with_epoch(10)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(list(ds)), daemon=True)
    with caplog.at_level(logging.WARNING):
        thread.start()
        thread.join(60)
    assert not thread.is_alive(), "with_epoch() over a select() that drops all hangs"
    assert out == [[]]
    assert "brought no item to the with_epoch stage" in caplog.text


def test_a_shuffle_buffer_larger_than_a_pass_still_fills_a_with_epoch_epoch(folder: str) -> None:
    ds = Dataset(folder + "/shard-000000.tar").shuffle(30).with_epoch(25)
    assert len(list(ds)) == 25


@settings(max_examples=150, deadline=None)
@given(
    total=st.integers(1, 300),
    before=st.tuples(st.integers(1, 4), st.integers(1, 3)),
    after=st.tuples(st.integers(1, 4), st.integers(1, 3)),
    mode=st.sampled_from(["pad", "drop"]),
    granularity=st.sampled_from([1, 4]),
    data=st.data(),
)
def test_elastic_merge_leaves_each_unseen_position_to_exactly_one_new_stream(
    total: int,
    before: tuple[int, int],
    after: tuple[int, int],
    mode: Any,
    granularity: int,
    data: st.DataObject,
) -> None:
    world, workers = before
    saved, seen, epoch = [], [], set()
    for rank in range(world):
        for worker in range(workers):
            ranges = stream_ranges(total, mode, rank, world, worker, workers, granularity)
            positions = [p for a, b in ranges for p in range(a, b)]
            epoch |= set(positions)
            consumed = data.draw(st.integers(0, len(positions)))
            seen += positions[:consumed]
            saved.append(
                Position(
                    epoch=0,
                    consumed=consumed,
                    done=False,
                    seed=0,
                    world=world,
                    workers=workers,
                    rank=rank,
                    worker=worker,
                )
            )
    space = merge(saved, total, mode, granularity)
    assert set(seen).isdisjoint(p for a, b in space for p in range(a, b))
    size = sum(b - a for a, b in space)
    world2, workers2 = after
    new = []
    for rank in range(world2):
        for worker in range(workers2):
            ranges = stream_ranges(size, mode, rank, world2, worker, workers2, granularity)
            new += [p for r in ranges for a, b in through_space(space, *r) for p in range(a, b)]
    if mode == "drop":  # drop mode repeats nothing: each remaining position once, or dropped
        assert len(new) == len(set(new)) and size - len(new) < world2
    else:
        assert set(new) == epoch - set(seen)


def test_the_documented_resume_loop_continues_batch_for_batch(folder: str) -> None:
    """docs/reading.md's loop: load_state_dict, then set_epoch(epoch) for the same epoch,
    keeps which worker's batch comes next (the batches would come back swapped)."""
    full = list(_loader(folder, (0, 1), 2))
    for stop in (1, 2, 5):
        loader = _loader(folder, (0, 1), 2)
        head = []
        for batch in loader:
            head.append(batch)
            if len(head) == stop:
                break
        state = loader.state_dict()
        again = _loader(folder, (0, 1), 2)
        again.load_state_dict(state)
        for epoch in range(again.epoch, 1):
            again.set_epoch(epoch)
            assert head + list(again) == full, stop
        again.load_state_dict(state)
        assert again.state_dict() == state  # saved again before iterating: the same place


def test_set_epoch_to_another_epoch_drops_a_loaded_position(folder: str) -> None:
    loader = _loader(folder, (0, 1), 2)
    _take(loader, 8)
    again = _loader(folder, (0, 1), 2)
    again.load_state_dict(loader.state_dict())
    again.set_epoch(1)
    fresh = _loader(folder, (0, 1), 2)
    fresh.set_epoch(1)
    assert list(again) == list(fresh)


@pytest.mark.parametrize("kind", ["tuple", "dict"])
def test_rebatching_in_the_main_process_keeps_tuples_and_dicts(folder: str, kind: str) -> None:
    """The documented ``Loader(ds.batched(16)).unbatched().shuffle(n).batched(64)``
    on tuples (torch's default collate would make a tuple of columns a list)."""
    ds = Dataset(folder, seed=5).decode().to_tuple("__key__", "cls")
    if kind == "dict":
        ds = Dataset(folder, seed=5).decode().rename(key="__key__", label="cls", keep=False)
    loader = Loader(ds.batched(16), num_workers=2, multiprocessing_context="fork")
    batches = list(loader.unbatched().shuffle(20).batched(24))
    assert [len(b[0] if kind == "tuple" else b["key"]) for b in batches] == [24, 24, 16]
    pairs = []
    for batch in batches:
        keys, labels = batch if kind == "tuple" else (batch["key"], batch["label"])
        assert labels.shape == (len(keys),)  # a column of numbers, stacked
        pairs += zip(keys, labels.tolist(), strict=True)
    assert sorted(pairs) == [(f"s{i:05d}", i) for i in range(64)]
