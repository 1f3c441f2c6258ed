"""Mid-epoch resume: stop anywhere, save, restore (in a new process too), get the exact rest."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from helpers.pipeline import write_shards
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit import ConfigError, Dataset, Loader, StateError, mix


def _key(sample: Any) -> Any:
    return sample["__key__"] if isinstance(sample, dict) else sample


def _is_even(item: tuple[str, int]) -> bool:
    return item[1] % 2 == 0


def _upper(key: str) -> str:
    return key.upper()


PIPELINES: dict[str, Callable[[str], Dataset]] = {
    "raw": lambda f: Dataset(f),
    "shuffled": lambda f: Dataset(f, seed=4).shuffle(7).decode().to_tuple("__key__", "cls"),
    "decode-before-shuffle": lambda f: Dataset(f).decode().shuffle(5).to_tuple("__key__"),
    "two-shuffles": lambda f: Dataset(f).shuffle(3).map(_key).shuffle(4).map(_upper),
    "select-batched": lambda f: (
        Dataset(f)
        .shuffle(6)
        .decode()
        .to_tuple("__key__", "cls")
        .select(_is_even)
        .batched(3, collate=None)
    ),
    "ranks": lambda f: Dataset(f, node=(1, 3), equalize="drop").to_tuple("__key__"),
    "with-epoch": lambda f: Dataset(f + "/shard-{000000..000004}.tar").shuffle(4).with_epoch(50),
    "skip-handler": lambda f: Dataset(f, handler="warn").decode().to_tuple("__key__"),
    "threaded-decode": lambda f: Dataset(f).decode(threads=3).to_tuple("__key__", "cls"),
    # with_epoch counts where it sits: here batches, after the resume point (its count is
    # saved), and before a threaded decoder that works ahead through it.
    "batched-with-epoch": lambda f: (
        Dataset(f, seed=3).shuffle(4).to_tuple("__key__").batched(3, collate=None).with_epoch(17)
    ),
    "with-epoch-then-threads": lambda f: Dataset(f).with_epoch(45).decode(threads=3).map(_key),
    "slice": lambda f: Dataset(f).slice(3, 30, 2).to_tuple("__key__"),
    "slice-after-shuffle": lambda f: Dataset(f).shuffle(5).slice(20).decode(threads=2).map(_key),
    "unbatched": lambda f: Dataset(f).shuffle(5).batched(4, collate=None).unbatched().map(_key),
    "repeat": lambda f: Dataset(f, seed=2).shuffle(3).repeat(2).map(_key),
    "repeat-skips-shards": lambda f: Dataset(f, shuffle_shards=True).repeat(3).map(_key),
    "resampled": lambda f: Dataset(f, resampled=True).map(_key).with_epoch(45),
    "shuffle-initial": lambda f: Dataset(f).shuffle(8, initial=2).map(_key),
    "mixed": lambda f: mix([Dataset(f, seed=1).shuffle(3), Dataset(f, seed=2)], [2, 1], seed=3),
    "mixed-shuffled": lambda f: mix([Dataset(f), Dataset(f)], seed=3).shuffle(6).with_epoch(45),
    "rename-map-dict": lambda f: (
        Dataset(f).shuffle(4).rename(label="cls", keep=False).map_dict(label=int).map(_key)
    ),
    "to-tuple-map-tuple": lambda f: (
        Dataset(f).decode().to_tuple("__key__", "cls").map_tuple(_upper, None).shuffle(3)
    ),
}


def _stage_classes(base: type) -> set[type]:
    found = set()
    for sub in base.__subclasses__():
        found |= {sub} | _stage_classes(sub)
    return found


def test_every_stage_is_in_the_resume_table(shard_folder: str) -> None:
    """The contract enumerates: a new Stage subclass fails here until a pipeline of
    PIPELINES uses it (and so goes through the midpoint resume test below)."""
    import shardkit.pipeline._counting
    import shardkit.pipeline._decode  # registers its stages
    from shardkit.pipeline._stages import FieldStage, Stage

    used = {type(s) for build in PIPELINES.values() for s in build(shard_folder)._recipe.stages}
    abstract = {shardkit.pipeline._counting.Counting, FieldStage}
    missing = sorted(c.__name__ for c in _stage_classes(Stage) - abstract - used)
    assert not missing, f"stages missing from the resume table PIPELINES: {missing}"


def _plain(items: list[Any]) -> list[Any]:
    plain: list[Any] = json.loads(json.dumps([_key(i) for i in items]))
    return plain


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("resume"))
    write_shards(folder, [9, 4, 11, 6, 8])  # 38 samples
    return folder


@settings(
    max_examples=90, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(sorted(PIPELINES)), st.floats(0, 1), st.integers(0, 2))
def test_stop_save_restore_gives_the_exact_rest(
    shard_folder: str, name: str, fraction: float, epoch: int
) -> None:
    build = PIPELINES[name]
    full_ds = build(shard_folder)
    full_ds.set_epoch(epoch)
    full = _plain(list(full_ds))
    next_epoch = _plain(list(full_ds))
    stop = int(fraction * len(full))
    first = build(shard_folder)
    first.set_epoch(epoch)
    iterator = iter(first)
    head = [next(iterator) for _ in range(stop)]
    state = json.loads(json.dumps(first.state_dict()))  # a state is plain data
    resumed = build(shard_folder)
    resumed.load_state_dict(state)
    resumed.set_epoch(epoch)  # the usual training loop does this; the position is kept
    assert _plain(head) + _plain(list(resumed)) == full
    assert _plain(list(resumed)) == next_epoch


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_pipeline_resumes_from_its_middle(shard_folder: str, name: str) -> None:
    """Every stage in the contract, at least once, whatever hypothesis draws above."""
    full = _plain(list(PIPELINES[name](shard_folder)))
    first = PIPELINES[name](shard_folder)
    iterator = iter(first)
    head = [next(iterator) for _ in range(len(full) // 2)]
    resumed = PIPELINES[name](shard_folder)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert _plain(head) + _plain(list(resumed)) == full


def test_state_after_an_epoch_and_mismatches(shard_folder: str) -> None:
    ds = Dataset(shard_folder)
    assert ds.state_dict()["consumed"] == 0
    list(ds)
    done = ds.state_dict()
    assert done["done"] and done["epoch"] == 0
    again = Dataset(shard_folder)
    again.load_state_dict(done)
    assert list(again) == [] and again.epoch == 1
    other = Dataset(shard_folder, seed=9)
    other.load_state_dict(done)
    with pytest.raises(ConfigError, match="cannot resume"):
        iter(other)
    assert other.state_dict() == done  # still loaded, not silently dropped
    with pytest.raises(ConfigError, match="not a shardkit Dataset state"):
        ds.load_state_dict({"epoch": 1})


SCRIPT = r"""
import json, sys
from shardkit import Dataset
folder, mode, stop, state_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ds = Dataset(folder, seed=11).shuffle(9).decode().to_tuple("__key__", "cls").batched(4)
ds.set_epoch(1)
if mode == "first":
    it = iter(ds)
    for _ in range(stop):
        next(it)
    json.dump(ds.state_dict(), open(state_file, "w"))
    print(json.dumps([]))
