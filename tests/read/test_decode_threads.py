"""Decoding in threads: the same items in the same order as one thread, data errors to the
handler at their turn, no thread outliving its iteration, exact resume after a break."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any

import numpy as np
import pytest
from helpers.pipeline import keys, tiny_jpeg, write_shards

from shardkit import Dataset, DecodeError, TarWriter
from shardkit.config import cpu_quota, usable_cores
from shardkit.errors import TruncatedShardError
from shardkit.pipeline._decode import MAX_DEFAULT_THREADS


def decode_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("shardkit-decode")]


@pytest.fixture
def jpeg_folder(tmp_path: os.PathLike[str]) -> str:
    folder = os.path.join(str(tmp_path), "jpegs")
    write_shards(folder, [7, 9, 8], jpeg=True)
    return folder


def _slow_first(ext: str, data: bytes) -> Any:
    """Decodes ``txt`` fields, the early samples slowest, so later ones finish first."""
    if ext != "txt":
        return None
    index = int(data.split()[-1])
    time.sleep(max(0, 12 - index) * 0.002)
    return data.decode()


def test_threads_give_the_items_of_one_thread_in_the_same_order(jpeg_folder: str) -> None:
    serial = list(Dataset(jpeg_folder).decode("rgb8", threads=1))
    threaded = list(Dataset(jpeg_folder).decode("rgb8", threads=4))
    assert keys(threaded) == keys(serial) == [f"s{i:05d}" for i in range(24)]
    for ours, theirs in zip(threaded, serial, strict=True):
        assert ours["jpg"].dtype == np.uint8 and ours["jpg"].shape == (16, 24, 3)
        assert np.array_equal(ours["jpg"], theirs["jpg"]) and ours["cls"] == theirs["cls"]
    # Decodes that finish out of order still come out in order, and shuffles stay seeded.
    for epoch in (0, 1):
        runs = []
        for threads in (1, 3):
            ds = Dataset(jpeg_folder, seed=5).shuffle(6).decode(_slow_first, threads=threads)
            ds.set_epoch(epoch)
            runs.append([(s["__key__"], s["txt"]) for s in ds])
        assert runs[0] == runs[1] and len(runs[0]) == 24


def _shard_with_broken_jpegs(path: str) -> None:
    """Ten samples; s3's JPEG is cut in half, s7's is not an image at all."""
    with open(path, "wb") as f, TarWriter(f) as sink:
        for i in range(10):
            image = tiny_jpeg(i, (40, 32))
            if i == 3:
                image = image[: len(image) // 2]
            elif i == 7:
                image = b"\xff\xd8\xff" + bytes(200)
            sink.write({"__key__": f"k{i}", "jpg": image, "cls": b"%d" % i})


def test_a_corrupt_jpeg_in_a_thread_goes_to_the_handler_at_its_turn(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = os.path.join(str(tmp_path), "broken.tar")
    _shard_with_broken_jpegs(path)
    good = ["k0", "k1", "k2", "k4", "k5", "k6", "k8", "k9"]
    for handler in ("ignore", "warn"):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            items = list(Dataset(path, handler=handler).decode("rgb8", threads=3))
        warned = [r.getMessage() for r in caplog.records if "cannot decode" in r.getMessage()]
        assert keys(items) == good
        assert [w.split("sample ")[1][:4] for w in warned] == (
            ["'k3'", "'k7'"] if handler == "warn" else []
        )
        assert keys(list(Dataset(path, handler=handler).decode("rgb8", threads=1))) == good
    seen = []
    with pytest.raises(DecodeError) as info:
        for sample in Dataset(path).decode("rgb8", threads=3):
            seen.append(sample["__key__"])
    assert seen == ["k0", "k1", "k2"] and (info.value.key, info.value.url) == ("k3", path)
    assert decode_threads() == []  # the error ended the iteration and its threads


def _buggy(ext: str, data: bytes) -> Any:
    if ext == "cls" and data == b"4":
        return undefined_name  # type: ignore[name-defined]  # noqa: F821
    return None


def test_a_bug_in_a_thread_propagates_with_its_type_whatever_the_handler(
    jpeg_folder: str,
) -> None:
    for handler in ("raise", "ignore"):
        seen = []
        with pytest.raises(NameError):
            for sample in Dataset(jpeg_folder, handler=handler).decode(_buggy, threads=3):
                seen.append(sample["__key__"])
        assert seen == ["s00000", "s00001", "s00002", "s00003"]
        assert decode_threads() == []


def test_no_decode_thread_outlives_a_break(jpeg_folder: str) -> None:
    ds = Dataset(jpeg_folder).decode("rgb8", threads=3).to_tuple("jpg", "cls")
    for _, label in ds:
        assert len(decode_threads()) == 3
        if label == 4:
            break
    assert decode_threads() == []  # the dataset lives on; its iteration's threads do not
    iterator = iter(ds)
    next(iterator)
    del iterator
    assert decode_threads() == []
    assert len(list(ds)) == 24 and decode_threads() == []


def test_a_state_saved_after_a_break_resumes_exactly(jpeg_folder: str) -> None:
    full = keys(list(Dataset(jpeg_folder).decode(threads=3)))
    for stop in (1, 5, 17):
        ds = Dataset(jpeg_folder).decode(threads=3)
        head = []
        for sample in ds:
            head.append(sample["__key__"])
            if len(head) == stop:
                break
        state = json.loads(json.dumps(ds.state_dict()))
        assert state["consumed"] == stop
        resumed = Dataset(jpeg_folder).decode(threads=3)
        resumed.load_state_dict(state)
        assert head + keys(list(resumed)) == full


def _decode_threads_now(sample: dict[str, Any]) -> int:
    return len(decode_threads())


def test_default_threads_one_per_core_in_one_process_none_in_workers(
    jpeg_folder: str,
) -> None:
    from torch.utils.data import DataLoader

    expected = min(MAX_DEFAULT_THREADS, usable_cores())
    counts = list(Dataset(jpeg_folder).decode("rgb8").map(_decode_threads_now))
    assert counts == [expected if expected > 1 else 0] * 24
    loader = DataLoader(
        Dataset(jpeg_folder).decode("rgb8").map(_decode_threads_now),
        batch_size=None,
        num_workers=2,
    )
    assert list(loader) == [0] * 24


def _cgroup(root: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    return root


def test_a_cgroup_cpu_limit_caps_the_cores(tmp_path: os.PathLike[str]) -> None:
    """A container limited to 1.5 CPUs on a many-core host gets 2 decode threads, not one
    per host core."""
    base = str(tmp_path)
    cases = {
        "v2-limit": ({"cpu.max": "150000 100000\n"}, 2),
        "v2-none": ({"cpu.max": "max 100000\n"}, None),
        "v1-limit": ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),
        "v1-none": ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        "no-files": ({}, None),
        "garbage": ({"cpu.max": "\n"}, None),
    }
    for name, (files, cpus) in cases.items():
        assert cpu_quota(_cgroup(os.path.join(base, name), files)) == cpus, name
    assert 1 <= usable_cores() <= len(os.sched_getaffinity(0))


def test_a_cut_shard_raises_after_the_same_items_as_one_thread(tmp_path: os.PathLike[str]) -> None:
    """The reader's error comes after every sample read before it, as with one thread,
    not as soon as the threads' read-ahead meets it."""
    [url] = write_shards(str(tmp_path), [12], jpeg=True, manifest=False)
    with open(url, "r+b") as f:
        f.truncate(os.path.getsize(url) * 2 // 3)
    runs = []
    for threads in (1, 3):
        seen = []
        with pytest.raises(TruncatedShardError):
            for sample in Dataset(url).decode("rgb8", threads=threads):
                seen.append(sample["__key__"])
        runs.append(seen)
    assert runs[0] == runs[1] and len(runs[0]) == 8
    assert decode_threads() == []


def test_build_workers_and_decode_threads_count_cores_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One rule for "how many cores": a cgroup CPU limit caps the build's default worker
    count as it caps the decode threads."""
    from shardkit import config

    monkeypatch.delenv("SHARDKIT_WORKERS", raising=False)
    monkeypatch.setattr(config, "cpu_quota", lambda root="/sys/fs/cgroup": 1)
    assert config.usable_cores() == 1
    assert config.default_workers() == 1
