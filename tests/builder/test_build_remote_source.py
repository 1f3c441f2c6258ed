"""Building from sources in an object store (SeaweedFS S3): an image folder under a
prefix, a CSV list beside its images, and existing shards read back by ranged reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, make_corpus_jpeg, read_samples, snapshot, write
from helpers.remote import Held, slow_proxy
from helpers.scale import s3_bucket

import shardkit
from shardkit import BuildOptions

__all__ = ["s3_bucket"]


def _upload(folder: str, url: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    for dirpath, _, names in os.walk(folder):
        for name in names:
            local = os.path.join(dirpath, name)
            rel = os.path.relpath(local, folder)
            with open(local, "rb") as f:
                fs.pipe_file(f"{url.removeprefix('s3://')}/{rel}", f.read())


def _by_key(out: str) -> dict[str, dict[str, bytes]]:
    return {s["__key__"]: s for s in read_samples(out)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("remote-src") / "src"), count=40)


def test_an_image_folder_in_s3_builds_the_same_shards_as_on_disk(
    corpus: str, s3_bucket: str, tmp_path: Path
) -> None:
    _upload(corpus, f"s3://{s3_bucket}/images")
    options = BuildOptions(max_count=16, workers=2, seed=5)
    local = shardkit.build(corpus, tmp_path / "local", options=options)
    remote = shardkit.build(f"s3://{s3_bucket}/images", tmp_path / "remote", options=options)
    assert remote.samples == local.samples == 40
    assert remote.skipped == local.skipped and len(remote.skipped) == 5
    want, got = snapshot(str(tmp_path / "local")), snapshot(str(tmp_path / "remote"))
    for name in want:
        if name != "manifest.json":
            assert got[name] == want[name], name
    for field in ("class_to_idx", "class_counts", "samples", "shards", "skipped"):
        assert got["manifest.json"][field] == want["manifest.json"][field], field


def test_a_folder_of_samples_in_s3_builds_the_same_shards_as_on_disk(
    tmp_path: Path, s3_bucket: str
) -> None:
    """Samples of several files, a bad one and a stray file, with no classes."""
    src = str(tmp_path / "src")
    jpg = make_corpus_jpeg(0)
    for i in range(6):
        write(src, f"0000{i // 3}/{i:04d}.jpg", jpg if i != 4 else jpg[:200])
        write(src, f"0000{i // 3}/{i:04d}.txt", f"caption {i}".encode())
    write(src, "stats.json", b"{}")
    _upload(src, f"s3://{s3_bucket}/samples")
    options = BuildOptions(layout="samples", max_count=2, workers=2)
    local = shardkit.build(src, tmp_path / "local", options=options)
    remote = shardkit.build(f"s3://{s3_bucket}/samples", tmp_path / "remote", options=options)
    assert remote.samples == local.samples == 5
    assert remote.skipped == local.skipped and len(remote.skipped) == 2
    want, got = snapshot(str(tmp_path / "local")), snapshot(str(tmp_path / "remote"))
    assert [name for name in want if name.endswith(".tar")] == [r.name for r in local.shards]
    for name in want:
        if name != "manifest.json":
            assert got[name] == want[name], name
    assert _by_key(str(tmp_path / "remote"))["00001/0005"]["txt"] == b"caption 5"


def test_a_csv_list_in_s3_reads_the_images_beside_it(
    corpus: str, s3_bucket: str, tmp_path: Path
) -> None:
    rows = ["path,label"]
    for cls in ("circle", "square"):
        names = sorted(n for n in os.listdir(os.path.join(corpus, cls)) if n.endswith(".jpg"))
        rows += [f"{cls}/{name},{cls}" for name in names[:6]]
    listing = Path(corpus) / "list.csv"
    listing.write_text("\n".join(rows) + "\n")
    try:
        _upload(corpus, f"s3://{s3_bucket}/data")
        local = shardkit.build(str(listing), tmp_path / "local", options=BuildOptions())
        url = f"s3://{s3_bucket}/data/list.csv"
        remote = shardkit.build(url, tmp_path / "remote", options=BuildOptions(workers=2))
    finally:
        listing.unlink()
    assert remote.samples == local.samples == 12 - 2  # empty.jpg and cut.jpg are skipped
    assert sorted(p for p, _ in remote.skipped) == sorted(p for p, _ in local.skipped)
    assert _by_key(str(tmp_path / "remote")) == _by_key(str(tmp_path / "local"))


def test_shards_in_s3_reshard_like_local_ones(corpus: str, s3_bucket: str, tmp_path: Path) -> None:
    first = str(tmp_path / "first")
    shardkit.build(corpus, first, options=BuildOptions(max_count=9, workers=1))
    names = sorted(n for n in os.listdir(first) if n.endswith(".tar"))
    _upload(first, f"s3://{s3_bucket}/shards")
    pattern = f"shard-{{000000..{len(names) - 1:06d}}}.tar"
    options = BuildOptions(max_count=7, seed=3, workers=2)
    shardkit.build(os.path.join(first, pattern), tmp_path / "local", options=options)
    shardkit.build(f"s3://{s3_bucket}/shards/{pattern}", tmp_path / "remote", options=options)
    want, got = snapshot(str(tmp_path / "local")), snapshot(str(tmp_path / "remote"))
    assert sorted(want) == sorted(got)
    for name in want:
        if name != "manifest.json":
            assert got[name] == want[name], name
    assert got["manifest.json"]["samples"] == 40


def test_remote_sources_that_cannot_be_used_are_one_line_errors(
    s3_bucket: str, tmp_path: Path
) -> None:
    with pytest.raises(shardkit.BuildError, match="no such folder") as missing:
        shardkit.build(f"s3://{s3_bucket}/nothing-here", tmp_path / "a")
    assert missing.value.url == f"s3://{s3_bucket}/nothing-here"
    with pytest.raises(shardkit.BuildError, match="no such file"):
        shardkit.build(f"s3://{s3_bucket}/none-{{0..1}}.tar", tmp_path / "b")
    with pytest.raises(shardkit.BuildError, match="compressed shards cannot be re-sharded"):
        shardkit.build(f"s3://{s3_bucket}/x.tar.gz", tmp_path / "c")
    with pytest.raises(shardkit.BuildError, match="inside the source folder"):
        shardkit.build(f"s3://{s3_bucket}/src", f"s3://{s3_bucket}/src/out")
    assert not os.path.exists(tmp_path / "a") and not os.path.exists(tmp_path / "b")


def test_workers_use_the_drivers_s3_endpoint(
    corpus: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker started before AWS_ENDPOINT_URL was set (or on another node) must still
    # read from the server the driver listed.
    import pickle

    from shardkit.builder._folders import list_remote_folder

    _upload(corpus, f"s3://{s3_bucket}/endpoint")
    listing = list_remote_folder(f"s3://{s3_bucket}/endpoint")
    item = next(i for i in listing.items or [] if i.size > 100)
    source = pickle.loads(pickle.dumps(listing.source))
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # as in a fresh worker process
    with open(os.path.join(corpus, item.ref), "rb") as f:
        assert source.load(item) == f.read()


def test_a_large_s3_folder_is_listed_folder_by_folder_into_spill_files(
    corpus: str, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the budget forced tiny, the listing goes through sorted runs on disk and the
    # shuffle through buckets: the same shards as a local build under the same budget,
    # and nothing of the listing is left in the filesystem's listing cache.
    from shardkit import storage
    from shardkit.builder import _spill as spill

    _upload(corpus, f"s3://{s3_bucket}/large")
    monkeypatch.setattr(spill, "ORDER_BUDGET", 8)
    options = BuildOptions(max_count=16, workers=2, seed=5)
    local = shardkit.build(corpus, tmp_path / "local", options=options)
    remote = shardkit.build(f"s3://{s3_bucket}/large", tmp_path / "remote", options=options)
    assert remote.samples == local.samples == 40 and remote.skipped == local.skipped
    want, got = snapshot(str(tmp_path / "local")), snapshot(str(tmp_path / "remote"))
    assert [n for n in want if n != "manifest.json"] == [n for n in got if n != "manifest.json"]
    for name in want:
        if name != "manifest.json":
            assert got[name] == want[name], name
    fs, _ = storage.filesystem(f"s3://{s3_bucket}/large")
    assert not [path for path in fs.dircache if path.startswith(f"{s3_bucket}/large")]


def _classes_bucket(url: str, classes: int, per_class: int, *, nested: bool = False) -> None:
    """``classes`` class folders of ``per_class`` tiny JPEGs each (one ``sub/`` folder more
    in each with ``nested``), a skipped file in each, uploaded at once."""
    import s3fs
    from helpers.build import make_corpus_jpeg

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    objects = {}
    for c in range(classes):
        for i in range(per_class):
            sub = "sub/" if nested and i % 2 else ""
            objects[f"{url.removeprefix('s3://')}/c{c:03d}/{sub}{i:03d}.jpg"] = make_corpus_jpeg(i)
        objects[f"{url.removeprefix('s3://')}/c{c:03d}/notes.txt"] = b"notes\n"
    fs.pipe(objects)


def _listed(url: str) -> tuple[list[Any], list[str], list[tuple[str, str]], str]:
    from shardkit.builder._folders import list_remote_folder

    listing = list_remote_folder(url)
    return list(listing.items or []), listing.classes, listing.skipped, listing.fingerprint


@contextmanager
def _through(proxy: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """S3 requests of the code under test go through ``proxy`` (a fresh filesystem)."""
    import s3fs

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        s3fs.S3FileSystem.clear_instance_cache()  # none is left bound to the proxy


def test_folders_listed_concurrently_give_the_serial_listing(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listings come back in any order (each request waits a random 0-20 ms more): the
    # items, classes, skipped files and fingerprint are those of a listing one folder at
    # a time, through sorted runs on disk as through memory, and so are the shards.
    from shardkit import storage
    from shardkit.builder import _spill as spill

    url = f"s3://{s3_bucket}/many"
    _classes_bucket(url, classes=12, per_class=4, nested=True)
    options = BuildOptions(max_count=8, workers=1, seed=5)
    with monkeypatch.context() as one_at_a_time:
        one_at_a_time.setattr(storage, "REQUESTS_IN_FLIGHT", 1)
        serial = _listed(url)
        shardkit.build(url, tmp_path / "serial", options=options)
    shardkit.build(url, tmp_path / "concurrent", options=options)
    proxy = slow_proxy(os.environ["AWS_ENDPOINT_URL"], 0.0, jitter=0.02)
    with proxy as endpoint, _through(endpoint, monkeypatch):
        concurrent = _listed(url)
        monkeypatch.setattr(spill, "ORDER_BUDGET", 8)
        spilled = _listed(url)
    assert len(serial[0]) == 12 * 4 and len(serial[1]) == 12 and len(serial[2]) == 12
    assert concurrent == serial
    assert spilled == serial
    want, got = snapshot(str(tmp_path / "serial")), snapshot(str(tmp_path / "concurrent"))
    assert len(want) > 2 and want == got


def test_folders_are_listed_with_requests_in_flight_at_once(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 40 class folders behind a server 0.2 s away: 41 listings one after another take
    # 8.2 s or more; with REQUESTS_IN_FLIGHT at once (all of them on the wire: the S3
    # client's connection pool is as large), a few round trips.
    import time

    from shardkit import storage

    url = f"s3://{s3_bucket}/far"
    _classes_bucket(url, classes=40, per_class=1)
    held = Held()
    proxy = slow_proxy(os.environ["AWS_ENDPOINT_URL"], 0.2, held=held)
    with proxy as endpoint, _through(endpoint, monkeypatch):
        _listed(url)  # the client is made, untimed
        started = time.perf_counter()
        items, classes, _, _ = _listed(url)
        seconds = time.perf_counter() - started
    assert len(items) == 40 and len(classes) == 40
    assert seconds < 41 * 0.2 / 2, f"{seconds:.2f} s: the folders were listed one at a time"
    # More than botocore's default pool of 10 (so the pool was enlarged), never more than
    # the limit; not exactly the limit, which a loaded machine may not line up in 0.2 s.
    assert 10 < held.peak <= storage.REQUESTS_IN_FLIGHT, f"{held.peak} requests at once at most"


def test_a_folder_that_cannot_be_listed_stops_the_listing_with_one_error(
    s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One class folder is refused (403) while others are in flight: one BuildError naming
    # the source, no folder listed after it, and no listing thread left behind.
    import threading

    import s3fs

    url = f"s3://{s3_bucket}/refused"
    _classes_bucket(url, classes=40, per_class=1)
    listed: list[str] = []
    ls = s3fs.S3FileSystem._ls

    async def refusing_ls(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
        listed.append(path)
        if path.endswith("/c005"):
            raise PermissionError("Access Denied")
        return await ls(self, path, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_ls", refusing_ls)
    s3fs.S3FileSystem.clear_instance_cache()  # a filesystem made with the refusing _ls
    try:
        with pytest.raises(shardkit.BuildError, match="cannot list the source: Access") as e:
            _listed(url)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert e.value.url == url
    assert len(listed) < 1 + 40  # the folders not yet started when it failed never were
    assert not [t for t in threading.enumerate() if t.name.startswith("shardkit-list")]


def test_a_folder_of_shards_in_s3_is_shards_not_an_image_folder(
    s3_bucket: str, tmp_path: Path
) -> None:
    # The one resolver decides, as for Dataset: a prefix holding shard files (and here a
    # subfolder too) is shards; it used to be listed as an image folder with no images.
    local = str(tmp_path / "shards")
    with shardkit.ShardWriter(os.path.join(local, "in-%06d.tar"), max_count=5) as sink:
        for i in range(12):
            sink.write({"__key__": f"k{i:03d}", "txt": f"sample {i}"})
    os.makedirs(os.path.join(local, "logs"))
    with open(os.path.join(local, "logs", "note.txt"), "w") as f:
        f.write("not a shard")
    _upload(local, f"s3://{s3_bucket}/shards")
    source = f"s3://{s3_bucket}/shards"
    result = shardkit.build(source, tmp_path / "out", options=BuildOptions(workers=1))
    assert result.samples == 12
    assert sorted(_by_key(str(tmp_path / "out"))) == [f"k{i:03d}" for i in range(12)]
    assert sum(1 for _ in shardkit.Dataset(source + "/")) == 12


def test_index_files_are_loaded_with_requests_in_flight_at_once(
    s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One .idx loader for every consumer, bounded by storage.REQUESTS_IN_FLIGHT (the
    # reader's own loader fetched 8 at once, the build's 16): 40 indexes behind a server
    # 0.1 s away, for Dataset's counts, IndexedDataset and the build's listing alike (only
    # the .idx requests are held: the build's reading of 40 shards is not what is counted).
    from shardkit import storage
    from shardkit.tools import write_indexes

    local = str(tmp_path / "shards")
    with shardkit.ShardWriter(os.path.join(local, "in-%06d.tar"), max_count=1) as sink:
        for i in range(40):
            sink.write({"__key__": f"k{i:03d}", "txt": f"sample {i}"})
    write_indexes(sorted(os.path.join(local, n) for n in os.listdir(local) if n.endswith(".tar")))
    _upload(local, f"s3://{s3_bucket}/indexed")
    url = f"s3://{s3_bucket}/indexed/"
    for load in (
        lambda: len(shardkit.Dataset(url)),
        lambda: len(shardkit.IndexedDataset(url)),
        lambda: shardkit.build(url, tmp_path / "out", options=BuildOptions(workers=1)).samples,
    ):
        held = Held()
        proxy = slow_proxy(os.environ["AWS_ENDPOINT_URL"], 0.1, held=held, only=".idx")
        with proxy as endpoint, _through(endpoint, monkeypatch):
            assert load() == 40
        assert 8 < held.peak <= storage.REQUESTS_IN_FLIGHT, f"{held.peak} requests at once"
