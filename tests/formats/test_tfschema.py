"""The shardkit TFRecord schema, from a user's side: build, convert, read back, tf.data.

Issue #13 items 2, 3, 4 and 9.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, write

import shardkit
from shardkit import BuildOptions, ShardWriter
from shardkit.codecs import Decoder
from shardkit.reader import read_shard

pytestmark = pytest.mark.interop

# One feature spec for every TFRecord shardkit writes from image samples.
SPEC_NAMES = {
    "__key__": "string",
    "image/encoded": "string",
    "image/format": "string",
    "image/height": "int64",
    "image/width": "int64",
    "image/class/label": "int64",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardkit", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("schema") / "src"), count=12, bad=False)


def parse_all(files: list[str], extra: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Every record parsed by tf.data with the schema's spec (+ ``extra``), by key."""
    import tensorflow as tf

    spec = {name: tf.io.FixedLenFeature([], getattr(tf, kind)) for name, kind in SPEC_NAMES.items()}
    spec.update(extra or {})
    rows = {}
    for record in tf.data.TFRecordDataset(files):
        parsed = {k: v.numpy() for k, v in tf.io.parse_single_example(record, spec).items()}
        rows[parsed["__key__"].decode()] = parsed
    return rows


def jpegs(corpus: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), corpus)
        for d, _, names in os.walk(corpus)
        for n in names
        if n.endswith(".jpg")
    )


def shard_files(out: str) -> list[str]:
    return sorted(os.path.join(out, n) for n in os.listdir(out) if n.endswith(".tfrecord"))


def test_tf_data_parses_build_and_convert_output_with_one_spec(corpus: str, tmp_path: Path) -> None:
    built, tar_out, converted = (str(tmp_path / name) for name in ("tf", "tar", "conv"))
    assert cli("build", corpus, built, "--format", "tfrecord").returncode == 0
    assert cli("build", corpus, tar_out).returncode == 0
    os.makedirs(converted)
    done = cli("convert", tar_out, "-o", converted + "/c-%03d.tfrecord")
    assert done.returncode == 0, done.stderr
    from_build = parse_all(shard_files(built))
    from_convert = parse_all(shard_files(converted))
    assert len(from_build) == 12 and from_build.keys() == from_convert.keys()
    for key, row in from_build.items():
        other = from_convert[key]
        assert row["image/class/label"] == other["image/class/label"] >= 0
        assert row["image/encoded"] == other["image/encoded"]
        for name in ("image/width", "image/height"):
            assert row[name] == other[name] > 0
        assert row["image/format"] == other["image/format"] == b"jpeg"


def test_list_build_to_tfrecord_keeps_every_column(corpus: str, tmp_path: Path) -> None:
    import tensorflow as tf

    images = jpegs(corpus)[:4]
    lines = ["path,label,split,score,caption,count"]
    for i, rel in enumerate(images):
        lines.append(f'{rel},{i % 2},{"train" if i else "val"},{i / 4},"a, \u00f1 {i}",{i * 10}')
    write(corpus, "list.csv", "\n".join(lines).encode())
    out = str(tmp_path / "t")
    done = cli("build", os.path.join(corpus, "list.csv"), out, "--format", "tfrecord")
    assert done.returncode == 0, done.stderr
    extra = {
        "split": tf.io.FixedLenFeature([], tf.string),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "caption": tf.io.FixedLenFeature([], tf.string),
        "count": tf.io.FixedLenFeature([], tf.int64),
    }
    rows = sorted(parse_all(shard_files(out), extra).values(), key=lambda r: r["count"])
    assert [r["split"] for r in rows] == [b"val", b"train", b"train", b"train"]
    assert [r["score"] for r in rows] == [0.0, 0.25, 0.5, 0.75]
    assert [r["caption"].decode() for r in rows] == [f"a, \u00f1 {i}" for i in range(4)]
    assert [r["image/class/label"] for r in rows] == [0, 1, 0, 1]


