"""Pooled commits into S3 (SeaweedFS): a pass-through build's journal records and renames
run concurrently, each rename after its task's record, the manifest after all of them;
the output is byte-identical to a local build, and a failure mid-commit resumes exactly."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.build import make_corpus
from helpers.scale import s3_bucket, snapshot_local, snapshot_s3

import shardkit
from shardkit import BuildOptions
from shardkit.builder._journal import Journal
from shardkit.builder._store import ObjectStore
from shardkit.errors import StorageError

__all__ = ["s3_bucket"]  # the fixture, used by name

OPTIONS = {"max_count": 6, "seed": 5, "workers": 2}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("commit") / "images"), count=60)


@pytest.fixture(scope="module")
def reference(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ref") / "out"
    shardkit.build(corpus, str(out), options=BuildOptions(**OPTIONS))  # type: ignore[arg-type]
    return snapshot_local(str(out))


class _InFlight:
    """Counts calls in flight (``most`` at once). The first call waits (up to 10 s) for a
    second to start beside it: pooled calls do at once, however slowly tasks finish on a
    loaded machine; calls made one at a time never do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self._overlapped, self._first = threading.Event(), threading.Lock()

    @contextlib.contextmanager
    def call(self, seconds: float) -> Iterator[None]:
        """One call to a slow server (``seconds``)."""
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            if self.now > 1:
                self._overlapped.set()
        if self._first.acquire(blocking=False):
            self._overlapped.wait(10)
        time.sleep(seconds)
        yield
        with self.lock:
            self.now -= 1


def test_commits_overlap_in_order_and_match_a_local_build(
    corpus: str, reference: dict[str, Any], s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, int]] = []
    inflight = _InFlight()
    lock = inflight.lock
    rename, write = ObjectStore.rename, getattr(Journal, "write", None)

    def slow_rename(self: ObjectStore, src: str, dst: str) -> None:
        with inflight.call(0.05):  # commits overlap only if they are pooled
            rename(self, src, dst)
        with lock:
            events.append(("rename", int(src.split("task")[1][:6])))

    def recorded_write(self: Journal, result: Any) -> None:
        assert write is not None
        write(self, result)
        with lock:
            events.append(("journal", result.index))

    monkeypatch.setattr(ObjectStore, "rename", slow_rename)
    monkeypatch.setattr(Journal, "write", recorded_write, raising=False)
    url = f"s3://{s3_bucket}/pooled"
    result = shardkit.build(corpus, url, options=BuildOptions(**OPTIONS))  # type: ignore[arg-type]
    assert snapshot_s3(url) == reference  # the same shards and manifest, byte for byte
    assert inflight.most > 1, "renames ran one at a time"
    renamed = [task for kind, task in events if kind == "rename"]
    assert len(renamed) == len(result.shards) > 5
    for position, (kind, task) in enumerate(events):
        if kind == "rename":  # its task's journal record was written before it
            assert ("journal", task) in events[:position]