else:
    ds.load_state_dict(json.load(open(state_file)))
    print(json.dumps([[list(k), c.tolist()] for k, c in ds]))
"""


def _run(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-c", *args], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout)


def test_resume_in_a_new_process(shard_folder: str, tmp_path: os.PathLike[str]) -> None:
    ds = Dataset(shard_folder, seed=11).shuffle(9).decode().to_tuple("__key__", "cls").batched(4)
    ds.set_epoch(1)
    full = [[list(k), c.tolist()] for k, c in ds]
    state_file = os.path.join(str(tmp_path), "state.json")
    stop = 4
    _run(SCRIPT, shard_folder, "first", str(stop), state_file)
    assert _run(SCRIPT, shard_folder, "rest", "0", state_file) == full[stop:]


LOADER_PIPELINES = {
    "shuffled": "Dataset(folder, seed=5, node=(0, 1)).shuffle(6).decode()"
    '.to_tuple("__key__", "cls")',
    # per-worker stage counts: 10 batches of 2 per rank, read pass after pass
    "with-epoch": 'Dataset(folder, seed=5, node=(0, 1)).decode().to_tuple("__key__", "cls")'
    ".batched(2).with_epoch(10)",
}

LOADER_SCRIPT = r"""
import json, sys
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from shardkit import Dataset
folder, mode, stop, state_file, pipeline = sys.argv[1:6]
stop = int(stop)
ds = eval(pipeline)
batch_size = None if ".batched(" in pipeline else 3
loader = StatefulDataLoader(
    ds, batch_size=batch_size, num_workers=2, multiprocessing_context="fork"
)
out = []
if mode == "rest":
    loader.load_state_dict(torch.load(state_file, weights_only=False))
for i, (k, c) in enumerate(loader):
    if mode == "first" and i == stop:
        break
    out.append([list(k), c.tolist()])
    if mode == "first" and i == stop - 1:
        torch.save(loader.state_dict(), state_file)