def test_jsonl_lists_become_list_features(corpus: str, tmp_path: Path) -> None:
    import tensorflow as tf

    rel = jpegs(corpus)[0]
    row = {"path": rel, "label": "cat", "bbox": [1, 2, 30, 40], "tags": ["x", "y"]}
    row["meta"] = {"a": 1}
    write(corpus, "list.jsonl", json.dumps(row).encode())
    out = str(tmp_path / "j")
    done = cli("build", os.path.join(corpus, "list.jsonl"), out, "--format", "tfrecord")
    assert done.returncode == 0, done.stderr
    extra = {
        "bbox": tf.io.FixedLenFeature([4], tf.int64),
        "tags": tf.io.FixedLenFeature([2], tf.string),
        "meta": tf.io.FixedLenFeature([], tf.string),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
    }
    [parsed] = parse_all(shard_files(out), extra).values()
    assert list(parsed["bbox"]) == [1, 2, 30, 40] and list(parsed["tags"]) == [b"x", b"y"]
    assert json.loads(parsed["meta"]) == {"a": 1} and parsed["image/class/text"] == b"cat"


def test_a_column_named_like_a_schema_feature_is_refused(corpus: str, tmp_path: Path) -> None:
    rel = jpegs(corpus)[0]
    write(corpus, "clash.csv", f"path,image/format\n{rel},raw\n".encode())
    clash = os.path.join(corpus, "clash.csv")
    done = cli("build", clash, str(tmp_path / "c"), "--format", "tfrecord")
    assert done.returncode == 2 and "image/format" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_dataset_decodes_its_own_tfrecord_output(corpus: str, tmp_path: Path) -> None:
    import numpy as np

    out = str(tmp_path / "t")
    shardkit.build(corpus, out, options=BuildOptions(format="tfrecord", workers=1))
    rows = list(shardkit.Dataset(out, shuffle_shards=False).decode("rgb8"))
    assert len(rows) == 12
    for row in rows:
        image = row["image/encoded"]
        assert isinstance(image, np.ndarray) and image.shape == (
            row["image/height"],
            row["image/width"],
            3,
        )
        assert isinstance(row["image/class/label"], int)
    pairs = list(
        shardkit.Dataset(out).decode("rgb8").to_tuple("image/encoded", "image/class/label")
    )
    assert sorted(label for _, label in pairs) == [0] * 4 + [1] * 4 + [2] * 4
    assert all(image.ndim == 3 for image, _ in pairs)


