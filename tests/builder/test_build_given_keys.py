"""A key a Python dataset gives twice is one BuildError, "the key ... is written twice",
and no manifest: whether the two samples are written one after the other (a tar reader
would merge them; this was a FormatError from the shard's assembly, or a count that did
not match) or apart, and for every output: tar or TFRecord (whose repeats were not
checked at all), in a folder or in an object store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.scale import s3_bucket

import shardkit
from shardkit import BuildOptions
from shardkit.errors import BuildError

__all__ = ["s3_bucket"]

CASES = {
    "aabc": r"the key 'a' is written twice \(samples 0 and 1 written, one after the other",
    "abcc": r"the key 'c' is written twice \(samples 2 and 3 written, one after the other",
    "abca": (
        r"the key 'a' is written twice \(shard-000000\.\w+ sample 0 and shard-000001\.\w+ "
        r"sample 0; 1 sample written again in all\)"
    ),
}


def _samples(keys: str) -> list[dict[str, str]]:
    return [{"__key__": key, "txt": f"{i}"} for i, key in enumerate(keys)]


@pytest.mark.parametrize("keys", sorted(CASES))
@pytest.mark.parametrize("format", ["tar", "tfrecord"])
def test_a_key_given_twice_is_one_build_error(tmp_path: Path, format: str, keys: str) -> None:
    options = BuildOptions(workers=1, max_count=3, shuffle=False, format=format)  # type: ignore[arg-type]
    out = tmp_path / "out"
    with pytest.raises(BuildError, match=CASES[keys]) as info:
        shardkit.build(_samples(keys), str(out), options=options)
    assert "must be unique; no manifest.json was written" in str(info.value)
    assert info.value.url == str(out) and not (out / "manifest.json").exists()


def test_keys_given_once_build_and_a_generator_is_checked_too(tmp_path: Path) -> None:
    options = BuildOptions(workers=2, max_count=2, shuffle=False, format="tfrecord")
    assert shardkit.build(_samples("abcdef"), str(tmp_path / "ok"), options=options).samples == 6
    keys = [s["__key__"] for s in shardkit.Dataset(str(tmp_path / "ok"))]
    assert keys == list("abcdef")
    generator = (sample for sample in _samples("abcdbf"))
    with pytest.raises(BuildError, match="the key 'b' is written twice"):
        shardkit.build(generator, str(tmp_path / "gen"), options=options)


def test_a_key_given_twice_into_an_object_store_is_one_build_error(s3_bucket: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)
    options = BuildOptions(workers=1, max_count=3, shuffle=False)
    for keys, pattern in CASES.items():
        with pytest.raises(BuildError, match=pattern):
            shardkit.build(_samples(keys), f"s3://{s3_bucket}/{keys}", options=options)
        assert not fs.exists(f"{s3_bucket}/{keys}/manifest.json")
    shardkit.build(_samples("abcd"), f"s3://{s3_bucket}/ok", options=options)
    assert fs.exists(f"{s3_bucket}/ok/manifest.json")