def test_a_failure_mid_commit_leaves_a_build_that_resumes_exactly(
    corpus: str, reference: dict[str, Any], s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rename = ObjectStore.rename
    calls = [0]

    def failing(self: ObjectStore, src: str, dst: str) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise StorageError("rename failed: injected", url=self.join(src))
        rename(self, src, dst)

    monkeypatch.setattr(ObjectStore, "rename", failing)
    url = f"s3://{s3_bucket}/failing"
    with pytest.raises(StorageError, match="injected"):
        shardkit.build(corpus, url, options=BuildOptions(**OPTIONS))  # type: ignore[arg-type]
    left = snapshot_s3(url)
    assert "manifest.json" not in left
    assert any(name.startswith(".shardkit-build/task-") for name in left)
    monkeypatch.setattr(ObjectStore, "rename", rename)
    again = shardkit.build(corpus, url, options=BuildOptions(**OPTIONS))  # type: ignore[arg-type]
    assert again.resumed_tasks > 0
    assert snapshot_s3(url) == reference


# An assembled build (sizes not known up front): chunk tasks, shards cut by the driver.
SAMPLES = [{"__key__": f"{i:04d}", "txt": b"x" * (40 + 7 * i)} for i in range(90)]
ASSEMBLED = {"max_count": 7, "max_size": 6000, "seed": 2, "workers": 2}  # cuts inside chunks


def test_assembled_commits_overlap_and_parts_go_after_their_records(
    s3_bucket: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk records, shard records and part deletions run concurrently; a part is deleted
    only after its chunk's record and the record of every shard that read it."""
    from shardkit.builder._assembly import ShardPlan, WorkerAssembler

    local = str(tmp_path / "local")
    shardkit.build(SAMPLES, local, options=BuildOptions(**ASSEMBLED))  # type: ignore[arg-type]
    events: list[tuple[str, int]] = []
    readers: dict[int, list[int]] = {}  # chunk -> shards that read it
    inflight = _InFlight()
    lock = inflight.lock
    write, record_shard = Journal.write, Journal.record_shard
    remove, done = ObjectStore.remove, WorkerAssembler.done

    def slow(kind: str, index: int, fn: Any, *args: Any) -> None:
        with inflight.call(0.03):
            fn(*args)
        with lock:
            events.append((kind, index))

    def slow_write(self: Journal, result: Any) -> None:
        slow("task", result.index, write, self, result)

    def slow_record_shard(self: Journal, shard: Any) -> None:
        slow("shard", shard.index, record_shard, self, shard)

    def logged_remove(self: ObjectStore, names: Any) -> None:
        names = list(names)
        remove(self, names)
        with lock:
            parts = (n for n in names if "-part" in n)  # not the journal's records at the end
            events.extend(("removed", int(n.split("task")[1][:6])) for n in parts)

    def noted_done(self: WorkerAssembler, plan: ShardPlan, shard: Any) -> None:
        for chunk in plan.chunks:
            readers.setdefault(chunk, []).append(plan.index)
        done(self, plan, shard)

    monkeypatch.setattr(Journal, "write", slow_write)
    monkeypatch.setattr(Journal, "record_shard", slow_record_shard)
    monkeypatch.setattr(ObjectStore, "remove", logged_remove)
    monkeypatch.setattr(WorkerAssembler, "done", noted_done)
    url = f"s3://{s3_bucket}/assembled"
    result = shardkit.build(SAMPLES, url, options=BuildOptions(**ASSEMBLED))  # type: ignore[arg-type]
    assert snapshot_s3(url) == snapshot_local(local)  # the same shards and manifest
    assert len(result.shards) > 13
    assert any(len(shards) > 1 for shards in readers.values())
    assert inflight.most > 1, "journal records were written one at a time"
    removed = [(p, chunk) for p, (kind, chunk) in enumerate(events) if kind == "removed"]
    assert len(removed) == 13  # every chunk's part (90 samples in chunks of 7)
    for position, chunk in removed:
        before = events[:position]
        assert ("task", chunk) in before
        assert all(("shard", shard) in before for shard in readers[chunk])


def test_an_assembled_build_whose_shard_record_fails_resumes_exactly(
    s3_bucket: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = str(tmp_path / "local")
    shardkit.build(SAMPLES, local, options=BuildOptions(**ASSEMBLED))  # type: ignore[arg-type]
    record_shard = Journal.record_shard
    calls = [0]

    def failing(self: Journal, shard: Any) -> None:
        calls[0] += 1
        if calls[0] == 4:
            raise StorageError("cannot write the build journal: injected", url="s3://x")
        record_shard(self, shard)

    monkeypatch.setattr(Journal, "record_shard", failing)
    url = f"s3://{s3_bucket}/failing-assembled"
    with pytest.raises(StorageError, match="injected"):
        shardkit.build(SAMPLES, url, options=BuildOptions(**ASSEMBLED))  # type: ignore[arg-type]
    left = snapshot_s3(url)
    assert "manifest.json" not in left
    assert any(name.startswith(".shard-") and "-part" in name for name in left)  # parts kept
    monkeypatch.setattr(Journal, "record_shard", record_shard)
    again = shardkit.build(SAMPLES, url, options=BuildOptions(**ASSEMBLED))  # type: ignore[arg-type]
    assert again.resumed_tasks > 0
    assert snapshot_s3(url) == snapshot_local(local)
