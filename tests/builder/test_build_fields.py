"""Lists of several columns (``--field EXT=COLUMN``) and parquet lists with the files inside."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from helpers.build import make_corpus_jpeg, make_png, read_samples, run_cli, snapshot, write

import shardkit
from shardkit import BuildOptions
from shardkit.errors import BuildError, ConfigError


def _flac(seed: int, frames: int = 800) -> bytes:
    samples = np.random.default_rng(seed).uniform(-0.5, 0.5, frames).astype("float32")
    buffer = io.BytesIO()
    sf.write(buffer, samples, 8000, format="FLAC")
    return buffer.getvalue()


def _csv(path: str, rows: list[dict[str, Any]]) -> str:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture
def captions(tmp_path: Any) -> tuple[str, dict[str, bytes]]:
    """A CLIP-style list: an image, a caption and a score per row; one image is cut."""
    files = {}
    rows = []
    for i in range(6):
        data = make_corpus_jpeg(i)
        if i == 4:
            data = data[: len(data) // 2]
        files[f"img/{i:03d}.jpg"] = data
        write(str(tmp_path), f"img/{i:03d}.jpg", data)
        rows.append({"url": f"img/{i:03d}.jpg", "caption": f"a photo {i}", "score": i / 4})
    return _csv(f"{tmp_path}/list.csv", rows), files


def test_caption_layout_packs_jpg_txt_and_the_other_columns_as_json(
    captions: tuple[str, dict[str, bytes]], tmp_path: Any
) -> None:
    path, files = captions
    result = run_cli(path, f"{tmp_path}/out", "--field", "jpg=url", "--field", "txt=caption")
    assert result.returncode == 0, result.stderr
    assert "skipped img/004.jpg: field 'jpg': truncated JPEG" in result.stdout
    samples = {s["__key__"]: s for s in read_samples(f"{tmp_path}/out")}
    assert sorted(samples) == [f"img/{i:03d}" for i in (0, 1, 2, 3, 5)]
    again = run_cli(path, f"{tmp_path}/out", "--field", "jpg=url", "--field", "txt=caption")
    assert again.returncode == 0 and again.stdout.startswith("already complete: ")
    for i in (0, 1, 2, 3, 5):
        sample = samples[f"img/{i:03d}"]
        assert sorted(k for k in sample if not k.startswith("__")) == ["jpg", "json", "txt"]
        assert sample["jpg"] == files[f"img/{i:03d}.jpg"]
        assert sample["txt"] == f"a photo {i}".encode()
        assert json.loads(sample["json"]) == {"path": f"img/{i:03d}.jpg", "score": i / 4}


def test_path_and_label_columns_are_shorthands_of_fields(tmp_path: Any) -> None:
    rows = [{"path": f"img/{i}.jpg", "label": i % 2, "note": f"n{i}"} for i in range(5)]
    for i in range(5):
        write(str(tmp_path), f"img/{i}.jpg", make_corpus_jpeg(i))
    path = _csv(f"{tmp_path}/list.csv", rows)
    shardkit.build(path, f"{tmp_path}/a", options=BuildOptions(max_count=2))
    fields = BuildOptions(max_count=2, fields={"jpg": "path", "cls": "label"})
    shardkit.build(path, f"{tmp_path}/b", options=fields)
    a, b = snapshot(f"{tmp_path}/a"), snapshot(f"{tmp_path}/b")
    assert [k for k in a if k.endswith(".tar")] == [k for k in b if k.endswith(".tar")]
    assert all(a[k] == b[k] for k in a if k.endswith(".tar"))


def test_audio_fields_are_read_checked_and_a_bad_one_skips_its_row(tmp_path: Any) -> None:
    rows = []
    for i in range(4):
        audio = _flac(i)
        if i == 2:
            audio = audio[: len(audio) // 3]
        write(str(tmp_path), f"a/{i}.flac", audio)
        write(str(tmp_path), f"i/{i}.png", make_png(i))
        rows.append({"image": f"i/{i}.png", "audio": f"a/{i}.flac", "text": f"said {i}"})
    write(str(tmp_path), "i/9.png", make_png(9))
    rows.append({"image": "i/9.png", "audio": "a/missing.flac", "text": "x"})
    path = f"{tmp_path}/list.jsonl"
    with open(path, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    fields = {"png": "image", "flac": "audio", "transcript": "text"}
    result = shardkit.build(path, f"{tmp_path}/out", options=BuildOptions(fields=fields))
    reasons = dict(result.skipped)
    assert reasons["i/9.png"].startswith("cannot read 'a/missing.flac'")
    assert reasons["i/2.png"].startswith("field 'flac'")
    samples = {s["__key__"]: s for s in read_samples(f"{tmp_path}/out")}
    assert sorted(samples) == ["i/0", "i/1", "i/3"]
    for key, sample in samples.items():
        i = int(key[2:])
        assert sample["flac"] == _flac(i)
        assert sample["png"] == make_png(i)
        assert sample["transcript"] == f"said {i}".encode()
        fields = [k for k in sample if not k.startswith("__")]
        assert fields == ["png", "flac", "transcript", "json"]
        assert json.loads(sample["json"]) == {"path": f"i/{i}.png"}


def test_a_field_naming_no_column_lists_the_columns(
    captions: tuple[str, dict[str, bytes]], tmp_path: Any
) -> None:
    path, _ = captions
    with pytest.raises(BuildError, match=r"no 'title' column .*\(columns: url, caption, score\)"):
        fields = {"jpg": "url", "txt": "title"}
        shardkit.build(path, f"{tmp_path}/o", options=BuildOptions(fields=fields))
    result = run_cli(path, f"{tmp_path}/o2", "--field", "jpg=url", "--field", "txt=title")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    result = run_cli(path, f"{tmp_path}/o3", "--field", "jpg")
    assert result.returncode == 2 and "expected EXT=COLUMN" in result.stderr


@pytest.mark.parametrize(
    "fields",
    [{"txt": ""}, [("txt", "a"), ("TXT", "b")], "txt=a", [("a/b", "c")], {"__key__": "c"}],
)
def test_bad_fields_are_refused_eagerly(fields: Any) -> None:
    with pytest.raises(ConfigError, match="fields"):
        BuildOptions(fields=fields)


def test_fields_without_a_file_are_refused(
    captions: tuple[str, dict[str, bytes]], tmp_path: Any
) -> None:
    path, _ = captions
    with pytest.raises(ConfigError, match="name no file"):
        shardkit.build(path, f"{tmp_path}/o", options=BuildOptions(fields={"txt": "caption"}))


def _hf_table(images: list[bytes | None], paths: list[str | None]) -> pa.Table:
    """The Hugging Face layout: struct<bytes, path> images, a caption, a label, and a
    plain binary column."""
    image = pa.StructArray.from_arrays(
        [pa.array(images, pa.binary()), pa.array(paths, pa.string())], ["bytes", "path"]
    )
    n = len(images)
    return pa.table(
        {
            "image": image,
            "caption": [f"caption {i}" for i in range(n)],
            "label": [i % 3 for i in range(n)],
            "sound": pa.array([_flac(i, 400) for i in range(n)], pa.binary()),
        }
    )


def test_parquet_with_the_files_inside_packs_their_bytes_as_they_are(tmp_path: Any) -> None:
    images: list[bytes | None] = [make_corpus_jpeg(i) if i % 2 else make_png(i) for i in range(9)]
    paths: list[str | None] = [f"x/{i}.jpg" if i % 2 else None for i in range(9)]
    images[3] = b"not an image"
    images[5] = None
    table = _hf_table(images, paths)
    path = f"{tmp_path}/hf.parquet"
    pq.write_table(table, path, row_group_size=4)
    result = shardkit.build(path, f"{tmp_path}/out", options=BuildOptions(workers=2, max_count=3))
    reasons = dict(result.skipped)
    # row 6 has a path and no bytes: the file it names is read, and it does not exist
    assert reasons["row 6"] == "cannot read 'x/5.jpg': No such file or directory"
    assert reasons["row 4"].startswith("field 'jpg': not an image")
    samples = {s["__key__"]: s for s in read_samples(f"{tmp_path}/out")}
    assert sorted(samples) == [f"{i:08d}" for i in (0, 1, 2, 4, 6, 7, 8)]
    for key, sample in samples.items():
        i = int(key)
        ext = "jpg" if i % 2 else "png"
        assert sample[ext] == images[i]
        assert sample["flac"] == _flac(i, 400)
        assert sample["cls"] == str(i % 3).encode()
        assert json.loads(sample["json"])["caption"] == f"caption {i}"


def test_parquet_fields_name_the_bytes_and_value_columns(tmp_path: Any) -> None:
    images: list[bytes | None] = [make_corpus_jpeg(i) for i in range(4)]
    path = f"{tmp_path}/hf.parquet"
    pq.write_table(_hf_table(images, [None] * 4), path)
    fields = {"jpg": "image", "txt": "caption", "cls": "label"}
    shardkit.build(path, f"{tmp_path}/out", options=BuildOptions(fields=fields))
    samples = read_samples(f"{tmp_path}/out")
    assert len(samples) == 4
    for sample in samples:
        i = int(sample["__key__"])
        assert sorted(k for k in sample if not k.startswith("__")) == ["cls", "jpg", "json", "txt"]
        assert sample["jpg"] == images[i] and sample["txt"] == f"caption {i}".encode()
        assert json.loads(sample["json"]) == {"class": str(i % 3), "label": i % 3}


def test_a_bytes_cell_over_its_bound_stops_the_listing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDKIT_MAX_FILE_CELL", "100B")
    path = f"{tmp_path}/hf.parquet"
    pq.write_table(_hf_table([make_corpus_jpeg(0)], [None]), path)
    with pytest.raises(BuildError, match=r"row 1, column 'image': a file: .* limit of 100 bytes"):
        shardkit.build(path, f"{tmp_path}/out")
    assert not os.path.exists(f"{tmp_path}/out/manifest.json")


def test_a_shuffled_task_reads_each_row_group_it_needs_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    images: list[bytes | None] = [make_png(i) for i in range(40)]
    path = f"{tmp_path}/hf.parquet"
    pq.write_table(_hf_table(images, [None] * 40), path, row_group_size=4)  # 10 groups
    reads = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self: Any, group: int, **kwargs: Any) -> Any:
        reads.append(group)
        return read_row_group(self, group, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    options = BuildOptions(workers=1, max_count=40, seed=3)  # one worker: in this process
    result = shardkit.build(path, f"{tmp_path}/out", options=options)
    assert result.samples == 40 and len(result.shards) == 1  # one task
    assert sorted(reads) == sorted(set(reads)) == list(range(10))  # each group once
    samples = read_samples(f"{tmp_path}/out")
    assert [s["__key__"] for s in samples] != sorted(s["__key__"] for s in samples)  # shuffled
    assert all(s["png"] == images[int(s["__key__"])] for s in samples)


def test_a_json_field_is_the_samples_json(tmp_path: Any) -> None:
    rows = []
    for i in range(3):
        write(str(tmp_path), f"img/{i}.jpg", make_corpus_jpeg(i))
        meta = json.dumps({"id": i, "tags": ["a"]})
        rows.append({"url": f"img/{i}.jpg", "meta": meta, "label": "cat" if i else "dog"})
    rows.append({"url": "img/0.jpg", "meta": "{not json", "label": "cat"})
    write(str(tmp_path), "img/3.jpg", make_corpus_jpeg(3))
    rows[-1]["url"] = "img/3.jpg"
    path = _csv(f"{tmp_path}/list.csv", rows)
    fields = {"jpg": "url", "json": "meta", "cls": "label"}
    result = shardkit.build(path, f"{tmp_path}/out", options=BuildOptions(fields=fields))
    assert [(p, r[:14]) for p, r in result.skipped] == [("img/3.jpg", "field 'json': ")]
    samples = {s["__key__"]: s for s in read_samples(f"{tmp_path}/out")}
    assert sorted(samples) == ["img/0", "img/1", "img/2"]
    for key, sample in samples.items():
        i = int(key[-1])
        assert [k for k in sample if not k.startswith("__")] == ["jpg", "json", "cls"]
        assert json.loads(sample["json"]) == {"id": i, "tags": ["a"]}
        assert sample["cls"] == (b"0" if i else b"1")  # classes: cat, dog