print(json.dumps(out))
"""


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11
@pytest.mark.parametrize("name", sorted(LOADER_PIPELINES))
def test_resume_through_stateful_dataloader_with_workers(
    shard_folder: str, tmp_path: os.PathLike[str], name: str
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    pipeline = LOADER_PIPELINES[name]
    state_file = os.path.join(str(tmp_path), "loader.pt")
    ds = eval(pipeline, {"Dataset": Dataset, "folder": shard_folder})
    batch_size = None if ".batched(" in pipeline else 3
    loader = StatefulDataLoader(
        ds, batch_size=batch_size, num_workers=2, multiprocessing_context="fork"
    )
    full = [[list(k), c.tolist()] for k, c in loader]
    assert sum(len(keys) for keys, _ in full) == (38 if name == "shuffled" else 20)
    stop = 5
    args = (shard_folder, "first", str(stop), state_file, pipeline)
    head = _run(LOADER_SCRIPT, *args)
    assert head == full[:stop]
    rest = _run(LOADER_SCRIPT, shard_folder, "rest", "0", state_file, pipeline)
    assert rest == full[stop:]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_state_dict_refuses_after_dataloader_workers_read_it(
    shard_folder: str, context: str
) -> None:
    """The main process's dataset does not know where its workers are: its state would
    silently restart the epoch, so it refuses and names the way that works."""
    from torch.utils.data import DataLoader

    ds = Dataset(shard_folder, seed=5).shuffle(6).to_tuple("__key__")
    assert ds.state_dict()["consumed"] == 0  # nothing read yet: a true state
    loader: DataLoader[Any] = DataLoader(
        ds, batch_size=3, num_workers=2, multiprocessing_context=context
    )
    for i, _ in enumerate(loader):
        if i == 4:
            break
    with pytest.raises(ConfigError, match="StatefulDataLoader"):
        ds.state_dict()
    fresh = Dataset(shard_folder, seed=5).shuffle(6).to_tuple("__key__")
    ds.load_state_dict(fresh.state_dict())  # a position of its own
    assert ds.state_dict()["consumed"] == 0
    list(ds)  # read in this process: its own position again
    assert ds.state_dict()["done"]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11
def test_a_single_stream_state_in_a_loader_with_workers_names_the_way(shard_folder: str) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    ds = Dataset(shard_folder, seed=5).shuffle(6).to_tuple("__key__")
    iterator = iter(ds)
    next(iterator)
    state = ds.state_dict()
    again = Dataset(shard_folder, seed=5).shuffle(6).to_tuple("__key__")
    again.load_state_dict(state)
    loader = StatefulDataLoader(again, batch_size=3, num_workers=2, multiprocessing_context="fork")
    before = set(multiprocessing.active_children())
    with pytest.raises(ConfigError, match="StatefulDataLoader"):
        list(loader)
    # torchdata leaves the workers of an iterator whose startup failed waiting for work: its
    # shutdown (when the traceback holding it is collected) would join each for 5 s. They are
    # stopped here with SIGCHLD held back until they are reaped: torch's handler, still set
    # for them, would take an end it sees unreaped for a crash and raise in whatever runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        for worker in set(multiprocessing.active_children()) - before:
            worker.terminate()
            worker.join(5)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})


def test_stage_counts_are_part_of_the_state(shard_folder: str) -> None:
    ds = Dataset(shard_folder).to_tuple("__key__").batched(2, collate=None).with_epoch(6)
    iterator = iter(ds)
    head = [next(iterator) for _ in range(4)]
    state = ds.state_dict()
    assert state["tallies"] == [4]  # four batches counted by with_epoch
    rest = Dataset(shard_folder).to_tuple("__key__").batched(2, collate=None).with_epoch(6)
    rest.load_state_dict(state)
    assert len(head) + len(list(rest)) == 6
    older = {k: v for k, v in state.items() if k != "tallies"}  # saved before stage counts
    again = Dataset(shard_folder).to_tuple("__key__").batched(2, collate=None).with_epoch(6)
    again.load_state_dict(older)
    with pytest.raises(ConfigError, match="no stage counts"):
        iter(again)


# ---------------------------------------------------------------- hostile states
# A state names the pipeline it belongs to and is checked whole (state.check_state /
# check_states, Position.check_belongs / check_consumed) before anything is skipped.


def _half_state(ds: Dataset) -> dict[str, Any]:
    iterator = iter(ds)
    for _ in range(10):
        next(iterator)
    state: dict[str, Any] = json.loads(json.dumps(ds.state_dict()))
    return state


def test_a_state_of_another_dataset_is_refused(shard_folder: str, tmp_path: Any) -> None:
    other = str(tmp_path / "other")
    write_shards(other, [9, 4, 11, 6, 7])  # one count differs
    state = _half_state(Dataset(other))
    ds = Dataset(shard_folder)
    ds.load_state_dict(state)
    with pytest.raises(StateError, match="another dataset or pipeline"):
        iter(ds)
    # another pipeline over the same shards: a shuffle buffer changes what a position means
    shuffled = Dataset(shard_folder).shuffle(5)
    shuffled.load_state_dict(_half_state(Dataset(shard_folder)))
    with pytest.raises(StateError, match="another dataset or pipeline"):
        iter(shuffled)


def test_a_state_of_another_mix_is_refused(shard_folder: str) -> None:
    state = _half_state(mix([Dataset(shard_folder, seed=1), Dataset(shard_folder)], [2, 1]))
    for other in (
        mix([Dataset(shard_folder, seed=1), Dataset(shard_folder)], [1, 1]),  # weights
        mix([Dataset(shard_folder, seed=2), Dataset(shard_folder)], [2, 1]),  # a source's seed
    ):
        other.load_state_dict(state)
        with pytest.raises(StateError, match="another dataset or pipeline"):
            iter(other)
    same = mix([Dataset(shard_folder, seed=1), Dataset(shard_folder)], [2, 1])
    same.load_state_dict(state)
    assert len(list(same)) == len(same) - 10


def _tampered(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**state, **changes}


@pytest.mark.parametrize(
    "changes",
    [
        {"done": "false"},
        {"done": 0},
        {"consumed": float("inf")},
        {"consumed": 1e400},
        {"consumed": 10**30},
        {"consumed": -1},
        {"consumed": "12"},
        {"consumed": 2.5},
        {"epoch": float("nan")},
        {"world": 0},
        {"rank": 5},
        {"tallies": [float("inf")]},
        {"tallies": "1"},
        {"space": [[0, 1]] * 10_000},  # sample 0, 10,000 times
        {"space": [[5, 9], [0, 3]]},
        {"space": [[3, 3]]},
        {"space": [[0, 1, 2]]},
        {"dataset": ["x"]},
    ],
    ids=lambda changes: repr(changes)[:40],
)
def test_a_malformed_state_is_one_line_refusal(shard_folder: str, changes: dict[str, Any]) -> None:
    state = _tampered(_half_state(Dataset(shard_folder)), **changes)
    attempts: list[tuple[Callable[[Any], None], Any]] = [
        (Dataset(shard_folder).load_state_dict, state),
        (Dataset(shard_folder).load_state_dict, [state]),
        (Loader(Dataset(shard_folder)).load_state_dict, _loader_state([state])),
    ]
    for load, saved in attempts:
        with pytest.raises(StateError, match=r"malformed|not a shardkit") as caught:
            load(saved)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def _loader_state(streams: list[dict[str, Any]]) -> dict[str, Any]:
    return {"version": 1, "epoch": streams[0]["epoch"], "streams": streams, "next_stream": 0}


def test_a_position_past_the_epoch_is_refused(shard_folder: str) -> None:
    state = _half_state(Dataset(shard_folder))
    ds = Dataset(shard_folder)
    ds.load_state_dict(_tampered(state, consumed=39))  # the epoch holds 38
    with pytest.raises(StateError, match="past the 38"):
        iter(ds)
    space = Dataset(shard_folder)
    space.load_state_dict(_tampered(state, space=[[30, 60]]))
    with pytest.raises(StateError, match="past the 38 samples"):
        iter(space)


def test_two_states_for_one_stream_or_two_runs_are_refused(shard_folder: str) -> None:
    ds = Dataset(shard_folder)
    first = _half_state(ds)
    later = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(StateError, match="two states for one stream"):
        Dataset(shard_folder).load_state_dict([first, _tampered(first, consumed=3)])
    with pytest.raises(StateError, match="different runs"):
        Dataset(shard_folder).load_state_dict([first, _tampered(later, seed=4, rank=1, world=2)])
    with pytest.raises(StateError, match="two states for one stream"):
        Loader(Dataset(shard_folder)).load_state_dict([_loader_state([first])] * 2)


def test_a_loader_refuses_a_foreign_state_in_the_main_process(
    shard_folder: str, tmp_path: Any
) -> None:
    other = str(tmp_path / "other")
    write_shards(other, [20, 18])
    loader = Loader(Dataset(other).to_tuple("__key__"), num_workers=0)
    iterator = iter(loader)
    next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    resumed = Loader(Dataset(shard_folder).to_tuple("__key__"), num_workers=0)
    resumed.load_state_dict(state)
    with pytest.raises(StateError, match="another dataset"):
        iter(resumed)
    with pytest.raises(StateError, match="malformed Loader state"):
        resumed.load_state_dict(_tampered(state, streams="abc"))


def test_a_state_without_a_fingerprint_still_resumes_if_it_checks(shard_folder: str) -> None:
    """Chosen: a state saved before states named their pipeline (no "dataset") is
    accepted when everything else in it checks out."""
    full = _plain(list(Dataset(shard_folder)))
    state = _half_state(Dataset(shard_folder))
    del state["dataset"]
    ds = Dataset(shard_folder)
    ds.load_state_dict(state)
    assert _plain(list(ds)) == full[10:]
