"""A bounded shard cache: cache_dir= with cache_limit= (LRU eviction of whole copies, never
one being read, across workers and processes). The end-to-end tests read over HTTP from
the nginx that scripts/test-services starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers.pipeline import keys, write_shards
from helpers.remote import http_service
from helpers.tables import refuse_parsing

import shardkit
from shardkit.cachelimit import LOCK_NAME, enforce_limit, lock_shared
from shardkit.errors import ConfigError
from shardkit.storage import open_cached
from shardkit.tools.index import write_indexes

ALL = [f"s{i:05d}" for i in range(30)]


def copies(folder: str) -> dict[str, int]:
    return {
        name: os.path.getsize(os.path.join(folder, name))
        for name in os.listdir(folder)
        if name != LOCK_NAME
    }


def make_copies(folder: str, names: list[str], size: int = 100) -> None:
    os.makedirs(folder, exist_ok=True)
    for age, name in enumerate(names):
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(bytes(size))
        os.utime(path, (1000 + age, 1000 + age))  # a is the least recently used


def test_least_recently_used_copies_go_first(tmp_path: str) -> None:
    folder = os.path.join(tmp_path, "cache")
    make_copies(folder, ["a", "b", "c", "d.tmp-1-2"])
    assert enforce_limit(folder, 250) == ["a"]
    assert sorted(copies(folder)) == ["b", "c", "d.tmp-1-2"]  # downloads in flight stay
    with open_cached(os.path.join(folder, "b"), 0) as stream:  # a read makes b the newest
        assert stream is not None
    assert enforce_limit(folder, 100) == ["c"]
    assert enforce_limit(folder, 10_000) == []


def test_a_copy_being_read_is_never_evicted(tmp_path: str) -> None:
    folder = os.path.join(tmp_path, "cache")
    make_copies(folder, ["a", "b", "c"])
    reader = open_cached(os.path.join(folder, "a"), 0)
    assert reader is not None
    assert enforce_limit(folder, 150) == ["b", "c"]
    assert reader.read() == bytes(100)
    reader.close()
    assert enforce_limit(folder, 0) == ["a"]


def test_a_copy_read_by_another_process_is_never_evicted(tmp_path: str) -> None:
    folder = os.path.join(tmp_path, "cache")
    make_copies(folder, ["a", "b"])
    code = (
        "import sys, time\n"
        "from shardkit.storage import open_cached\n"
        f"s = open_cached({os.path.join(folder, 'a')!r}, 0)\n"
        "print('reading', flush=True)\n"
        "sys.stdin.readline()\n"
        "print(len(s.read()), flush=True)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "reading"
        assert enforce_limit(folder, 0) == ["b"]
        assert sorted(copies(folder)) == ["a"]
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "100"
    assert enforce_limit(folder, 0) == ["a"]


def test_a_copy_evicted_before_its_lock_is_a_miss(tmp_path: str) -> None:
    path = os.path.join(tmp_path, "a")
    make_copies(str(tmp_path), ["a"])
    fd = os.open(path, os.O_RDONLY)
    try:
        os.unlink(path)  # evicted between our open and our lock
        assert lock_shared(fd) is False
    finally:
        os.close(fd)
    assert open_cached(path, 0) is None


def test_a_shard_copy_and_its_index_go_together(tmp_path: str) -> None:
    """An index copy (read once per process: its mtime is when it was fetched) is never
    evicted alone while its shard copy stays: the two are one entry, of the shard's last
    use; an index copy without its shard copy is an entry of its own."""
    folder = os.path.join(tmp_path, "cache")
    make_copies(folder, ["a.tar.idx", "b.tar.idx", "z.tar.idx", "a.tar", "b.tar", "c.tar"])
    assert enforce_limit(folder, 400) == ["z.tar.idx", "a.tar", "a.tar.idx"]
    assert sorted(copies(folder)) == ["b.tar", "b.tar.idx", "c.tar"]
    reader = open_cached(os.path.join(folder, "b.tar"), 0)  # in use: it stays, index too
    assert reader is not None
    assert enforce_limit(folder, 0) == ["c.tar"]
    assert sorted(copies(folder)) == ["b.tar", "b.tar.idx"]
    reader.close()
    assert enforce_limit(folder, 0) == ["b.tar", "b.tar.idx"]


def test_the_limit_needs_a_cache_dir_and_a_size(tmp_path: str) -> None:
    with pytest.raises(ConfigError, match="cache_limit needs a cache_dir"):
        shardkit.Dataset(str(tmp_path), cache_limit="1GB")
    with pytest.raises(ConfigError, match="cache_limit 'lots' is not a size"):
        shardkit.Dataset(str(tmp_path), cache_dir=str(tmp_path), cache_limit="lots")
    with pytest.raises(ConfigError, match="cache_limit must be positive"):
        shardkit.IndexedDataset(str(tmp_path), cache_dir=str(tmp_path), cache_limit=0)


@pytest.fixture
def served() -> tuple[str, int]:
    """6 shards of 5 samples over HTTP: (folder URL, size of one shard)."""
    root, url = http_service()
    shards = write_shards(root, [5] * 6, payload=20_000)
    write_indexes(shards)
    return url + "/", os.path.getsize(shards[0])


def test_epochs_through_a_bounded_cache_with_workers(
    served: tuple[str, int], tmp_path: str
) -> None:
    from torch.utils.data import DataLoader

    url, shard = served
    cache = os.path.join(tmp_path, "cache")
    limit = int(shard * 2.5)
    ds = shardkit.Dataset(url, cache_dir=cache, cache_limit=limit).map(lambda s: s["__key__"])
    for epoch in range(3):
        ds.set_epoch(epoch)
        assert sorted(DataLoader(ds, batch_size=None, num_workers=2)) == ALL
        held = copies(cache)
        # Over the limit only by copies still open when the last one was committed.
        assert sum(held.values()) <= limit + 2 * shard, held
    enforce_limit(cache, limit)
    assert 0 < sum(copies(cache).values()) <= limit


def test_a_bounded_cache_keeps_each_shard_with_its_index(
    served: tuple[str, int], tmp_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epochs through a cache that holds 2.5 shards: every shard copy left in it has its
    index copy beside it (the server has one for each), and is read by its table."""
    url, shard = served
    cache = os.path.join(tmp_path, "cache")
    ds = shardkit.Dataset(url, cache_dir=cache, cache_limit=int(shard * 2.5))
    for epoch in range(3):
        ds.set_epoch(epoch)
        assert sorted(keys(ds)) == ALL
    held = sorted(copies(cache))
    shards = [name for name in held if name.endswith(".tar")]
    assert shards and held == sorted([*shards, *(name + ".idx" for name in shards)]), held
    refuse_parsing(monkeypatch)  # each shard cached is read by its index's table
    left = [url + name.split("-", 1)[1] for name in shards]
    assert len(keys(shardkit.Dataset(left, cache_dir=cache))) == 5 * len(shards)


def test_random_access_through_a_bounded_cache(served: tuple[str, int], tmp_path: str) -> None:
    url, shard = served
    cache = os.path.join(tmp_path, "cache")
    limit = int(shard * 1.5)
    ds = shardkit.IndexedDataset(url, cache_dir=cache, cache_limit=limit, max_open=1)
    order = [29, 0, 14, 7, 22, 3, 28, 11, 19, 5, 0, 29]
    assert keys([ds[i] for i in order]) == [ALL[i] for i in order]
    assert sum(copies(cache).values()) <= limit + shard  # + the copy open in the pool
    ds.close()
    time.sleep(0)  # nothing holds a lock now
    enforce_limit(cache, limit)
    assert sum(copies(cache).values()) <= limit
