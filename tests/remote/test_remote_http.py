"""http(s) shards: nginx from scripts/test-services, and loopback servers that misbehave."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time

import pytest
from helpers.pipeline import keys, write_shards
from helpers.remote import Faults, cutting_proxy, faulty_server, http_service

from shardkit import Dataset, StorageError, reader, storage
from shardkit.reader import read_shard

ALL = [f"s{i:05d}" for i in range(12)]


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def nginx_shards() -> tuple[str, str]:
    """Three shards (12 samples) and a manifest in a folder nginx serves: (folder, URL)."""
    folder, url = http_service()
    write_shards(folder, [4, 5, 3], jpeg=True)
    for name in os.listdir(folder):
        os.chmod(os.path.join(folder, name), 0o644)
    return folder, url


def test_read_from_nginx(nginx_shards: tuple[str, str]) -> None:
    _, url = nginx_shards
    assert keys(list(Dataset(url + "/shard-{000000..000002}.tar"))) == ALL
    manifest = Dataset(url + "/manifest.json")
    assert len(manifest) == 12 and keys(list(manifest)) == ALL
    images = list(Dataset(url + "/manifest.json").decode("rgb8").to_tuple("jpg", "cls"))
    assert images[5][0].shape == (16, 24, 3) and images[5][1] == 5


def test_remote_streams_seek_with_range_requests(nginx_shards: tuple[str, str]) -> None:
    folder, url = nginx_shards
    data = read_bytes(os.path.join(folder, "shard-000001.tar"))
    with storage.open_read(url + "/shard-000001.tar") as stream:
        assert stream.seekable()
        assert stream.read(700) == data[:700]
        stream.seek(5000)
        assert stream.read(100) == data[5000:5100] and stream.tell() == 5100
        stream.seek(-10, os.SEEK_END)
        assert stream.read() == data[-10:]
        stream.seek(3, os.SEEK_SET)
        assert stream.read(5) == data[3:8]


def test_tfrecord_from_nginx() -> None:
    folder, url = http_service()
    write_shards(folder, [3, 2], ext="tfrecord")
    assert keys(list(Dataset(url + "/manifest.json"))) == ALL[:5]


def test_dataloader_workers_over_http(nginx_shards: tuple[str, str]) -> None:
    from torch.utils.data import DataLoader

    _, url = nginx_shards
    ds = Dataset(url + "/manifest.json").shuffle(4).to_tuple("__key__")
    seen = [k for (batch,) in DataLoader(ds, batch_size=2, num_workers=2) for k in batch]
    assert sorted(seen) == ALL


def test_connection_cut_mid_shard_resumes_with_a_range_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder, url = http_service()
    write_shards(folder, [4, 5, 3], payload=400_000)  # shards of 1.6-2 MB
    base, path = url.rsplit("/", 1)
    requests: list[str] = []
    with (
        cutting_proxy(base, [700_000, 900_000], requests) as proxy,
        caplog.at_level(logging.WARNING),
    ):
        got = keys(list(Dataset(f"{proxy}/{path}/shard-{{000000..000002}}.tar")))
    assert got == ALL
    ranges = [r for r in requests if r.lower().startswith("range: bytes=")]
    assert len(ranges) >= 2 and all(int(r.split("=")[1].rstrip("-")) > 0 for r in ranges)
    assert "retry 1 of 5" in caplog.text


def test_dropped_connection_and_5xx_are_retried(caplog: pytest.LogCaptureFixture) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        urls = write_shards(folder, [6], manifest=False, payload=500_000)
        data = read_bytes(urls[0])
    faults = Faults(cut_after=[len(data) // 3, len(data) // 3], statuses=[])
    with faulty_server({"/a.tar": data}, faults) as server:
        with caplog.at_level(logging.WARNING):
            assert keys(list(Dataset(server + "/a.tar"))) == ALL[:6]
        gets = [r for r in faults.requests if r["method"] == "GET"]
        offsets = [int(r.get("range", "bytes=0-")[6:].rstrip("-")) for r in gets]
        assert offsets[0] == 0 and 0 < offsets[1] < offsets[2] < len(data)
        faults.statuses[:] = [503]
        assert keys(list(Dataset(server + "/a.tar"))) == ALL[:6]
        faults.statuses[:] = [500] * 3
        with pytest.raises(StorageError, match="gave up after 2 retries") as info:
            storage.open_read(server + "/a.tar", retries=2)
        assert info.value.url == server + "/a.tar"
        with pytest.raises(StorageError, match="no such file"):
            list(Dataset(server + "/missing.tar"))


def test_a_stalled_connection_is_reopened_where_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tempfile

    monkeypatch.setattr(storage._remote, "_HTTP_STALL_S", 1.0)  # where remote reads live
    with tempfile.TemporaryDirectory() as folder:
        urls = write_shards(folder, [40], manifest=False, jpeg=True)
        data = read_bytes(urls[0])
    faults = Faults(stall_after=[len(data) // 3])
    try:
        with faulty_server({"/s.tar": data}, faults) as server:
            started = time.monotonic()
            with storage.open_read(server + "/s.tar") as stream:
                assert stream.read() == data
            assert time.monotonic() - started < 20
    finally:
        faults.release.set()
    gets = [r for r in faults.requests if r["method"] == "GET"]
    assert len(gets) == 2 and gets[1]["range"].startswith("bytes=")
    assert int(gets[1]["range"][6:].rstrip("-")) > 0


def test_shards_stream_before_they_are_fully_sent() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        urls = write_shards(folder, [200], manifest=False, jpeg=True)
        data = read_bytes(urls[0])
    faults = Faults(hold_after=len(data) // 10)
    with faulty_server({"/big.tar": data}, faults) as server:
        started = time.monotonic()
        samples = iter(Dataset(server + "/big.tar"))
        first = next(samples)  # arrives while the server still holds 90 % back
        assert first["__key__"] == "s00000" and time.monotonic() - started < 10
        assert not faults.release.is_set()
        faults.release.set()
        assert 1 + sum(1 for _ in samples) == 200


@pytest.mark.parametrize("ext", ["tar", "tfrecord", "tar.gz"])
def test_cache_dir_never_keeps_a_copy_cut_between_samples(
    tmp_path: os.PathLike[str], ext: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A chunked body (no Content-Length) that ends cleanly but early, between two
    samples, is not cached: the next read streams the whole shard again and caches it."""
    urls = write_shards(os.path.join(str(tmp_path), "src"), [6], ext=ext, manifest=False)
    data = read_bytes(urls[0])
    offsets = [s["__offset__"] for s in read_shard(urls[0])]
    if ext == "tar.gz":
        cut = len(data) // 2  # somewhere in the gzip stream
    elif ext == "tfrecord":
        cut = offsets[3] + 20  # inside record 3: a record boundary looks like an end
    else:
        cut = offsets[3]  # right before sample 3
    cache = os.path.join(str(tmp_path), "cache")
    faults = Faults(chunked=True, end_after=[cut])
    name = "/" + os.path.basename(urls[0])
    with faulty_server({name: data}, faults) as server:
        url = server + name
        first = keys(list(Dataset(url, cache_dir=cache, handler="warn")))
        assert len(first) < 6
        assert os.listdir(cache) == []  # no copy under any name, final or temporary
        assert "not cached" in caplog.text
        assert keys(list(Dataset(url, cache_dir=cache))) == [f"s{i:05d}" for i in range(6)]
        assert read_bytes(storage.cache_path(url, cache)) == data
        gets = len(faults.requests)
        assert len(list(Dataset(url, cache_dir=cache))) == 6 and len(faults.requests) == gets


