"""map_shards and proc --engine: one task per input shard, same bytes on every engine."""

from __future__ import annotations

import functools
import hashlib
import operator
import os
from typing import Any

import blake3
import pytest
from helpers.scale import address_of, s3_bucket, snapshot_s3

import shardkit
import shardkit.tools
from shardkit.cli import main
from shardkit.reader import read_shard

__all__ = ["s3_bucket"]

# Builtins pickle by reference and import everywhere: fit for cluster workers.
ADD_FIELD = functools.partial(operator.or_, {"extra.txt": b"added"})


@pytest.fixture
def inputs(tmp_path: Any) -> list[str]:
    with shardkit.ShardWriter(str(tmp_path / "in-%02d.tar"), max_count=7) as sink:
        for i in range(25):
            sink.write({"__key__": f"k{i:03d}", "txt": f"text {i}", "cls": i % 2})
    return [info.url for info in sink.shards]


def files(paths: list[str]) -> list[bytes]:
    out = []
    for path in paths:
        with open(path, "rb") as f:
            out.append(f.read())
    return out


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_map_shards_same_bytes_on_every_engine(
    engine: str, inputs: list[str], tmp_path: Any
) -> None:
    local = shardkit.map_shards(ADD_FIELD, inputs, str(tmp_path / "local-%02d.tar"), workers=2)
    outputs = [str(tmp_path / f"cluster-{i}.tar") for i in range(len(inputs))]
    seen: list[shardkit.ShardResult] = []
    cluster = shardkit.map_shards(
        ADD_FIELD, inputs, outputs, engine=engine, address=address_of(engine), progress=seen.append
    )
    assert files([r.output for r in local]) == files(outputs)
    assert [r.input for r in cluster] == inputs and len(seen) == len(inputs)
    assert [(r.samples_in, r.samples_out) for r in cluster] == [(7, 7), (7, 7), (7, 7), (4, 4)]
    for result, data in zip(cluster, files(outputs), strict=True):
        assert result.digest == f"blake3:{blake3.blake3(data).hexdigest()}"
        assert result.bytes == len(data)
    sample = next(iter(read_shard(outputs[0])))
    assert sample["extra.txt"] == b"added" and sample["txt"] == b"text 0"


def test_map_shards_resumes_missing_outputs_only(inputs: list[str], tmp_path: Any) -> None:
    pattern = str(tmp_path / "out-%02d.tar")
    first = shardkit.map_shards(ADD_FIELD, inputs, pattern, workers=1)
    os.unlink(first[2].output)
    again = shardkit.map_shards(ADD_FIELD, inputs, pattern, workers=1)
    assert [r.resumed for r in again] == [True, True, False, True]
    assert again[2].digest == first[2].digest


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_map_shards_error_keeps_type_and_names_the_shard(
    engine: str, inputs: list[str], tmp_path: Any
) -> None:
    pattern = str(tmp_path / "out-%02d.tar")
    with pytest.raises(KeyError) as info:
        shardkit.map_shards(
            operator.itemgetter("missing"),
            inputs,
            pattern,
            engine=engine,
            address=address_of(engine),
        )
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "in shard" in notes and any(url in notes for url in inputs)
    assert not [n for n in os.listdir(tmp_path) if n.startswith("out-")]


def test_map_shards_to_s3(inputs: list[str], tmp_path: Any, s3_bucket: str) -> None:
    local = shardkit.map_shards(ADD_FIELD, inputs, str(tmp_path / "local-%02d.tar"), workers=1)
    url = f"s3://{s3_bucket}/mapped"
    # The workers get the endpoint and keys as storage options (not the driver's env).
    options = {
        "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    results = shardkit.map_shards(
        ADD_FIELD,
        inputs,
        f"{url}/local-%02d.tar",
        engine="dask",
        address=address_of("dask"),
        storage_options=options,
    )
    assert [r.digest for r in results] == [r.digest for r in local]
    written = [path for r in local for path in (r.output, r.output + ".idx")]  # shard, index
    expected = {
        os.path.basename(path): hashlib.sha256(data).hexdigest()
        for path, data in zip(written, files(written), strict=True)
    }
    assert snapshot_s3(url) == expected


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_proc_cli_on_a_cluster(
    engine: str, inputs: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pattern = str(tmp_path / "up-%02d.tar")
    command = "tr a-z A-Z < sample.txt > sample.upper.txt"
    argv = ["proc", *inputs, "-e", command, "-o", pattern, "-p", "2", "--engine", engine]
    assert main([*argv, "--address", address_of(engine) or ""]) == 0
    assert "processed 25 samples, wrote 25" in capsys.readouterr().err
    samples = [s for i in range(len(inputs)) for s in read_shard(pattern % i)]
    assert [s["__key__"] for s in samples] == [f"k{i:03d}" for i in range(25)]
    assert samples[3]["upper.txt"] == b"TEXT 3"


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_proc_and_map_shards_read_a_folder_as_dataset_does(
    engine: str, inputs: list[str], tmp_path: Any
) -> None:
    """A folder names its shards (through the one resolver) for ``map_shards`` and for
    ``proc`` on a cluster, as for ``Dataset``; both were: 'cannot open for reading: Is a
    directory' (``proc`` handed the raw folder URL on to the cluster)."""
    folder = str(tmp_path)
    out = tmp_path.parent / f"{tmp_path.name}-out"
    out.mkdir()
    expected = [s["__key__"] for s in shardkit.Dataset(folder, shuffle_shards=False)]
    results = shardkit.map_shards(
        ADD_FIELD, folder, str(out / "m-%02d.tar"), engine=engine, address=address_of(engine)
    )
    assert [r.input for r in results] == inputs
    assert [s["__key__"] for r in results for s in read_shard(r.output)] == expected
    if engine != "local":
        command = "cp sample.txt sample.copy.txt"
        pattern = str(out / "p-%02d.tar")
        done = shardkit.tools.proc(
            folder, command, pattern, engine=engine, address=address_of(engine)
        )
        assert (done.samples_in, done.samples_out) == (25, 25)
        assert [
            s["__key__"] for i in range(len(inputs)) for s in read_shard(pattern % i)
        ] == expected
