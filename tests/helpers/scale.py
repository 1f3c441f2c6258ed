"""Helpers for the scale-out tests: cluster addresses, S3 buckets, output snapshots."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

HOW = (
    "run the tests through scripts/test-services scripts/cluster-services "
    "(as `make test` and .ci/run do)"
)


def ray_address() -> str:
    address = os.environ.get("SHARDKIT_TEST_RAY_ADDRESS")
    if not address:
        pytest.fail(f"no Ray cluster: SHARDKIT_TEST_RAY_ADDRESS is not set; {HOW}", pytrace=False)
    return address


def dask_address() -> str:
    address = os.environ.get("SHARDKIT_TEST_DASK_ADDRESS")
    if not address:
        pytest.fail(f"no Dask cluster: SHARDKIT_TEST_DASK_ADDRESS is not set; {HOW}", pytrace=False)
    return address


def address_of(engine: str) -> str | None:
    return {"ray": ray_address, "dask": dask_address}[engine]() if engine != "local" else None


@pytest.fixture
def s3_bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket on the test S3 server, found through the usual AWS_* variables."""
    import s3fs

    endpoint = os.environ.get("SHARDKIT_TEST_S3_ENDPOINT")
    if not endpoint or not os.environ.get("AWS_ACCESS_KEY_ID"):
        pytest.fail(f"no S3 server: SHARDKIT_TEST_S3_ENDPOINT is not set; {HOW}", pytrace=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    name = f"scale-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
    fs.mkdir(name)
    yield name
    fs.rm(name, recursive=True)


def snapshot_local(folder: str) -> dict[str, Any]:
    """sha256 of every file in ``folder``; the manifest as a dict without its timing."""
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = _digest(name, f.read())
    return out


def snapshot_s3(url: str) -> dict[str, Any]:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    root = url.removeprefix("s3://").rstrip("/")
    paths = sorted(fs.find(root))  # every object, hidden ones under OUT/.shardkit-build/ too
    return {p[len(root) + 1 :]: _digest(p, fs.cat_file(p)) for p in paths}


def _digest(name: str, data: bytes) -> Any:
    if name.endswith("manifest.json"):
        manifest = json.loads(data)
        manifest.pop("timing")
        return manifest
    return hashlib.sha256(data).hexdigest()


def text_samples(count: int) -> list[dict[str, Any]]:
    """Small Python samples (a map-style dataset: a list)."""
    return [
        {"__key__": f"s{i:05d}", "txt": f"sample {i} " * (i % 7 + 1), "cls": i % 3}
        for i in range(count)
    ]
