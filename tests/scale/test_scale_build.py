"""Builds on a Ray or Dask cluster give the same bytes as a local build (local disk and S3)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from helpers.build import make_corpus
from helpers.scale import address_of, s3_bucket, snapshot_local, snapshot_s3, text_samples

import shardkit
from shardkit import BuildOptions, BuildProgress
from shardkit.errors import ConfigError

__all__ = ["s3_bucket"]  # the fixture, used by name

ENGINES = ["ray", "dask"]
IMAGES = {"max_count": 16, "seed": 7}
PYTHON = {"max_count": 9, "max_size": 4000, "seed": 3}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("scale") / "images"), count=90)


@pytest.fixture(scope="module")
def local_images(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = str(tmp_path_factory.mktemp("ref") / "images")
    shardkit.build(corpus, out, options=BuildOptions(workers=1, **IMAGES))  # type: ignore[arg-type]
    return snapshot_local(out)


def build(source: Any, out: str, engine: str, **options: Any) -> tuple[Any, list[BuildProgress]]:
    seen: list[BuildProgress] = []
    opts = BuildOptions(engine=engine, address=address_of(engine), **options)  # type: ignore[arg-type]
    return shardkit.build(source, out, options=opts, progress=seen.append), seen


@pytest.mark.parametrize("engine", ENGINES)
def test_cluster_images_identical_to_local(
    engine: str, corpus: str, local_images: dict[str, Any], tmp_path: Any
) -> None:
    out = str(tmp_path / "out")
    result, seen = build(corpus, out, engine, **IMAGES)
    assert snapshot_local(out) == local_images
    assert len(result.shards) == 6 and result.samples == 90 and len(result.skipped) == 5
    # One progress stream, as from local workers: monotonic, ending at the total.
    assert [p.samples for p in seen] == sorted(p.samples for p in seen)
    assert seen[-1].samples + seen[-1].skipped == seen[-1].total == 95
    assert not any(n.startswith(".") for n in os.listdir(out))


@pytest.mark.parametrize("engine", ENGINES)
def test_cluster_python_samples_identical_to_local(engine: str, tmp_path: Any) -> None:
    samples = text_samples(60)
    shardkit.build(samples, tmp_path / "local", options=BuildOptions(workers=1, **PYTHON))
    build(samples, str(tmp_path / "cluster"), engine, **PYTHON)
    local = snapshot_local(str(tmp_path / "local"))
    assert len(local) > 5  # several shards cut by max_size, plus the manifest
    assert snapshot_local(str(tmp_path / "cluster")) == local


@pytest.mark.parametrize("engine", ENGINES)
def test_cluster_build_to_s3_identical_to_local(
    engine: str, corpus: str, local_images: dict[str, Any], s3_bucket: str
) -> None:
    url = f"s3://{s3_bucket}/data"
    result, seen = build(corpus, url, engine, **IMAGES)
    assert result.manifest == f"{url}/manifest.json"
    assert snapshot_s3(url) == local_images
    assert seen[-1].shards == 6


def test_engine_options_are_checked_and_left_out_of_the_manifest() -> None:
    with pytest.raises(ConfigError, match="engine must be one of"):
        BuildOptions(engine="spark")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="address applies to"):
        BuildOptions(address="127.0.0.1:6379")
    options = BuildOptions(engine="ray", address="127.0.0.1:1").output_options()
    assert "engine" not in options and "address" not in options


def _multi_field_source(kind: str, root: Any, offline: Any) -> tuple[Any, dict[str, Any]]:
    """A source of samples of several fields and the options it builds with: a folder of
    jpg/txt/flac/mp4 samples with bad files, a --field list to resized TFRecord, a
    Hugging Face Dataset of image bytes and captions."""
    from helpers.build import make_corpus_jpeg, make_flac, make_mp4

    root.mkdir()
    if kind == "samples":
        for i in range(14):
            stem = root / f"{i // 5:02d}" / f"{i:04d}"
            stem.parent.mkdir(exist_ok=True)
            jpg = make_corpus_jpeg(i)
            stem.with_suffix(".jpg").write_bytes(jpg[:200] if i == 3 else jpg)
            stem.with_suffix(".txt").write_text(f"caption {i}")
            flac = make_flac(0.05, seed=i)
            stem.with_suffix(".flac").write_bytes(flac[:60] if i == 8 else flac)
            if i % 4 == 0:
                stem.with_suffix(".mp4").write_bytes(make_mp4(4))
        return str(root), {"layout": "samples", "max_count": 4, "seed": 5}
    if kind == "fields":
        with open(root / "list.csv", "w") as f:
            f.write("path,caption,audio\n")
            for i in range(12):
                (root / f"{i}.jpg").write_bytes(make_corpus_jpeg(i))
                (root / f"{i}.flac").write_bytes(make_flac(0.05, seed=i))
                f.write(f"{i}.jpg,caption {i},{i}.flac\n")
        fields = (("jpg", "path"), ("txt", "caption"), ("flac", "audio"))
        options = {"fields": fields, "format": "tfrecord", "resize": 24, "max_count": 5}
        return str(root / "list.csv"), {**options, "seed": 2}
    images = [{"bytes": make_corpus_jpeg(i), "path": f"{i}.jpg"} for i in range(11)]
    features = offline.Features({"image": offline.Image(), "caption": offline.Value("string")})
    rows = {"image": images, "caption": [f"picture {i}" for i in range(11)]}
    return offline.Dataset.from_dict(rows, features=features), {"max_count": 4, "seed": 9}


@pytest.mark.parametrize("kind", ["samples", "fields", "datasets"])
@pytest.mark.parametrize("engine", ENGINES)
def test_cluster_samples_of_several_fields_identical_to_local(
    engine: str, kind: str, tmp_path: Any, offline: Any
) -> None:
    # Issue 22: every modality with the image path's guarantees, a cluster's included.
    source, options = _multi_field_source(kind, tmp_path / "src", offline)
    local = shardkit.build(source, tmp_path / "local", options=BuildOptions(workers=1, **options))
    result, _ = build(source, str(tmp_path / "cluster"), engine, **options)
    assert result.samples == local.samples > 8 and result.skipped == local.skipped
    want = snapshot_local(str(tmp_path / "local"))
    assert len(want) > 3 and snapshot_local(str(tmp_path / "cluster")) == want
