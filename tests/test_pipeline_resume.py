"""Mid-epoch resume: stop anywhere, save, restore (in a new process too), get the exact rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from conftest_pipeline import write_shards
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit import ConfigError, Dataset, mix


def _key(sample: Any) -> Any:
    if isinstance(sample, tuple) and len(sample) == 2 and isinstance(sample[0], list):
        return [sample[0], sample[1].tolist()]  # a collated batch
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
    "rebatched": lambda f: (
        Dataset(f).decode().to_tuple("__key__", "cls").batched(4).unbatched().shuffle(5).batched(3)
    ),
    "mixed": lambda f: mix([Dataset(f, seed=1).shuffle(3), Dataset(f, seed=2)], [2, 1], seed=3),
    "mixed-shuffled": lambda f: mix([Dataset(f), Dataset(f)], seed=3).shuffle(6).with_epoch(45),
}


def _plain(items: list[Any]) -> list[Any]:
    plain: list[Any] = json.loads(json.dumps([_key(i) for i in items]))
    return plain


@pytest.fixture(scope="module")
def shard_folder(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("resume"))
    write_shards(folder, [9, 4, 11, 6, 8])  # 38 samples
    return folder


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
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


LOADER_SCRIPT = r"""
import json, sys
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from shardkit import Dataset
folder, mode, stop, state_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ds = Dataset(folder, seed=5, node=(0, 1)).shuffle(6).decode().to_tuple("__key__", "cls")
loader = StatefulDataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="fork")
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
def test_resume_through_stateful_dataloader_with_workers(
    shard_folder: str, tmp_path: os.PathLike[str]
) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    state_file = os.path.join(str(tmp_path), "loader.pt")
    ds = Dataset(shard_folder, seed=5, node=(0, 1)).shuffle(6).decode().to_tuple("__key__", "cls")
    loader = StatefulDataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="fork")
    full = [[list(k), c.tolist()] for k, c in loader]
    assert sum(len(keys) for keys, _ in full) == 38
    stop = 5
    head = _run(LOADER_SCRIPT, shard_folder, "first", str(stop), state_file)
    assert head == full[:stop]
    assert _run(LOADER_SCRIPT, shard_folder, "rest", "0", state_file) == full[stop:]