def test_show_and_stats_understand_the_tfrecord_output(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "t")
    shardkit.build(corpus, out, options=BuildOptions(format="tfrecord", workers=1))
    sheet = str(tmp_path / "sheet.png")
    shown = cli("show", out, "--grid", sheet, "-c", "6")
    assert shown.returncode == 0, shown.stderr
    from PIL import Image

    with Image.open(sheet) as img:
        assert img.size == (6 * 160, 160)
    stats = cli("stats", out, "--json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["classes"] == {"circle": 4, "square": 4, "stripes": 4}


def test_convert_back_to_tar_gives_fields_decoders_know(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "t")
    shardkit.build(corpus, out, options=BuildOptions(format="tfrecord", workers=1))
    back = str(tmp_path / "back.tar")
    assert cli("convert", out, "-o", back).returncode == 0
    samples = [Decoder("rgb8")(s) for s in read_shard(back)]
    assert len(samples) == 12
    for sample in samples:
        assert sample["jpg"].ndim == 3 and isinstance(sample["cls"], int)
        assert sample["json"]["label"] == sample["cls"]
        assert sample["__key__"].startswith(sample["json"]["class"] + "/")
        assert not any("." in name or "/" in name for name in sample if name != "__key__")


def test_shard_writer_writes_int_features_to_tfrecord(tmp_path: Path) -> None:
    import tensorflow as tf

    pattern = str(tmp_path / "w-%03d.tfrecord")
    with ShardWriter(pattern) as sink:
        sink.write({"__key__": "a", "image/class/label": 3, "score": 0.5, "json": {"x": [1]}})
    spec = {
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "score": tf.io.FixedLenFeature([], tf.float32),
        "json": tf.io.FixedLenFeature([], tf.string),
    }
    [record] = list(tf.data.TFRecordDataset([pattern % 0]))
    parsed = tf.io.parse_single_example(record, spec)
    assert int(parsed["image/class/label"]) == 3 and float(parsed["score"]) == 0.5
    assert json.loads(parsed["json"].numpy()) == {"x": [1]}


@pytest.mark.parametrize("ext", ["tar", "tfrecord"])
def test_gz_fields_are_compressed_and_round_trip(tmp_path: Path, ext: str) -> None:
    pattern = str(tmp_path / f"g-%03d.{ext}")
    sample = {"__key__": "a", "txt.gz": "h\u00e9llo " * 50, "json.gz": {"n": [1, 2]}}
    with ShardWriter(pattern) as sink:
        sink.write(sample)
    [raw] = list(read_shard(pattern % 0))
    assert gzip.decompress(raw["txt.gz"]).decode() == sample["txt.gz"]
    assert raw["txt.gz"][4:8] == b"\0\0\0\0"  # no timestamp: reproducible bytes
    decoded = Decoder()(raw)
    assert decoded["txt.gz"] == sample["txt.gz"] and decoded["json.gz"] == {"n": [1, 2]}
    with ShardWriter(str(tmp_path / f"again-%03d.{ext}")) as sink:
        sink.write(raw)  # fields read back are gzip already: not compressed twice
    with open(pattern % 0, "rb") as f, open(str(tmp_path / f"again-000.{ext}"), "rb") as g:
        assert f.read() == g.read()


# webdataset 1.0.2 leaves its shard files for the garbage collector to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_webdataset_decodes_gz_fields_shardkit_wrote(tmp_path: Path) -> None:
    import webdataset as wds

    url = str(tmp_path / "w-000.tar")
    with ShardWriter(str(tmp_path / "w-%03d.tar")) as sink:
        sink.write({"__key__": "a", "txt.gz": "hello", "json.gz": {"n": 1}})
    [row] = list(wds.WebDataset([url], shardshuffle=False, empty_check=False).decode())
    assert row["txt.gz"] == "hello" and row["json.gz"] == {"n": 1}


def test_tfrecord_images_decode_exactly_like_the_tar_ones(corpus: str, tmp_path: Path) -> None:
    """image/encoded takes the same decoder as a jpg field (libjpeg-turbo where it is)."""
    import numpy as np

    arrays = {}
    for fmt in ("tar", "tfrecord"):
        out = str(tmp_path / fmt)
        shardkit.build(corpus, out, options=BuildOptions(format=fmt, workers=1))
        field = "jpg" if fmt == "tar" else "image/encoded"
        for spec in ("rgb8", "l8", "torchrgb8"):
            for row in shardkit.Dataset(out, shuffle_shards=False).decode(spec):
                arrays[fmt, spec, row["__key__"]] = np.asarray(row[field])
    assert len(arrays) == 2 * 3 * 12
    for (fmt, spec, key), array in arrays.items():
        if fmt == "tar":
            assert np.array_equal(array, arrays["tfrecord", spec, key]), (spec, key)


def relabel(sample: dict[str, Any]) -> dict[str, Any]:
    return {**sample, "image/class/label": sample["image/class/label"] + 10}


def test_map_shards_over_tfrecord_output_keeps_int_features(corpus: str, tmp_path: Path) -> None:
    src, out = str(tmp_path / "t"), str(tmp_path / "m")
    shardkit.build(corpus, src, options=BuildOptions(format="tfrecord", workers=1))
    os.makedirs(out)
    inputs = shard_files(src)
    shardkit.map_shards(relabel, inputs, out + "/m-%06d.tfrecord", workers=1)
    before = parse_all(inputs)
    after = parse_all(shard_files(out))
    assert before.keys() == after.keys() and len(after) == 12
    for key, row in after.items():
        assert row["image/class/label"] == before[key]["image/class/label"] + 10
