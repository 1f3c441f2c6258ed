"""A list's fields (``--field``, a parquet's bytes columns) go through the one encode path a
folder's sample of several files takes: TFRecord output and the image options
(``--resize``, ``--max-side``, ``--encode``) apply to them too (tar only before)."""

from __future__ import annotations

import csv
import gc
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
import webdataset as wds
from helpers.build import (
    make_corpus_jpeg,
    make_png,
    read_samples,
    resume_after,
    run_cli,
    snapshot,
    write,
)

import shardkit
from shardkit import BuildOptions
from shardkit.codecs import image_size

FIELDS = ["--field", "jpg=url", "--field", "txt=caption", "--field", "flac=audio"]


def _flac(seed: int) -> bytes:
    samples = np.random.default_rng(seed).uniform(-0.5, 0.5, 600).astype("float32")
    buffer = io.BytesIO()
    sf.write(buffer, samples, 8000, format="FLAC")
    return buffer.getvalue()


def _jpeg(seed: int, size: tuple[int, int]) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture
def captions(tmp_path: Path) -> tuple[str, dict[str, dict[str, bytes]]]:
    """A list of rows: an image (one cut short), a caption, a FLAC clip, a label and a
    score; returns its path and the good rows' files by key."""
    src = str(tmp_path / "src")
    rows, good = [], {}
    for i in range(9):
        image = make_corpus_jpeg(i) if i % 3 else make_png(i, (90, 70))
        name = f"img/{i:03d}.{'jpg' if i % 3 else 'png'}"
        write(src, name, image[:200] if i == 4 else image)
        write(src, f"audio/{i}.flac", _flac(i))
        rows.append(
            {
                "url": name,
                "caption": f"a photo {i}, ünïcödé",
                "audio": f"audio/{i}.flac",
                "label": ["cat", "dog"][i % 2],
                "score": i / 4,
            }
        )
        if i != 4:
            good[f"img/{i:03d}"] = {"image": image, "flac": _flac(i)}
    path = f"{src}/list.csv"
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path, good


def _webdataset(out: str) -> dict[str, dict[str, Any]]:
    urls = sorted(f"{out}/{name}" for name in os.listdir(out) if name.endswith(".tar"))
    with warnings.catch_warnings():  # webdataset leaves its files to the collector
        warnings.simplefilter("ignore", ResourceWarning)
        read = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
        gc.collect()
    return {sample["__key__"]: sample for sample in read}


def _fields(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if not k.startswith("__")}


def test_the_same_list_as_tar_and_as_tfrecord_holds_the_same_field_bytes(
    captions: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, good = captions
    args = [*FIELDS, "--field", "cls=label", "--max-count", "3", "--workers", "2"]
    tar, tfrecord = str(tmp_path / "tar"), str(tmp_path / "tfrecord")
    assert run_cli(path, tar, *args).returncode == 0
    done = run_cli(path, tfrecord, *args, "--format", "tfrecord")
    assert done.returncode == 0, done.stderr  # refused in one line before
    assert "skipped img/004.jpg: field 'jpg': truncated JPEG" in done.stdout
    assert any(name.endswith(".tfrecord") for name in os.listdir(tfrecord))
    ours = {s["__key__"]: s for s in shardkit.Dataset(tar)}
    theirs = _webdataset(tar)
    records = {s["__key__"]: s for s in shardkit.Dataset(tfrecord)}
    assert sorted(ours) == sorted(theirs) == sorted(records) == sorted(good)
    for key, files in good.items():
        i = int(key[-3:])
        image = "jpg" if i % 3 else "png"
        expected = {
            image: files["image"],
            "txt": f"a photo {i}, ünïcödé".encode(),
            "flac": files["flac"],
            "cls": str(i % 2).encode(),
        }
        meta = {"path": f"img/{i:03d}.{image}", "class": ["cat", "dog"][i % 2], "label": i % 2}
        meta["score"] = i / 4
        for sample in (ours[key], theirs[key]):
            assert json.loads(sample.pop("json")) == meta
            assert _fields(sample) == expected
        record = records[key]
        assert json.loads(record.pop("json")) == meta
        assert _fields(record) == {**expected, "cls": i % 2}  # an int64 feature


def test_resize_applies_to_the_image_fields_and_leaves_the_others(
    captions: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, good = captions
    out = str(tmp_path / "out")
    done = run_cli(path, out, "--field", "jpg=url", "--field", "txt=caption", "--resize", "64")
    assert done.returncode == 0, done.stderr
    samples = {s["__key__"]: s for s in read_samples(out)}
    assert sorted(samples) == sorted(good)
    for key, sample in samples.items():
        i = int(key[-3:])
        image = "jpg" if i % 3 else "png"
        assert [k for k in sample if not k.startswith("__")] == [image, "txt", "json"]
        assert min(image_size(sample[image])) == 64  # the shorter side
        assert sample[image] != good[key]["image"]
        assert sample["txt"] == f"a photo {i}, ünïcödé".encode()  # untouched


def test_encode_and_max_side_with_fields_in_a_tfrecord_build(
    captions: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, good = captions
    out = str(tmp_path / "out")
    options = BuildOptions(
        fields={"jpg": "url", "flac": "audio"}, encode="webp", max_side=32, format="tfrecord"
    )
    result = shardkit.build(path, out, options=options)
    assert result.samples == len(good)
    for sample in shardkit.Dataset(out):
        assert sorted(_fields(sample)) == ["flac", "json", "webp"]
        assert sample["webp"][8:12] == b"WEBP" and max(image_size(sample["webp"])) == 32
        assert sample["flac"] == good[sample["__key__"]]["flac"]  # audio is never re-encoded


def test_parquet_bytes_columns_build_tfrecord_and_take_resize(tmp_path: Path) -> None:
    images = [_jpeg(i, (80 + 8 * i, 60)) for i in range(5)]
    cells = pa.StructArray.from_arrays(
        [pa.array(images, pa.binary()), pa.array([f"p/{i}.jpg" for i in range(5)])],
        ["bytes", "path"],
    )
    path = str(tmp_path / "hf.parquet")
    pq.write_table(pa.table({"image": cells, "caption": [f"c{i}" for i in range(5)]}), path)
    plain = shardkit.build(path, tmp_path / "plain", options=BuildOptions(format="tfrecord"))
    resized = shardkit.build(
        path, tmp_path / "resized", options=BuildOptions(format="tfrecord", resize=30)
    )
    assert plain.samples == resized.samples == 5
    for sample in shardkit.Dataset(str(tmp_path / "plain")):
        i = int(sample["__key__"])
        assert sample["jpg"] == images[i]  # the parquet's bytes, as they are
        assert json.loads(sample["json"]) == {"caption": f"c{i}"}
    for sample in shardkit.Dataset(str(tmp_path / "resized")):
        assert image_size(sample["jpg"])[1] == 30


def test_a_resumed_fields_tfrecord_build_gives_the_same_bytes(
    captions: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    path, _ = captions
    options = BuildOptions(
        fields={"jpg": "url", "txt": "caption", "cls": "label"},
        format="tfrecord",
        resize=40,
        max_count=2,
        workers=1,
        seed=7,
    )
    whole = str(tmp_path / "whole")
    shardkit.build(path, whole, options=options)
    resumed = str(tmp_path / "resumed")
    resume_after(path, resumed, options, shards=2)
    assert snapshot(resumed) == snapshot(whole)
    assert sum(name.endswith(".tfrecord") for name in snapshot(whole)) == 4
