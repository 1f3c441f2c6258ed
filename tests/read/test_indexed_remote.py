"""IndexedDataset and index counts over HTTP (nginx) and S3 (SeaweedFS): ranged reads, and
the local cache (run through scripts/test-services)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from typing import Any

import pytest
from helpers.pipeline import write_shards
from helpers.remote import http_service, s3_options

import shardkit
from shardkit import storage
from shardkit.tools.index import write_indexes

COUNTS = [4, 3, 5]
ALL = [f"s{i:05d}" for i in range(sum(COUNTS))]


def local_indexed(folder: str) -> list[str]:
    urls = write_shards(folder, COUNTS, manifest=False, payload=3000)
    write_indexes(urls)
    return urls


@pytest.fixture(scope="module")
def s3_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    import s3fs

    options = s3_options()
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    bucket = f"shardkit-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    local = str(tmp_path_factory.mktemp("s3ix"))
    local_indexed(local)
    fs.put(local + "/", f"{bucket}/data/", recursive=True)
    return f"s3://{bucket}/data/", options


def test_s3_by_ranged_reads(s3_folder: tuple[str, dict[str, Any]]) -> None:
    folder, options = s3_folder
    assert len(shardkit.Dataset(folder, storage_options=options)) == sum(COUNTS)
    ds = shardkit.IndexedDataset(folder, storage_options=options, max_open=2)
    assert len(ds) == sum(COUNTS)
    order = [11, 0, 6, 3, 9]
    got = [ds[i] for i in order]
    assert [s["__key__"] for s in got] == [ALL[i] for i in order]
    assert all(len(s["bin"]) == 3000 for s in got)
    assert len(ds._ranges._open) == 2


def test_s3_through_the_cache(s3_folder: tuple[str, dict[str, Any]], tmp_path: str) -> None:
    folder, options = s3_folder
    cache = os.path.join(tmp_path, "cache")
    ds = shardkit.IndexedDataset(folder, storage_options=options, cache_dir=cache).decode()
    assert ds[5]["cls"] == 5
    shard = ds.locate(5)[0]
    assert os.path.getsize(storage.cache_path(shard, cache)) > 3000 * 3
    assert [ds[i]["__key__"] for i in range(len(ds))] == ALL


def test_http_by_ranged_reads_and_a_stale_index(tmp_path: str) -> None:
    root, url = http_service()
    local_indexed(root)
    ds = shardkit.IndexedDataset(url + "/")
    assert [ds[i]["__key__"] for i in (7, 2, 10)] == [ALL[7], ALL[2], ALL[10]]
    assert len(shardkit.Dataset(url + "/")) == sum(COUNTS)
    shutil.copy(os.path.join(root, "shard-000000.tar"), os.path.join(root, "shard-000001.tar"))
    with pytest.raises(shardkit.FormatError, match=r"shard-000001\.tar\.idx: stale index"):
        len(shardkit.Dataset(url + "/"))
    with pytest.raises(shardkit.FormatError, match=r"shard-000001\.tar\.idx: stale index"):
        shardkit.IndexedDataset(url + "/")[5]


def _served(folder: str) -> dict[str, bytes]:
    shard = write_shards(folder, [3], manifest=False, payload=20_000)[0]
    write_indexes([shard])
    files = {}
    for path in (shard, shard + ".idx"):
        with open(path, "rb") as f:
            files["/" + os.path.basename(path)] = f.read()
    return files


# The fake server's threads may hit a broken pipe when a client stops reading a body it
# no longer needs (a HEAD-like existence check); that is the test server's, not shardkit's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_cache_copy_without_a_length_is_kept_only_when_proven_whole(tmp_path: str) -> None:
    from helpers.remote import Faults, faulty_server

    files = _served(os.path.join(tmp_path, "src"))
    whole = len(files["/shard-000000.tar"])
    cache = os.path.join(tmp_path, "cache")
    with faulty_server(files, Faults(chunked=True)) as base:  # no Content-Length at all
        ds = shardkit.IndexedDataset(base + "/shard-000000.tar", cache_dir=cache)
        assert [ds[i]["__key__"] for i in range(3)] == ALL[:3]
        assert os.path.getsize(storage.cache_path(base + "/shard-000000.tar", cache)) == whole
    faults = Faults(chunked=True)
    with faulty_server(files, faults) as base:  # every shard body ends cleanly, half-way
        url = base + "/shard-000000.tar"
        ds = shardkit.IndexedDataset(url, cache_dir=os.path.join(tmp_path, "cache2"))
        assert len(ds) == 3  # the index is read whole
        faults.end_after.extend([whole // 2] * 10)
        with pytest.raises(
            shardkit.StorageError,
            match=r"shard-000000\.tar: cannot cache this shard: it could not be shown complete",
        ):
            ds[0]
        assert not os.listdir(os.path.join(tmp_path, "cache2"))  # no partial copy kept


def test_a_ranged_read_is_retried_as_a_stream_is(
    tmp_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One retry policy for remote reads: a 5xx on a ranged read is retried with the same
    backoff, and logged the same way, as one on a streaming read."""
    from helpers.remote import Faults, faulty_server

    files = _served(os.path.join(tmp_path, "src"))
    faults = Faults()
    with faulty_server(files, faults) as base:
        url = base + "/shard-000000.tar"
        ds = shardkit.IndexedDataset(url)
        assert ds[0]["__key__"] == ALL[0]
        faults.statuses[:] = [503]  # the next request: the ranged read of sample 1
        with caplog.at_level(logging.WARNING, logger="shardkit"):
            assert ds[1]["__key__"] == ALL[1]
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 1
    assert re.fullmatch(rf"{re.escape(url)}: \w+ at byte \d+; retry 1 of 5 in 0\.2 s", retries[0])
