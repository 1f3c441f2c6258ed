"""gs:// shards on a GCS API server (fake-gcs-server, started by scripts/test-services),
reached the usual gcsfs ways: STORAGE_EMULATOR_HOST in the environment, or an
``endpoint_url`` in storage_options. shardkit has no switch of its own for it."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import Any

import pytest
from helpers.build import make_corpus
from helpers.pipeline import sample, write_shards
from helpers.remote import cutting_proxy, gcs_options

import shardkit
from shardkit import BuildOptions, Dataset, ShardWriter, StorageError
from shardkit.cli import main

BIG = 700_000  # payload bytes per sample: 3 samples make a shard of about 2 MiB


class Interrupted(Exception):
    """Stands for whatever stops a writer half-way (a crash, Ctrl-C, a failed source)."""


def gcs() -> Any:
    import gcsfs

    return gcsfs.GCSFileSystem(**gcs_options(), skip_instance_cache=True)


def fields(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples without the shard URL they came from (which differs between stores)."""
    return [{k: v for k, v in item.items() if k != "__url__"} for item in items]


@pytest.fixture(scope="module")
def bucket() -> str:
    """A fresh, empty bucket."""
    name = f"shardkit-{uuid.uuid4().hex[:10]}"
    gcs().mkdir(name)
    return name


