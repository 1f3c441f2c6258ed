"""What shardkit build writes, read by real TensorFlow and webdataset 1.0.2."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from helpers.build import make_corpus

import shardkit
from shardkit import BuildOptions

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("interop") / "src"), count=30)


def test_tensorflow_reads_the_tfrecord_output(corpus: str, tmp_path: Path) -> None:
    import tensorflow as tf
    from PIL import Image

    out = str(tmp_path / "out")
    options = BuildOptions(format="tfrecord", max_count=8, workers=2)
    result = shardkit.build(corpus, out, options=options)
    assert [s.name for s in result.shards][:2] == ["shard-000000.tfrecord", "shard-000001.tfrecord"]
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }
    files = [os.path.join(out, s.name) for s in result.shards]
    seen = []
    for record in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(record, spec)
        filename = ex["image/filename"].numpy().decode()
        with open(os.path.join(corpus, filename), "rb") as f:
            assert ex["image/encoded"].numpy() == f.read()
        image = tf.io.decode_jpeg(ex["image/encoded"])
        assert image.shape[0] == ex["image/height"] and image.shape[1] == ex["image/width"]
        assert ex["image/format"].numpy() == b"jpeg"
        label = int(ex["image/class/label"])
        assert ex["image/class/text"].numpy().decode() == ["circle", "square", "stripes"][label]
        assert filename.startswith(ex["image/class/text"].numpy().decode() + "/")
        seen.append(filename)
        with Image.open(io.BytesIO(ex["image/encoded"].numpy())) as decoded:
            assert decoded.size == (int(ex["image/width"]), int(ex["image/height"]))
    assert len(seen) == len(set(seen)) == 30


def test_tensorflow_reads_a_tfrecord_of_samples_of_several_fields(tmp_path: Path) -> None:
    """A --field list built to TFRecord (issue 22: images resized, a caption, a FLAC clip):
    tf.data parses each field as a bytes feature holding what the tar build holds, and
    decodes the resized JPEG at the size asked."""
    import tensorflow as tf
    from helpers.build import make_corpus_jpeg, make_flac

    with open(tmp_path / "list.csv", "w") as f:
        f.write("path,caption,audio\n")
        for i in range(6):
            (tmp_path / f"{i}.jpg").write_bytes(make_corpus_jpeg(i))
            (tmp_path / f"{i}.flac").write_bytes(make_flac(0.05, seed=i))
            f.write(f"{i}.jpg,caption {i},{i}.flac\n")
    fields = (("jpg", "path"), ("txt", "caption"), ("flac", "audio"))
    common = {"fields": fields, "resize": 24, "resize_mode": "center-crop", "workers": 1}
    built = {}
    for fmt in ("tar", "tfrecord"):
        out = str(tmp_path / fmt)
        shardkit.build(str(tmp_path / "list.csv"), out, options=BuildOptions(format=fmt, **common))
        built[fmt] = {s["__key__"]: s for s in shardkit.Dataset(out)}
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in ("jpg", "txt", "flac")}
    files = sorted(str(p) for p in (tmp_path / "tfrecord").glob("*.tfrecord"))
    seen = []
    for record in tf.data.TFRecordDataset(files):
        ex = {k: v.numpy() for k, v in tf.io.parse_single_example(record, spec).items()}
        tar = next(s for s in built["tar"].values() if s["txt"] == ex["txt"])
        assert (ex["jpg"], ex["flac"]) == (tar["jpg"], tar["flac"])
        assert tuple(tf.io.decode_jpeg(ex["jpg"]).shape) == (24, 24, 3)
        seen.append(ex["txt"].decode())
    assert sorted(seen) == [f"caption {i}" for i in range(6)]


# webdataset 1.0.2 leaves its shard files for the garbage collector to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_webdataset_reads_and_decodes_the_tar_output(corpus: str, tmp_path: Path) -> None:
    import numpy as np
    import webdataset as wds

    out = str(tmp_path / "out")
    result = shardkit.build(corpus, out, options=BuildOptions(max_count=7, workers=2))
    urls = [os.path.join(out, s.name) for s in result.shards]
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("rgb8")
    rows = list(dataset.to_tuple("jpg", "cls", "json", "__key__"))
    assert len(rows) == 30
    for image, label, meta, key in rows:
        assert isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] == 3
        assert label == meta["label"] and key.startswith(meta["class"] + "/")
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    assert sum(s["samples"] for s in manifest["shards"]) == 30
