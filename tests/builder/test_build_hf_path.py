"""A ``datasets.Dataset`` is built through the one field path a Hugging Face parquet list
takes (builder/_tables.py rows, validate.check_fields, worker.sample_record): the same rows
as a Dataset or as its ``Dataset.to_parquet`` file give the same shard bytes, tar and
TFRecord, and the list's options (``resize``, ``validate``, ``fields``) apply to it."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus_jpeg, make_flac, make_png, read_samples, resume_after

import shardkit
from shardkit import BuildOptions
from shardkit.builder._validate import check_image
from shardkit.codecs import image_size


def _corrupt_inside(png: bytes) -> bytes:
    """``png`` with its pixel data garbled but every chunk in place (IEND last): the
    header check passes it, decoding does not."""
    start = png.index(b"IDAT") + 4
    length = int.from_bytes(png[start - 8 : start - 4], "big")
    garbled = bytes(b ^ 0x5A for b in png[start + 2 : start + length])
    body = png[start : start + 2] + garbled
    crc = zlib.crc32(b"IDAT" + body).to_bytes(4, "big")
    return png[:start] + body + crc + png[start + length + 4 :]


def _shards(out: Path) -> dict[str, bytes]:
    """Every shard file's bytes by name (the manifest's fingerprint names the source)."""
    files = {}
    for name in sorted(os.listdir(out)):
        if name.endswith((".tar", ".tfrecord")):
            files[name] = (out / name).read_bytes()
    assert files
    return files


def _dataset(datasets: Any, images: list[bytes]) -> Any:
    """Images (JPEG with paths, PNG without), a binary FLAC column, a caption, a score,
    an id of digits and a ClassLabel."""
    count = len(images)
    features = datasets.Features(
        {
            "caption": datasets.Value("string"),
            "image": datasets.Image(),
            "audio": datasets.Value("binary"),
            "score": datasets.Value("float64"),
            "id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["cat", "dog", "fox"]),
        }
    )
    rows = {
        "caption": [f"picture {i}" for i in range(count)],
        "image": [
            {"bytes": b, "path": f"p/{i}.jpg" if i % 2 else None} for i, b in enumerate(images)
        ],
        "audio": [make_flac(0.05, seed=i) for i in range(count)],
        "score": [i / 4 for i in range(count)],
        "id": [str(10 + i) for i in range(count)],
        "label": [i % 3 for i in range(count)],
    }
    return datasets.Dataset.from_dict(rows, features=features)


def _images(count: int) -> list[bytes]:
    return [make_corpus_jpeg(i) if i % 2 else make_png(i, (44, 36)) for i in range(count)]


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_a_dataset_and_its_parquet_give_the_same_shard_bytes(
    offline: Any, tmp_path: Path, fmt: str
) -> None:
    images = _images(9)
    images[4] = images[4][:60]  # cut short: skipped, from both
    dataset = _dataset(offline, images)
    path = str(tmp_path / "train.parquet")
    dataset.to_parquet(path)
    options = BuildOptions(format=fmt, seed=3, max_count=3, workers=2)
    from_parquet = shardkit.build(path, tmp_path / "a", options=options)
    from_dataset = shardkit.build(dataset, tmp_path / "b", options=options)
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    for result in (from_parquet, from_dataset):
        assert result.samples == 8
        assert [(where, "truncated PNG" in why) for where, why in result.skipped] == [
            ("row 5", True)
        ]
        with open(result.manifest) as f:  # the ClassLabel's names, from either
            assert json.load(f)["class_to_idx"] == {"cat": 0, "dog": 1, "fox": 2}
    samples = list(shardkit.Dataset(str(tmp_path / "b")))
    assert len(samples) == 8
    for sample in samples:
        i = int(sample["__key__"])
        assert sample["jpg" if i % 2 else "png"] == images[i]  # never re-encoded
        assert sample["flac"] == make_flac(0.05, seed=i)
        cls = sample["cls"]
        assert (int(cls) if isinstance(cls, bytes) else cls) == i % 3
        assert (
            sample["json"]
            == json.dumps(  # the list's json text, the list's rules
                {
                    "class": ["cat", "dog", "fox"][i % 3],
                    "label": i % 3,
                    "caption": f"picture {i}",
                    "score": i / 4,
                    "id": 10 + i,
                }
            ).encode()
        )


def test_resize_applies_to_a_dataset_and_leaves_its_other_fields(
    offline: Any, tmp_path: Path
) -> None:
    images = _images(4)
    dataset = _dataset(offline, images)
    plain = {s["__key__"]: s for s in _build(dataset, tmp_path / "plain", BuildOptions())}
    for fmt in ("tar", "tfrecord"):
        options = BuildOptions(resize=32, format=fmt)
        resized = _build(dataset, tmp_path / f"resized-{fmt}", options)
        assert len(resized) == 4
        for sample in resized:
            ext = "jpg" if int(sample["__key__"]) % 2 else "png"
            assert min(image_size(sample[ext])) == 32
            for name in ("flac", "json"):
                assert sample[name] == plain[sample["__key__"]][name]


def _build(source: Any, out: Path, options: BuildOptions) -> list[dict[str, Any]]:
    shardkit.build(source, out, options=options)
    if options.format == "tfrecord":
        return list(shardkit.Dataset(str(out)))
    return read_samples(str(out))


def test_validate_full_catches_a_corrupt_inside_image_of_a_dataset(
    offline: Any, tmp_path: Path
) -> None:
    images = _images(4)
    images[2] = _corrupt_inside(images[2])
    assert check_image(images[2], "png") == "png"  # whole by its header and end
    dataset = _dataset(offline, images)
    header = shardkit.build(dataset, tmp_path / "header")
    full = shardkit.build(dataset, tmp_path / "full", options=BuildOptions(validate="full"))
    assert header.samples == 4 and not header.skipped
    assert full.samples == 3
    [(where, why)] = full.skipped
    assert where == "row 3" and why.startswith("field 'image': cannot decode")


def test_two_bytes_columns_of_one_kind_are_named_by_fields(offline: Any, tmp_path: Path) -> None:
    images = [make_corpus_jpeg(i) for i in range(3)]
    masks = [make_corpus_jpeg(10 + i) for i in range(3)]
    features = offline.Features({"image": offline.Image(), "mask": offline.Image()})
    dataset = offline.Dataset.from_dict(
        {
            "image": [{"bytes": b, "path": None} for b in images],
            "mask": [{"bytes": b, "path": None} for b in masks],
        },
        features=features,
    )
    path = str(tmp_path / "seg.parquet")
    dataset.to_parquet(path)
    for source, out in ((dataset, "d"), (path, "p")):  # one rule: never one over the other
        with pytest.raises(shardkit.EmptyBuildError) as info:
            shardkit.build(source, tmp_path / out)
        assert all("two fields are stored as 'jpg'" in why for _, why in info.value.skipped)
        named = BuildOptions(fields={"jpg": "image", "mask.jpg": "mask"})
        shardkit.build(source, tmp_path / f"{out}-named", options=named)
        samples = sorted(read_samples(str(tmp_path / f"{out}-named")), key=lambda s: s["__key__"])
        assert [(s["jpg"], s["mask.jpg"]) for s in samples] == list(zip(images, masks, strict=True))
    assert _shards(tmp_path / "d-named") == _shards(tmp_path / "p-named")


def test_a_dataset_build_resumes_and_reruns_to_the_same_bytes(offline: Any, tmp_path: Path) -> None:
    dataset = _dataset(offline, _images(8))
    options = BuildOptions(format="tfrecord", resize=32, seed=5, max_count=2, workers=1)
    shardkit.build(dataset, tmp_path / "whole", options=options)
    shardkit.build(dataset, tmp_path / "again", options=options)
    resume_after(dataset, str(tmp_path / "resumed"), options, shards=2)
    whole = _shards(tmp_path / "whole")
    assert _shards(tmp_path / "again") == whole == _shards(tmp_path / "resumed")


def test_a_dataset_of_text_and_numbers_packs_each_row_as_json(offline: Any, tmp_path: Path) -> None:
    """No file in the rows: each row is a json sample with its cls (as shardkit packed such
    a Dataset before it became a list), never a refusal."""
    features = offline.Features(
        {
            "text": offline.Value("string"),
            "n": offline.Value("int64"),
            "label": offline.ClassLabel(names=["neg", "pos"]),
        }
    )
    rows = {"text": ["good", "bad", "none"], "n": [1, 2, 3], "label": [1, 0, -1]}
    dataset = offline.Dataset.from_dict(rows, features=features)
    result = shardkit.build(dataset, tmp_path / "out", options=BuildOptions(workers=1))
    assert result.samples == 3 and not result.skipped
    samples = sorted(shardkit.Dataset(str(tmp_path / "out")), key=lambda s: s["__key__"])
    assert [json.loads(s["json"]) for s in samples] == [
        {"text": "good", "n": 1},
        {"text": "bad", "n": 2},
        {"text": "none", "n": 3},
    ]
    assert [s.get("cls") for s in samples] == [b"1", b"0", None]
    with open(tmp_path / "out" / "manifest.json") as f:
        assert json.load(f)["class_to_idx"] == {"neg": 0, "pos": 1}


def test_a_classlabel_of_another_name_labels_and_its_minus_one_is_no_label(
    offline: Any, tmp_path: Path
) -> None:
    images = [make_corpus_jpeg(i) for i in range(4)]
    features = offline.Features(
        {"image": offline.Image(), "fine": offline.ClassLabel(names=["a", "b"])}
    )
    rows = {"image": [{"bytes": b, "path": None} for b in images], "fine": [1, -1, 0, 1]}
    dataset = offline.Dataset.from_dict(rows, features=features).select([3, 2, 1, 0])
    path = str(tmp_path / "fine.parquet")
    dataset.to_parquet(path)  # the selection's rows, in its order
    for source, out in ((dataset, "d"), (path, "p")):
        result = shardkit.build(source, tmp_path / out, options=BuildOptions())
        samples = {s["__key__"]: s for s in read_samples(str(tmp_path / out))}
        assert result.samples == 4 and not result.skipped
        assert [samples[f"{i:08d}"]["jpg"] for i in range(4)] == images[::-1]
        assert "cls" not in samples["00000002"]  # -1: no label
        assert json.loads(samples["00000002"]["json"]) == {}
        assert samples["00000000"]["cls"] == b"1"
        assert json.loads(samples["00000000"]["json"]) == {"class": "b", "label": 1}
    assert _shards(tmp_path / "d") == _shards(tmp_path / "p")


def test_an_imagefolder_dataset_packs_the_files_its_cells_name(
    offline: Any, tmp_path: Path
) -> None:
    """``load_dataset("imagefolder")`` keeps a path and no bytes in each Image cell: the
    file it names is the field (it was skipped as an empty cell), checked as a list's file;
    a path to a missing file skips its row with the reason."""
    from shardkit.demo import make_image_folder

    folder = tmp_path / "imgs"
    make_image_folder(str(folder), count=9, classes=["a", "b"])
    dataset = offline.load_dataset("imagefolder", data_dir=str(folder), split="train")
    paths = [
        row["path"] for row in dataset.cast_column("image", offline.Image(decode=False))["image"]
    ]
    os.remove(paths[4])
    result = shardkit.build(dataset, tmp_path / "out", options=BuildOptions(workers=1))
    assert result.samples == 8
    ((where, reason),) = result.skipped
    assert where == "row 5" and reason.startswith(f"cannot read {paths[4]!r}"), reason
    samples = sorted(shardkit.Dataset(str(tmp_path / "out")), key=lambda s: s["__key__"])
    kept = [p for i, p in enumerate(paths) if i != 4]
    assert [s["jpg"] for s in samples] == [Path(p).read_bytes() for p in kept]
    assert [s["cls"] for s in samples] == [
        str("ab".index(Path(p).parent.name)).encode() for p in kept
    ]
