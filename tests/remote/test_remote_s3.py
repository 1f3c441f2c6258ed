"""s3:// shards on a real S3 server (SeaweedFS, started by scripts/test-services); gs:// URL
handling without a server (gs:// against a GCS API server: test_remote_gcs.py)."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
import uuid
from typing import Any

import pytest
from helpers.pipeline import keys, write_shards
from helpers.remote import cutting_proxy, s3_options

from shardkit import Dataset, ShardWriter
from shardkit.errors import StorageError
from shardkit.pipeline import resolve_source
from shardkit.pipeline._urls import parse_manifest

ALL = [f"s{i:05d}" for i in range(10)]


@pytest.fixture(scope="module")
def s3_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """A fresh bucket holding 3 tar shards (10 samples) and a manifest, uploaded with
    s3fs: (``s3://bucket/data``, storage options)."""
    import s3fs

    options = s3_options()
    fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    bucket = f"shardkit-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    local = str(tmp_path_factory.mktemp("s3"))
    write_shards(local, [4, 3, 3], jpeg=True)
    fs.put(local + "/", f"{bucket}/data/", recursive=True)
    return f"s3://{bucket}/data", options


def test_read_from_s3(s3_data: tuple[str, dict[str, Any]]) -> None:
    base, options = s3_data
    pattern = base + "/shard-{000000..000002}.tar"
    assert keys(list(Dataset(pattern, storage_options=options))) == ALL
    folder = Dataset(base + "/", storage_options=options)  # lists it, finds the manifest
    assert folder.shards.counts == (4, 3, 3) and len(folder) == 10
    decoded = list(folder.decode("rgb8").to_tuple("jpg", "cls"))
    assert decoded[7][0].shape == (16, 24, 3) and decoded[7][1] == 7


def test_endpoint_and_credentials_from_the_environment(
    s3_data: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, options = s3_data
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    assert keys(list(Dataset(base + "/manifest.json"))) == ALL


def test_a_wrong_secret_is_refused(s3_data: tuple[str, dict[str, Any]]) -> None:
    # In a subprocess: a refused client left to the garbage collector has been seen to
    # stall later uploads of other clients in the same process (aiobotocore + SeaweedFS).
    base, options = s3_data
    code = (
        "import sys, shardkit\n"
        "try:\n"
        f"    list(shardkit.Dataset({base + '/shard-000000.tar'!r}, storage_options="
        f"{ {**options, 'secret': 'wrong'}!r}))\n"
        "except shardkit.StorageError as exc:\n"
        "    print(type(exc).__name__, exc.url)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"StorageError {base}/shard-000000.tar", out.stderr


def test_dataloader_workers_over_s3(s3_data: tuple[str, dict[str, Any]]) -> None:
    from torch.utils.data import DataLoader

    base, options = s3_data
    ds = Dataset(base + "/manifest.json", storage_options=options).shuffle(3).to_tuple("__key__")
    ds = pickle.loads(pickle.dumps(ds))
    seen = [k for (batch,) in DataLoader(ds, batch_size=3, num_workers=2) for k in batch]
    assert sorted(seen) == ALL


def test_write_shards_to_s3_then_read_them_back(s3_data: tuple[str, dict[str, Any]]) -> None:
    base, options = s3_data
    pattern = base + "/written/part-%06d.tfrecord"
    with ShardWriter(pattern, max_count=4, storage_options=options) as sink:
        for i in range(9):
            sink.write({"__key__": f"w{i}", "cls": i})
    got = list(Dataset(base + "/written/", storage_options=options).decode().to_tuple("cls"))
    assert got == [(i,) for i in range(9)]


def test_an_upload_the_server_never_answers_is_sent_again(
    s3_data: tuple[str, dict[str, Any]],
) -> None:
    """Regression (the flaky hang of the test above under load): botocore asks for
    "100 Continue" on every upload, and aiohttp arms no read timeout while it waits for
    one, so a PUT the server never answered waited forever. Now the body goes at once,
    ``read_timeout`` bounds the wait and the upload is sent again."""
    base, options = s3_data
    requests: list[str] = []
    lost = [f"PUT /{base.removeprefix('s3://')}/lost/part-000001.tfrecord"]
    with cutting_proxy(options["endpoint_url"], [], requests, swallow=lost) as proxy:
        slow = {**options, "endpoint_url": proxy, "config_kwargs": {"read_timeout": 2}}
        done = threading.Event()

        def write() -> None:
            pattern = base + "/lost/part-%06d.tfrecord"
            with ShardWriter(pattern, max_count=4, storage_options=slow) as sink:
                for i in range(9):
                    sink.write({"__key__": f"w{i}", "cls": i})
            done.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(200)  # generous: the bug waits forever
        assert done.is_set(), "the upload the server never answered was waited for forever"
    assert not lost  # the PUT was swallowed once
    got = list(Dataset(base + "/lost/", storage_options=options).decode().to_tuple("cls"))
    assert got == [(i,) for i in range(9)]


def test_gs_urls_expand_and_join_without_a_server() -> None:
    # URL handling only (brace expansion, manifest joins, pickling): nothing is opened
    # until iteration, so no server is needed.
    shards = resolve_source("gs://bucket/train/shard-{000..002}.tar")
    assert shards.urls == tuple(f"gs://bucket/train/shard-00{i}.tar" for i in range(3))
    manifest = parse_manifest({"shards": [{"name": "a.tar", "samples": 2}]}, base="gs://b/d")
    assert manifest.urls == ("gs://b/d/a.tar",) and manifest.counts == (2,)
    ds = Dataset("gs://bucket/train/shard-{000..002}.tar", storage_options={"token": "anon"})
    assert pickle.loads(pickle.dumps(ds)).shards == shards
    assert os.path.basename(ds.shards.urls[-1]) == "shard-002.tar"


def test_an_s3_configuration_error_is_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    """A missing profile or a bad endpoint is not a network hiccup: one StorageError at
    once, not five retries over 6 s ending in "gave up after 5 retries". No server needed."""
    for options in ({"profile": "no-such-profile"}, {"endpoint_url": "htp://nowhere:1"}):
        with caplog.at_level(logging.WARNING), pytest.raises(StorageError) as info:
            list(Dataset("s3://bucket/shard.tar", storage_options=options))
        assert "gave up" not in str(info.value)
    assert not [r for r in caplog.records if "retry" in r.getMessage()]