@pytest.fixture(scope="module")
def local_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Four local tar shards of 3 samples (~2 MiB each) written by ShardWriter."""
    folder = tmp_path_factory.mktemp("local")
    with ShardWriter(str(folder / "shard-%06d.tar"), max_count=3) as sink:
        for i in range(12):
            sink.write(sample(i, payload=BIG))
    return str(folder)


def test_shard_writer_to_gs_then_dataset_reads_it_back(bucket: str, local_shards: str) -> None:
    base = f"gs://{bucket}/written"
    with ShardWriter(base + "/shard-%06d.tar", max_count=3) as sink:
        for i in range(12):
            sink.write(sample(i, payload=BIG))
    assert [s.url for s in sink.shards] == [f"{base}/shard-{i:06d}.tar" for i in range(4)]
    fs = gcs()
    for i in range(4):  # the objects are the bytes a local write gives
        with open(os.path.join(local_shards, f"shard-{i:06d}.tar"), "rb") as f:
            assert fs.cat_file(f"{bucket}/written/shard-{i:06d}.tar") == f.read()
    remote = list(Dataset(base + "/shard-{000000..000003}.tar"))
    local = list(Dataset(os.path.join(local_shards, "shard-{000000..000003}.tar")))
    assert len(remote) == 12 and fields(remote) == fields(local)
    assert remote[5]["__url__"] == f"{base}/shard-000001.tar"
    # A folder without a manifest is listed: its shards in name order.
    folder = Dataset(base + "/")
    assert folder.shards.urls == tuple(s.url for s in sink.shards)


def test_explicit_endpoint_in_storage_options(
    bucket: str, local_shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    options = gcs_options()
    base = f"gs://{bucket}/explicit"
    with ShardWriter(base + "/part-%06d.tfrecord", max_count=5, storage_options=options) as w:
        for i in range(12):
            w.write({"__key__": f"k{i:03d}", "cls": i})
    got = list(Dataset(base + "/", storage_options=options).decode().to_tuple("__key__", "cls"))
    assert got == [(f"k{i:03d}", i) for i in range(12)]


def test_folder_with_a_manifest_and_ranged_reads(bucket: str, tmp_path: Any) -> None:
    write_shards(str(tmp_path), [4, 3, 3], jpeg=True)
    gcs().put(str(tmp_path) + "/", f"{bucket}/data/", recursive=True)
    folder = Dataset(f"gs://{bucket}/data/")  # finds manifest.json in the listing
    assert folder.shards.counts == (4, 3, 3) and len(folder) == 10
    decoded = list(folder.decode("rgb8").to_tuple("jpg", "cls"))
    assert decoded[7][0].shape == (16, 24, 3) and [c for _, c in decoded] == list(range(10))


def test_cli_cat_to_gs_then_verify_and_stats(
    bucket: str, local_shards: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"gs://{bucket}/cli/all.tar"
    inputs = [os.path.join(local_shards, f"shard-{i:06d}.tar") for i in range(4)]
    assert main(["cat", *inputs, "-o", url]) == 0
    assert main(["verify", url]) == 0
    assert main(["stats", "--json", url]) == 0
    out = capsys.readouterr().out
    stats = json.loads(out[out.index("{") :])
    assert stats["samples"] == 12, stats
    got = [s["__key__"] for s in Dataset(url)]
    assert got == [f"s{i:05d}" for i in range(12)]


def test_cache_dir_keeps_a_copy_of_each_gs_shard(
    bucket: str, local_shards: str, tmp_path: Any
) -> None:
    fs = gcs()
    fs.put(os.path.join(local_shards, "shard-000000.tar"), f"{bucket}/cached/a.tar")
    url, cache = f"gs://{bucket}/cached/a.tar", str(tmp_path / "cache")
    first = list(Dataset(url, cache_dir=cache))
    (name,) = os.listdir(cache)
    with open(os.path.join(cache, name), "rb") as f:
        assert f.read() == fs.cat_file(f"{bucket}/cached/a.tar")
    fs.rm(f"{bucket}/cached/a.tar")  # now only the cached copy can answer
    assert fields(list(Dataset(url, cache_dir=cache))) == fields(first)


def test_read_survives_connections_cut_mid_shard(bucket: str) -> None:
    with ShardWriter(f"gs://{bucket}/big/shard-%06d.tar", max_count=None) as sink:
        for i in range(15):  # one ~10 MiB shard: two 8 MiB ranged blocks
            sink.write(sample(i, payload=BIG))
    assert sink.shards[0].bytes > 8 << 20
    url = sink.shards[0].url
    cuts, seen = [100_000, 3_000_000], []  # response bytes before the connection drops
    with cutting_proxy(gcs_options()["endpoint_url"], cuts, seen) as proxy:
        options = {"endpoint_url": proxy, "token": "anon"}
        got = list(Dataset(url, storage_options=options))
    assert cuts == [], seen  # both connections were cut
    ranges = [line.split("=", 1)[1] for line in seen if line.lower().startswith("range:")]
    assert any(not r.startswith("0-") for r in ranges), seen  # read in ranged blocks
    assert [s["__key__"] for s in got] == [f"s{i:05d}" for i in range(15)]
    want = [hashlib.sha256(sample(i, payload=BIG)["bin"]).hexdigest() for i in range(15)]
    assert [hashlib.sha256(s["bin"]).hexdigest() for s in got] == want


@pytest.mark.parametrize("payload", [1000, 7 << 20], ids=["before-upload", "mid-upload"])
def test_an_interrupted_write_leaves_no_object(bucket: str, payload: int) -> None:
    # 1000 bytes: gcsfs has not started the upload yet (it would on close());
    # 7 MiB: a resumable upload is under way (5 MiB sent). Neither may become an object.
    base = f"gs://{bucket}/cut-{payload}"
    with pytest.raises(Interrupted), ShardWriter(base + "/shard-%06d.tar", max_count=2) as sink:
        for i in range(5):
            sink.write(sample(i, payload=payload))
        raise Interrupted
    fs = gcs()
    fs.invalidate_cache()
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/cut-{payload}", refresh=True))
    committed = ["shard-000000.tar", "shard-000001.tar"]  # not shard-000002.tar
    assert names == sorted([*committed, *(name + ".idx" for name in committed)])
    assert [s["__key__"] for s in Dataset(base + "/")] == [f"s{i:05d}" for i in range(4)]


def test_a_missing_object_is_a_one_line_error_naming_the_url(
    bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"gs://{bucket}/nowhere/shard-000000.tar"
    with pytest.raises(StorageError) as info:
        list(Dataset(url))
    assert info.value.url == url and "\n" not in str(info.value) and url in str(info.value)
    assert main(["cat", url, "-o", os.devnull]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"Error: {url}: no such file", err
    assert main(["verify", url]) == 1  # a problem found, reported on its shard's line
    assert capsys.readouterr().out == f"{url}\t-\t-\tcannot open: no such file\n"
    gone = f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/shard-000000.tar"
    with pytest.raises(StorageError, match="no such file") as info:
        list(Dataset(gone))
    assert info.value.url == gone


def test_gcsfs_http_errors_are_transient_only_when_5xx() -> None:
    from gcsfs.retry import HttpError

    from shardkit.storage import is_transient

    assert is_transient(HttpError({"code": 503, "message": "backend error"}))
    assert is_transient(HttpError({"code": 429, "message": "slow down"}))
    assert not is_transient(HttpError({"code": 400, "message": "bad request"}))


def test_a_gcs_403_is_not_retried() -> None:
    from gcsfs.retry import validate_response

    from shardkit.storage import is_transient

    with pytest.raises(OSError) as denied:
        validate_response(403, b'{"error": {"message": "no access"}}', "b/x.tar")
    assert not is_transient(denied.value)
    assert is_transient(OSError("Connection reset by peer"))


# --------------------------------------------------------------------------- remote build
# shardkit.build into gs://: workers write straight into the bucket (builder/_store.py),
# reaching gcsfs through the environment (STORAGE_EMULATOR_HOST, FSSPEC_GS_TOKEN).


def _snapshot(files: dict[str, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, data in files.items():
        if name == "manifest.json":
            manifest = json.loads(data)
            manifest.pop("timing")
            out[name] = manifest
        else:
            out[name] = hashlib.sha256(data).hexdigest()
    return out


def test_build_to_gs_is_byte_identical_to_a_local_build(bucket: str, tmp_path: Any) -> None:
    corpus = make_corpus(str(tmp_path / "images"), count=40)
    options = BuildOptions(workers=1, max_count=16, seed=7)
    local = str(tmp_path / "local")
    shardkit.build(corpus, local, options=options)
    url = f"gs://{bucket}/built"
    result = shardkit.build(corpus, url, options=options)
    assert result.manifest == f"{url}/manifest.json"
    fs = gcs()
    remote = {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in fs.ls(f"{bucket}/built", refresh=True)}
    names = sorted(os.listdir(local))
    assert len(names) == 8  # three shards, their indexes, the manifest, the skipped list
    local_files = {}
    for name in names:
        with open(os.path.join(local, name), "rb") as f:
            local_files[name] = f.read()
    assert _snapshot(remote) == _snapshot(local_files)
