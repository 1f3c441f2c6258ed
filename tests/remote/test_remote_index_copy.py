"""The ``.idx`` of a remote shard read with ``cache_dir``: fetched into the cache with the
shard's first read, in one request, whether or not the index is there; on http(s), S3 and
GCS (the servers of scripts/test-services) and a loopback server that counts requests."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import pytest
from helpers.pipeline import write_shards
from helpers.remote import Faults, faulty_server, gcs_options, s3_options

from shardkit import Dataset, storage
from shardkit.cli import main


def _shard(folder: str, indexed: bool) -> str:
    """A local tar shard of 6 samples, with its ``.idx`` or without."""
    (url,) = write_shards(folder, [6], ext="tar", manifest=False)
    if indexed:
        assert main(["index", "-q", url]) == 0
    assert os.path.exists(url + ".idx") == indexed
    return url


def _files(url: str) -> dict[str, bytes]:
    files = {}
    for name in (url, url + ".idx"):
        if os.path.exists(name):
            with open(name, "rb") as f:
                files["/" + os.path.basename(name)] = f.read()
    return files


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
def test_a_cached_read_asks_for_the_index_once(
    tmp_path: os.PathLike[str], indexed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The first read of an uncached shard sends two requests, the index's (found, or a
    404) and the shard's; no existence probe before the index. The second read sends
    none, and takes the index's table when there is one."""
    shard = _shard(os.path.join(str(tmp_path), "src"), indexed)
    cache = os.path.join(str(tmp_path), "cache")
    faults = Faults()
    name = "/" + os.path.basename(shard)
    with faulty_server(_files(shard), faults) as server, caplog.at_level(logging.WARNING):
        url = server + name
        assert len(list(Dataset(url, cache_dir=cache))) == 6
        asked = [(r["method"], r["path"]) for r in faults.requests]
        assert asked == [("GET", name + ".idx"), ("GET", name)], asked
        copies = {storage.cache_path(url, cache), storage.cache_path(url, cache) + ".idx"}
        held = {os.path.join(cache, n) for n in os.listdir(cache)}
        assert held == (copies if indexed else {storage.cache_path(url, cache)})
        assert len(list(Dataset(url, cache_dir=cache))) == 6
        assert len(faults.requests) == 2
    assert "index not cached" not in caplog.text


def test_an_index_gone_from_the_server_leaves_the_cache(tmp_path: os.PathLike[str]) -> None:
    """A refresh of an index the server no longer has removes the stale copy (the shard
    is then read by its own headers), in the one request that finds it gone."""
    shard = _shard(os.path.join(str(tmp_path), "src"), True)
    cache = os.path.join(str(tmp_path), "cache")
    files = _files(shard)
    faults = Faults()
    name = "/" + os.path.basename(shard)
    with faulty_server(files, faults) as server:
        index = server + name + ".idx"
        copy = storage.cache_path(server + name, cache) + ".idx"
        assert storage.refresh_copy(index, copy, what="index file")
        with open(copy, "rb") as f:
            assert f.read() == files[name + ".idx"]
        del files[name + ".idx"]
        assert not storage.refresh_copy(index, copy, what="index file")
        assert not os.path.exists(copy)
        assert [r["method"] for r in faults.requests] == ["GET", "GET"]


def _object_store(kind: str, tmp: str, indexed: bool) -> tuple[str, dict[str, Any]]:
    """The shard uploaded to a fresh S3 bucket or GCS bucket: (its URL, storage options)."""
    shard = _shard(os.path.join(tmp, "src"), indexed)
    bucket = f"shardkit-{uuid.uuid4().hex[:10]}"
    if kind == "s3":
        import s3fs

        options: dict[str, Any] = s3_options()
        fs: Any = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    else:
        import gcsfs

        options = gcs_options()
        fs = gcsfs.GCSFileSystem(**options, skip_instance_cache=True)
    fs.mkdir(bucket)
    for local in (shard, shard + ".idx"):
        if os.path.exists(local):
            fs.put(local, f"{bucket}/{os.path.basename(local)}")
    return f"{kind}://{bucket}/{os.path.basename(shard)}", options


@pytest.mark.parametrize("indexed", [True, False], ids=["index", "no-index"])
@pytest.mark.parametrize("kind", ["s3", "gs"])
def test_an_object_store_shard_is_cached_with_its_index(
    tmp_path: os.PathLike[str], kind: str, indexed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """On a real S3 and GCS server: the index is cached beside the shard when there is
    one; a missing one is no warning, and no copy."""
    url, options = _object_store(kind, str(tmp_path), indexed)
    cache = os.path.join(str(tmp_path), "cache")
    with caplog.at_level(logging.WARNING):
        first = [s["__key__"] for s in Dataset(url, cache_dir=cache, storage_options=options)]
    assert first == [f"s{i:05d}" for i in range(6)]
    assert "index not cached" not in caplog.text
    index_copy = storage.cache_path(url, cache) + ".idx"
    assert os.path.exists(index_copy) == indexed
    assert os.path.exists(storage.cache_path(url, cache))
