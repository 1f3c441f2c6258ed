"""A :class:`~shardkit.Loader`'s workers live one epoch, so what they learn of a shard is
sent to the parent with their batches (:meth:`IndexCache.ship`): the table a parse of a
shard without an index notes, and the check of an index's table against the shard's
bytes. The next epoch's workers, forked from the parent, slice those shards at once, with
no header parsed and no table checked again; a shard changed since is read afresh."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.tables import FIELDS, refuse_parsing

from shardkit import Dataset, Loader, ShardWriter, mix
from shardkit.formats import members

KEYS = [f"dir/s{i:05d}" for i in range(23)]


def _write(folder: Path, count: int = 23, index: bool = True) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(folder / "shard-%06d.tar"), max_count=10, encode=False) as out:
        for i in range(count):
            out.write({"__key__": f"dir/s{i:05d}", **FIELDS[i % len(FIELDS)]})
    if not index:
        for idx in folder.glob("*.idx"):
            idx.unlink()
    return str(folder)


def _keys(loader: Any) -> list[str]:
    out = []
    for batch in loader:
        out.extend(s["__key__"] for s in (batch if isinstance(batch, list) else [batch]))
    return sorted(out)


def _loader(dataset: Dataset, batch_size: int | None) -> Loader:
    collate = None if batch_size is None else list
    return Loader(
        dataset,
        batch_size=batch_size,
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context="fork",
    )


def _refuse_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an index table was checked against the shard again")

    monkeypatch.setattr(members, "verify_members", refuse)


@pytest.mark.parametrize("batch_size", [None, 4], ids=["items", "batches"])
def test_the_next_epochs_slice_shards_without_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_size: int | None
) -> None:
    loader = _loader(Dataset(_write(tmp_path / "ds", index=False)), batch_size)
    assert _keys(loader) == KEYS  # epoch 0 parses, and notes each shard's table
    refuse_parsing(monkeypatch)  # in the forked workers too
    for _ in range(2):
        assert _keys(loader) == KEYS


def test_an_index_table_is_checked_against_its_shard_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loader = _loader(Dataset(_write(tmp_path / "ds")), 4)
    assert _keys(loader) == KEYS  # epoch 0 checks each table against the bytes
    _refuse_checks(monkeypatch)
    refuse_parsing(monkeypatch)
    assert _keys(loader) == KEYS


def test_a_folder_counted_by_its_manifest_gets_its_tables_from_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build's folder: the manifest gives the counts, so the loader's process loads no
    index; the workers that load and check each one send the table itself, and the next
    epoch's workers load none."""
    from shardkit.pipeline import _idxfiles

    folder = _write(tmp_path / "ds")
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(
            {
                "shards": [
                    {"url": f"shard-{i:06d}.tar", "samples": n} for i, n in enumerate([10, 10, 3])
                ]
            },
            f,
        )
    loaded: list[str] = []
    real = _idxfiles.read_index
    monkeypatch.setattr(
        _idxfiles, "read_index", lambda url, *a: loaded.append(url) or real(url, *a)
    )
    loader = _loader(Dataset(folder), 4)
    assert _keys(loader) == KEYS
    assert loaded == []  # the counts came from the manifest
    _refuse_checks(monkeypatch)
    refuse_parsing(monkeypatch)
    monkeypatch.setattr(_idxfiles, "read_index", _refuse_loading)
    assert _keys(loader) == KEYS


def _refuse_loading(*args: Any) -> None:
    raise AssertionError("an index was loaded again")


def test_a_mix_under_a_loader_keeps_each_sources_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = Dataset(_write(tmp_path / "a")), Dataset(_write(tmp_path / "b"))
    loader = _loader(mix([a, b], weights=[1, 1]), 4)
    first = _keys(loader)  # every shard of both read, its table checked
    assert len(first) == 46 and set(first) == set(KEYS)
    _refuse_checks(monkeypatch)
    refuse_parsing(monkeypatch)
    assert _keys(loader) == first


