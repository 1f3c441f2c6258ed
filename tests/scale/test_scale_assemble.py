"""Shards assembled by the workers into S3: no shard byte passes through the driver, the
output is the same bytes as a local build, and an interrupted build resumes exactly."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from helpers.build import make_corpus
from helpers.scale import address_of, s3_bucket, snapshot_local, snapshot_s3
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit import BuildOptions, BuildProgress, storage
from shardkit.builder._assembly import Cutter
from shardkit.builder._store import ObjectStore
from shardkit.builder._worker import TaskResult
from shardkit.formats.record import ShardRecord

__all__ = ["s3_bucket"]  # the fixture, used by name

# Cut by size as well as by count, so that shards start in the middle of chunks and read
# from more than one chunk part.
RESIZED = {"max_count": 16, "max_size": 6000, "seed": 5, "resize": 32}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("assemble") / "images"), count=90)


@pytest.fixture(scope="module")
def reference(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A local single-process build (the driver assembles): what every S3 build must equal."""
    out = tmp_path_factory.mktemp("ref") / "out"
    shardkit.build(corpus, out, options=BuildOptions(workers=1, **RESIZED))  # type: ignore[arg-type]
    return snapshot_local(str(out))


def _record_driver_io(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(what, name) of every upload and read of an object this process (the driver) makes."""
    seen: list[tuple[str, str]] = []
    upload, read = storage.open_atomic, storage.open_read  # every write goes through it

    def uploading(url: str, **kwargs: Any) -> Any:
        seen.append(("upload", url))
        return upload(url, **kwargs)

    def reading(url: str, **kwargs: Any) -> Any:
        seen.append(("read", url))
        return read(url, **kwargs)

    def ranged(self: ObjectStore, name: str, offset: int, length: int) -> bytes:
        seen.append(("read", self.join(name)))
        return real_range(self, name, offset, length)

    real_range = ObjectStore.read_range
    monkeypatch.setattr(storage, "open_atomic", uploading)
    monkeypatch.setattr(storage, "open_read", reading)
    monkeypatch.setattr(ObjectStore, "read_range", ranged)
    return seen


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_workers_assemble_the_shards_and_the_driver_moves_no_shard_byte(
    engine: str,
    corpus: str,
    reference: dict[str, Any],
    s3_bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _record_driver_io(monkeypatch)
    url = f"s3://{s3_bucket}/out"
    options = BuildOptions(workers=2, engine=engine, address=address_of(engine), **RESIZED)  # type: ignore[arg-type]
    result = shardkit.build(corpus, url, options=options)
    assert snapshot_s3(url) == reference
    assert len(result.shards) >= 5
    assert any(s.samples < RESIZED["max_count"] for s in result.shards[:-1])  # size cuts
    names = [(what, u.removeprefix(url + "/")) for what, u in seen]
    assert not [n for what, n in names if what == "read"], names  # no part, no shard
    uploads = [n for what, n in names if what == "upload"]
    allowed = (".shardkit-build/", "manifest.json", ".shardkit-build.lock")
    # an index (renamed with its shard) and the skipped list: the driver's few bytes about
    # the shards, never shard bytes
    moved = [n for n in uploads if not n.startswith(allowed) and not n.endswith(".tar.idx")]
    assert moved in ([], ["skipped.jsonl"]), moved
    journaled = sorted(n for n in uploads if n.startswith(".shardkit-build/shard-"))
    assert len(journaled) == len(result.shards)


def _objects(url: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    root = url.removeprefix("s3://")
    return sorted(p[len(root) + 1 :] for p in fs.find(root))


class Stop(Exception):
    pass


def _interrupt(corpus: str, url: str, after: int) -> list[str]:
    def stop(progress: BuildProgress) -> None:
        if progress.shards >= after:
            raise Stop

    with pytest.raises(Stop):
        shardkit.build(corpus, url, options=BuildOptions(workers=2, **RESIZED), progress=stop)  # type: ignore[arg-type]
    return _objects(url)


@pytest.mark.parametrize("damage", ["none", "lost-shard"])
def test_an_interrupted_build_redoes_only_missing_shards(
    damage: str, corpus: str, reference: dict[str, Any], s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/resumed"
    partial = _interrupt(corpus, url, after=3)
    shards = [n for n in partial if n.startswith("shard-")]
    journaled = [n for n in partial if n.startswith(".shardkit-build/shard-")]
    assert "manifest.json" not in partial and len(shards) >= 3 and len(journaled) >= 3
    parts = [n for n in partial if n.startswith(".shard-")]
    assert parts  # kept for the shards still to assemble
    if damage == "lost-shard":  # a journaled shard that is gone is assembled again
        import s3fs

        fs = s3fs.S3FileSystem(
            endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True
        )
        fs.rm_file(f"{url.removeprefix('s3://')}/{shards[0]}")
    result = shardkit.build(corpus, url, options=BuildOptions(workers=2, **RESIZED))  # type: ignore[arg-type]
    assert result.resumed_tasks > 0
    assert snapshot_s3(url) == reference


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(st.lists(st.integers(1, 90), max_size=6), min_size=1, max_size=8),
    max_count=st.integers(1, 5),
    max_size=st.integers(1, 300),
)
def test_cuts_are_greedy_exact_and_parts_close_once(
    chunks: list[list[int]], max_count: int, max_size: int
) -> None:
    """The cutter's plans cover every sample once, in order, cut greedily by count and size
    (what the driver-side Assembler does); a chunk is closed by exactly one plan, and no
    later plan reads it (so deleting its part then is safe)."""
    options = BuildOptions(max_count=max_count, max_size=max_size, format="tar")
    cutter = Cutter(options, lambda i: f"shard-{i:06d}.tar")
    plans = []
    for index, sizes in enumerate(chunks):
        parts = [ShardRecord(f".p{index}", len(sizes), sum(sizes), "")] if sizes else []
        plans += cutter.add(TaskResult(index, parts, sizes=sizes))
    plans += cutter.finish()
    trailer = len(plans[0].trailer) if plans else 0
    samples = [(f".p{c}", size) for c, sizes in enumerate(chunks) for size in sizes]
    assert sum(p.samples for p in plans) == len(samples)
    position, closed = 0, set[int]()
    for number, plan in enumerate(plans):
        assert plan.index == number and plan.samples >= 1
        taken = samples[position : position + plan.samples]
        assert plan.size == sum(s for _, s in taken) + trailer
        assert [(n, length) for n, _, length in plan.ranges] == _merged(taken)
        full = plan.samples >= max_count or plan.size > max_size
        fits_next = position + plan.samples < len(samples) and (
            plan.size + samples[position + plan.samples][1] <= max_size
        )
        assert plan.samples == 1 or plan.size <= max_size
        assert full or not fits_next or number == len(plans) - 1
        assert not closed & set(plan.chunks)  # a closed chunk is never read again
        assert not closed & set(plan.closes)
        closed |= set(plan.closes)
        position += plan.samples
    assert closed == {c for c, sizes in enumerate(chunks) if sizes}


def _merged(taken: list[tuple[str, int]]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for name, size in taken:
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1] + size)
        else:
            out.append((name, size))
    return out


def test_the_driver_keeps_no_record_per_chunk_once_it_is_cut(
    corpus: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's record is folded into the totals once journaled and cut: what the driver
    holds at the manifest does not grow with the chunks (here 45, of 2 items each)."""
    import gc

    from shardkit.builder import _run as run

    held: list[int] = []
    finish = run._Driver._finish

    def counting(self: Any) -> Any:
        gc.collect()
        # type(), not isinstance(): that asks every object its __class__, which warns for
        # some of torch's deprecated objects when torch is loaded
        held.append(sum(type(o) is TaskResult for o in gc.get_objects()))
        held.append(len(self.committer._uses) + len(self.committer._closed))
        return finish(self)

    monkeypatch.setattr(run._Driver, "_finish", counting)
    options = BuildOptions(workers=1, **{**RESIZED, "max_count": 2})  # type: ignore[arg-type]
    result = shardkit.build(corpus, tmp_path / "out", options=options)
    assert len(result.shards) >= 45 and result.samples == 90
    assert held[0] <= 2, held  # not one per chunk
    assert held[1] <= 2, held
    with open(tmp_path / "out" / "manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)  # every count folded in, as the whole records gave them
    assert manifest["samples"] == 90 and manifest["bytes"] > 0
    assert manifest["class_counts"] == {"circle": 30, "square": 30, "stripes": 30}
    assert len(manifest["skipped"]) == 5  # the corpus's bad files, each named once
