"""Resizing in the workers, and shards assembled exactly from chunks."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest_build import make_corpus, make_png, read_samples, snapshot, write

import shardkit
from shardkit import BuildOptions


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    src = make_corpus(str(tmp_path_factory.mktemp("resize") / "src"), count=90)
    write(src, "square/big.png", make_png(7, (300, 120)))
    return src


def _size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size  # type: ignore[no-any-return]


def test_resize_sets_the_shorter_side(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = shardkit.build(corpus, out, options=BuildOptions(resize=40, workers=2, quality=80))
    assert result.samples == 91 and len(result.skipped) == 5
    samples = read_samples(out)
    for sample in samples:
        ext = "png" if "png" in sample else "jpg"
        width, height = _size(sample[ext])
        assert min(width, height) == 40, sample["__key__"]
    big = next(s for s in samples if s["__key__"] == "square/big")
    assert _size(big["png"]) == (100, 40)


def test_max_side_only_shrinks_and_keeps_small_images_as_they_are(
    corpus: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    shardkit.build(corpus, out, options=BuildOptions(max_side=100, workers=1))
    for sample in read_samples(out):
        ext = "png" if "png" in sample else "jpg"
        width, height = _size(sample[ext])
        assert max(width, height) <= 100
        with open(os.path.join(corpus, json.loads(sample["json"])["path"]), "rb") as f:
            original = f.read()
        if max(_size(original)) <= 100:
            assert sample[ext] == original


def test_assembled_shards_are_exact_and_the_same_for_any_worker_count(
    corpus: str, tmp_path: Path
) -> None:
    snaps = []
    for workers in (1, 2, 3):
        out = str(tmp_path / f"w{workers}")
        options = BuildOptions(resize=48, max_size=30_000, max_count=12, workers=workers)
        result = shardkit.build(corpus, out, options=options)
        for shard in result.shards:
            assert shard.bytes == os.path.getsize(os.path.join(out, shard.name)) <= 30_000
            assert shard.samples <= 12
        snaps.append(snapshot(out))
    assert snaps[0] == snaps[1] == snaps[2]
    sizes = [len(read_samples(str(tmp_path / "w1")))]
    assert sizes == [91]


def test_resized_tfrecord_has_the_new_height_and_width(corpus: str, tmp_path: Path) -> None:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    out = str(tmp_path / "out")
    options = BuildOptions(resize=36, format="tfrecord", workers=2)
    result = shardkit.build(corpus, out, options=options)
    count = 0
    for shard in result.shards:
        with open(os.path.join(out, shard.name), "rb") as f:
            for _, record in iter_records(f):
                features = decode_example(record)
                width, height = _size(features["image/encoded"][0])
                assert (width, height) == (features["image/width"][0], features["image/height"][0])
                assert min(width, height) == 36
                count += 1
    assert count == 91


def test_interrupted_assembly_resumes_to_identical_output(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    options = BuildOptions(resize=32, max_count=10, workers=1)

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(corpus, out, options=options, progress=stop)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    resumed = shardkit.build(corpus, out, options=options)
    fresh = str(tmp_path / "fresh")
    shardkit.build(corpus, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)
    assert resumed.samples == 91