def test_what_workers_send_stays_out_of_the_loaders_state(tmp_path: Path) -> None:
    loader = _loader(Dataset(_write(tmp_path / "ds", index=False)), 4)
    batches = iter(loader)
    for _ in range(4):
        next(batches)
    state = loader.state_dict()
    assert all("_shipped_tables" not in s for s in state["streams"]), state
    rest = [s["__key__"] for batch in batches for s in batch]
    resumed = _loader(Dataset(str(tmp_path / "ds")), 4)
    resumed.load_state_dict(state)
    assert sorted(s["__key__"] for batch in resumed for s in batch) == sorted(rest)


def test_a_shard_replaced_between_epochs_is_read_afresh(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    loader = _loader(Dataset(_write(folder, index=False)), None)
    assert _keys(loader) == KEYS
    other = Path(_write(tmp_path / "other", count=27, index=False))
    for name in ("shard-000000.tar", "shard-000001.tar", "shard-000002.tar"):
        os.replace(other / name, folder / name)  # other sizes, other samples
    shutil.rmtree(other)
    assert _keys(loader) == [f"dir/s{i:05d}" for i in range(27)]


def test_only_forked_workers_send_what_they_learn() -> None:
    """Workers started another way begin from a pickled dataset, whose index cache starts
    empty (IndexCache.__getstate__): what they would send would be lost, so they send none."""
    import multiprocessing

    from shardkit.pipeline._loader import _forks

    assert _forks({"num_workers": 2, "multiprocessing_context": "fork"})
    fork = multiprocessing.get_context("fork")
    assert _forks({"num_workers": 2, "multiprocessing_context": fork})
    assert not _forks({"num_workers": 2, "multiprocessing_context": "spawn"})
    assert not _forks({"num_workers": 2, "multiprocessing_context": "forkserver"})
    assert not _forks({"num_workers": 0, "multiprocessing_context": "fork"})
    default = multiprocessing.get_start_method(allow_none=True) or "fork"
    assert _forks({"num_workers": 1}) == (default == "fork")


def test_loader_workers_keep_their_freed_heap_and_run_the_callers_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker keeps its freed heap (``keep_freed_heap``), then runs the caller's
    ``worker_init_fn``."""
    from shardkit.pipeline import _loader

    marks = tmp_path / "marks"
    marks.mkdir()

    def kept(limit: int = 0) -> bool:
        (marks / f"kept-{os.getpid()}").touch()
        return True

    def user_init(worker_id: int) -> None:
        (marks / f"user-{worker_id}-{os.getpid()}").touch()

    monkeypatch.setattr(_loader, "keep_freed_heap", kept)
    ds = Dataset(_write(tmp_path / "ds"))
    loader = Loader(ds, num_workers=2, multiprocessing_context="fork", worker_init_fn=user_init)
    assert sorted(s["__key__"] for s in loader) == KEYS
    pids = {name.rsplit("-", 1)[1] for name in os.listdir(marks) if name.startswith("kept-")}
    users = {name.split("-", 1)[1] for name in os.listdir(marks) if name.startswith("user-")}
    assert len(pids) == 2 and {u.split("-")[1] for u in users} == pids
    assert {u.split("-")[0] for u in users} == {"0", "1"}


def test_a_kept_heap_is_not_faulted_in_again_batch_after_batch() -> None:
    """In a fresh process: batches of 512 x 67 KB built and freed; with the heap kept,
    the second batch takes no new pages (without, ~17 faults a 67 KB object)."""
    import subprocess
    import sys

    code = (
        "import resource\n"
        "from shardkit.pipeline._loader import keep_freed_heap\n"
        "assert keep_freed_heap()\n"
        "def batch():\n"
        "    held = [bytes(b'x' * 67_000) for _ in range(512)]\n"
        "    return len(held)\n"
        "batch()\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "batch()\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 512, out.stdout  # under one fault a batch object
