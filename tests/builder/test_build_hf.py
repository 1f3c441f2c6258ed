"""Hugging Face interop with the real ``datasets`` package, on local files only: a
``datasets.Dataset`` and its parquet build with the encoded bytes as they are, and
``load_dataset("webdataset")`` reads what shardkit writes."""

from __future__ import annotations

import csv
import glob
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from helpers.build import make_corpus_jpeg, make_png, read_samples, write
from PIL import Image as PILImage

import shardkit
from shardkit import BuildOptions


def _dataset(datasets: Any) -> tuple[Any, list[bytes]]:
    """Images (JPEG and PNG, encoded) with captions and class labels; one is cut short."""
    images = [make_corpus_jpeg(i) if i % 2 else make_png(i) for i in range(7)]
    images[4] = images[4][:40]
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "caption": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["cat", "dog", "fox"]),
        }
    )
    rows = {
        "image": [{"bytes": b, "path": None} for b in images],
        "caption": [f"picture {i}" for i in range(7)],
        "label": [i % 3 for i in range(7)],
    }
    return datasets.Dataset.from_dict(rows, features=features), images


def test_a_dataset_and_its_parquet_build_with_the_parquets_bytes(
    offline: Any, tmp_path: Any
) -> None:
    dataset, images = _dataset(offline)
    path = str(tmp_path / "train.parquet")
    dataset.to_parquet(path)
    stored = [cell["bytes"] for cell in pq.read_table(path).column("image").to_pylist()]
    assert stored == images  # what the parquet holds: the encoded files
    options = BuildOptions(max_count=3, workers=2)
    from_parquet = shardkit.build(path, tmp_path / "a", options=options)
    from_dataset = shardkit.build(dataset, tmp_path / "b", options=options)
    for result, out in ((from_parquet, "a"), (from_dataset, "b")):
        assert len(result.skipped) == 1 and "truncated PNG" in result.skipped[0][1]
        samples = read_samples(str(tmp_path / out))
        assert sorted(int(s["__key__"]) for s in samples) == [0, 1, 2, 3, 5, 6]
        for sample in samples:
            i = int(sample["__key__"])
            ext = "jpg" if i % 2 else "png"
            assert sample[ext] == stored[i]  # not decoded and re-encoded
            assert sample["cls"] == str(i % 3).encode()
            assert json.loads(sample["json"])["caption"] == f"picture {i}"
    with open(from_dataset.manifest) as f:  # the ClassLabel's names are the classes
        assert json.load(f)["class_to_idx"] == {"cat": 0, "dog": 1, "fox": 2}


def test_load_dataset_webdataset_reads_a_shardkit_build(offline: Any, tmp_path: Any) -> None:
    rows = []
    for i in range(5):
        write(str(tmp_path), f"img/{i}.jpg", make_corpus_jpeg(i))
        rows.append({"url": f"img/{i}.jpg", "caption": f"a photo {i}", "label": i % 2, "w": i})
    with open(tmp_path / "list.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fields = {"jpg": "url", "txt": "caption", "cls": "label"}
    out = tmp_path / "out"
    shardkit.build(str(tmp_path / "list.csv"), out, options=BuildOptions(fields=fields))
    shards = sorted(glob.glob(f"{out}/*.tar"))
    loaded = offline.load_dataset(
        "webdataset", data_files={"train": shards}, split="train", cache_dir=str(tmp_path / "c")
    )
    assert len(loaded) == 5
    ours = {s["__key__"]: s for s in read_samples(str(out))}
    for row in loaded:
        sample = ours[row["__key__"]]
        i = int(row["__key__"].rpartition("/")[2])
        assert row["txt"] == f"a photo {i}" and row["cls"] == i % 2
        assert (
            row["json"]
            == json.loads(sample["json"])
            == {
                "path": f"img/{i}.jpg",
                "class": str(i % 2),
                "label": i % 2,
                "w": i,
            }
        )
        with PILImage.open(io.BytesIO(sample["jpg"])) as image:
            assert row["jpg"].tobytes() == image.convert("RGB").tobytes()


def _doc_blocks(section: str) -> list[tuple[str, str]]:
    """The (language, code) blocks of docs/build.md's ``### section``."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "build.md").read_text()
    body = text.split(f"\n### {section}\n", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", body, flags=re.S)


def _run_blocks(blocks: list[tuple[str, str]], folder: Path) -> None:
    """Run ``sh`` lines (``shardkit`` as this interpreter's) and ``python`` blocks (as a
    script's main module) in ``folder``."""
    commands = []
    for language, code in blocks:
        if language == "sh":
            for line in code.strip().splitlines():
                argv = shlex.split(line)
                assert argv[0] == "shardkit"
                commands.append([sys.executable, "-m", "shardkit", *argv[1:]])
        else:
            assert language == "python"
            script = folder / f"example{len(commands)}.py"
            script.write_text(code)
            commands.append([sys.executable, str(script)])
    for command in commands:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


def test_the_fields_examples_of_docs_build_run(tmp_path: Path) -> None:
    blocks = _doc_blocks("Fields (`--field EXT=COLUMN`)")
    assert [language for language, _ in blocks] == ["sh", "python", "sh"]
    with open(tmp_path / "captions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["url", "caption"])
        for i in range(3):
            write(str(tmp_path), f"img/{i}.jpg", make_corpus_jpeg(i))
            writer.writerow([f"img/{i}.jpg", f"caption {i}"])
    _run_blocks(blocks, tmp_path)
    for out in ("clip-shards", "clip-shards-py"):
        samples = read_samples(str(tmp_path / out))
        assert sorted((s["__key__"], s["txt"]) for s in samples) == [
            (f"img/{i}", f"caption {i}".encode()) for i in range(3)
        ]
        assert all(s["jpg"] == make_corpus_jpeg(int(s["__key__"][-1])) for s in samples)
    from shardkit.codecs import image_size

    resized = read_samples(str(tmp_path / "clip-64"))
    assert sorted(min(image_size(s["jpg"])) for s in resized) == [64] * 3
    records = shardkit.Dataset(str(tmp_path / "clip-tfrecord"))
    assert sorted((s["__key__"], s["txt"], s["jpg"]) for s in records) == [
        (f"img/{i}", f"caption {i}".encode(), make_corpus_jpeg(i)) for i in range(3)
    ]


def test_the_hugging_face_example_of_docs_build_runs(offline: Any, tmp_path: Path) -> None:
    blocks = _doc_blocks("Hugging Face parquet and datasets")
    assert [language for language, _ in blocks] == ["python"]
    dataset, images = _dataset(offline)
    dataset.to_parquet(str(tmp_path / "train.parquet"))
    _run_blocks(blocks, tmp_path)
    for out in ("from-parquet", "from-dataset"):
        samples = read_samples(str(tmp_path / out))
        assert len(samples) == 6
        assert all(s.get("jpg", s.get("png")) == images[int(s["__key__"])] for s in samples)