def test_a_whole_shard_is_told_from_a_cut_one(tmp_path: os.PathLike[str]) -> None:
    """The completeness rule itself, on local files: cut at a sample boundary, inside a
    sample, before the end blocks, and whole."""
    import io

    folder = str(tmp_path)
    for ext in ("tar", "tar.gz", "tfrecord", "tfrecord.gz"):
        (url,) = write_shards(os.path.join(folder, ext), [5], ext=ext, manifest=False)
        data = read_bytes(url)
        kind = "tfrecord" if "tfrecord" in ext else "tar"
        assert reader.holds_whole_shard(io.BytesIO(data), format=kind), ext
        cuts = [len(data) // 2, len(data) - 1, len(data) - 600]
        offsets = [s["__offset__"] for s in read_shard(url)][1:]
        if ext == "tar":
            cuts += offsets
        elif ext == "tfrecord":
            cuts += [offset + 13 for offset in offsets]
        for cut in (c for c in cuts if 0 < c < len(data)):
            assert not reader.holds_whole_shard(io.BytesIO(data[:cut]), format=kind), (ext, cut)


def test_cache_dir_keeps_complete_copies(
    nginx_shards: tuple[str, str], tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, url = nginx_shards
    cache = os.path.join(str(tmp_path), "cache")
    pattern = url + "/shard-{000000..000002}.tar"
    assert keys(list(Dataset(pattern, cache_dir=cache))) == ALL
    cached = sorted(os.listdir(cache))
    assert len(cached) == 3 and not [n for n in cached if ".tmp-" in n]
    source = os.path.join(folder, "shard-000001.tar")
    copy = storage.cache_path(url + "/shard-000001.tar", cache)
    assert read_bytes(copy) == read_bytes(source)
    shutil.rmtree(folder)  # the server has nothing now: the cache serves
    assert sorted(keys(list(Dataset(pattern, cache_dir=cache).shuffle(3)))) == ALL
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", cache)  # the default cache
    assert keys(list(Dataset(pattern))) == ALL


def test_a_folder_lists_again_after_a_forked_child_let_go_of_the_parents_filesystem(
    nginx_shards: tuple[str, str],
) -> None:
    """A forked child (a DataLoader worker) that frees the parent's fsspec filesystem runs
    its finalizer, which closes the inherited keep-alive connections; that must not take
    them out of the parent's event loop (an epoll set parent and child share), or the
    parent's next request on one waits forever. In a subprocess, with a time limit, so a
    regression fails instead of hanging."""
    folder, url = nginx_shards
    os.remove(os.path.join(folder, "manifest.json"))  # the listing is one request
    code = (
        "import gc, os, shardkit\n"
        f"url = {url + '/'!r}\n"
        "print(len(shardkit.Dataset(url).shards.urls), flush=True)\n"  # a keep-alive connection
        "pid = os.fork()\n"
        "if pid == 0:\n"  # a worker: reads the shards through a filesystem of its own
        "    print(len(list(shardkit.Dataset(url))), flush=True)\n"
        "    gc.collect()\n"  # frees the parent's filesystem: its finalizer runs here
        "    os._exit(0)\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "print(len(shardkit.Dataset(url).shards.urls), flush=True)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"listing the folder again hangs after the fork: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "12", "3"], done.stdout


def test_a_cache_copy_never_writes_into_another_readers_copy_in_progress(
    nginx_shards: tuple[str, str], tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: a copy in progress was named NAME.tmp-PID-ID (the reader object's id) and
    # opened with truncation; two processes sharing the cache folder from two containers
    # can have the same pid and the same id, and one would then truncate and interleave
    # into the other's copy. Here the other reader's copy is planted under the name this
    # process would have chosen.
    from shardkit.storage import _cache

    _, url = nginx_shards
    cache = os.path.join(str(tmp_path), "cache")
    shard = url + "/shard-000001.tar"
    copy = storage.cache_path(shard, cache)
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    monkeypatch.setattr(_cache, "id", lambda _: 0x5EED, raising=False)
    planted = f"{copy}.tmp-{os.getpid()}-5eed"
    with open(planted, "wb") as f:
        f.write(b"another reader's copy, half written")
    assert len(list(Dataset(shard, cache_dir=cache))) > 0
    assert read_bytes(planted) == b"another reader's copy, half written"
    assert os.path.exists(copy)  # this reader made its own copy and committed it
