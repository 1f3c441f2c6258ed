"""Other sources: CSV/JSONL lists, Python datasets and iterables, existing shards."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.build import (
    make_corpus,
    make_corpus_jpeg,
    make_png,
    read_samples,
    run_cli,
    snapshot,
    write,
)

import shardkit
from shardkit import BuildOptions
from shardkit.errors import BuildError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("sources") / "src"), count=24, bad=False)


def _images(corpus: str) -> list[str]:
    return sorted(
        f"{c}/{f}" for c in sorted(os.listdir(corpus)) for f in os.listdir(os.path.join(corpus, c))
    )


def test_csv_list_with_class_names_and_extra_columns(corpus: str, tmp_path: Path) -> None:
    rows = ["path,label,source"]
    for i, rel in enumerate(_images(corpus)[:12]):
        rows.append(f"{os.path.join(corpus, rel)},{'cat' if i % 2 else 'dog'},web{i}")
    rows += ["missing.jpg,cat,x", "notes.txt,dog,y"]
    listing = tmp_path / "list.csv"
    listing.write_text("\n".join(rows) + "\n")
    out = str(tmp_path / "out")
    result = shardkit.build(str(listing), out, options=BuildOptions(workers=2, max_count=5))
    assert result.samples == 12
    assert {p for p, _ in result.skipped} == {"missing.jpg", "notes.txt"}
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["class_to_idx"] == {"cat": 0, "dog": 1}
    assert manifest["class_counts"] == {"cat": 6, "dog": 6}
    for sample in read_samples(out):
        meta = json.loads(sample["json"])
        assert meta["source"].startswith("web") and meta["class"] in ("cat", "dog")
        assert int(sample["cls"]) == meta["label"] == ("cat", "dog").index(meta["class"])
        with open(meta["path"], "rb") as f:
            assert f.read() == sample["jpg"]


def test_jsonl_list_with_relative_paths_and_int_labels(corpus: str, tmp_path: Path) -> None:
    listing = Path(corpus).parent / "list.jsonl"
    rels = [f"src/{rel}" for rel in _images(corpus)]
    lines = [json.dumps({"file": rel, "y": i % 4, "w": 0.5}) for i, rel in enumerate(rels)]
    listing.write_text("\n".join(lines) + "\n\n")
    out = str(tmp_path / "out")
    options = BuildOptions(path_column="file", label_column="y", workers=1, shuffle=False)
    result = shardkit.build(str(listing), out, options=options)
    assert result.samples == 24
    samples = read_samples(out)
    assert [json.loads(s["json"])["path"] for s in samples] == rels
    assert [int(s["cls"]) for s in samples] == [i % 4 for i in range(24)]
    assert all(json.loads(s["json"])["w"] == 0.5 for s in samples)


def test_list_errors_are_one_line(corpus: str, tmp_path: Path) -> None:
    listing = tmp_path / "list.csv"
    listing.write_text("image,label\na.jpg,1\n")
    result = run_cli(str(listing), str(tmp_path / "out"))
    assert result.returncode == 2 and "no 'path' column" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert not os.path.exists(tmp_path / "out")
    listing.write_text("path\n")
    with pytest.raises(BuildError, match="no rows"):
        shardkit.build(str(listing), str(tmp_path / "o"))


class Squares:
    """A map-style dataset (picklable: defined at module level)."""

    classes = ("even", "odd")

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from PIL import Image

        return Image.new("L", (8 + i % 5, 8), color=i * 5), i % 2


def to_sample(item: tuple[Any, int]) -> dict[str, Any]:
    image, label = item
    return {"png": image, "cls": label, "txt": f"square of size {image.size}"}


def test_map_style_dataset_is_the_same_for_1_and_2_workers(tmp_path: Path) -> None:
    snaps = []
    for workers in (1, 2):
        out = str(tmp_path / f"w{workers}")
        options = BuildOptions(workers=workers, max_count=7, seed=3)
        result = shardkit.build(Squares(), out, options=options, to_sample=to_sample)
        assert result.samples == 40 and len(result.shards) == 6
        snaps.append(snapshot(out))
    assert snaps[0] == snaps[1]
    samples = read_samples(str(tmp_path / "w1"))
    assert sorted(s["__key__"] for s in samples) == [f"{i:08d}" for i in range(40)]
    with open(tmp_path / "w1" / "manifest.json") as f:
        manifest = json.load(f)
    assert manifest["class_to_idx"] == {"even": 0, "odd": 1}
    assert manifest["class_counts"] == {"even": 20, "odd": 20}


def test_default_to_sample_and_unpicklable_functions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = shardkit.build(Squares(), str(tmp_path / "plain"), options=BuildOptions(workers=1))
    sample = read_samples(str(tmp_path / "plain"))[0]
    assert set(sample) >= {"png", "cls"} and plain.samples == 40
    with caplog.at_level(logging.WARNING):
        shardkit.build(
            Squares(),
            str(tmp_path / "lambda"),
            options=BuildOptions(workers=2, max_count=5),
            to_sample=lambda item: {"png": item[0], "cls": item[1]},
        )
    assert "does not pickle" in caplog.text
    assert snapshot(str(tmp_path / "lambda"))["manifest.json"]["samples"] == 40


def test_generator_is_packed_in_order(tmp_path: Path) -> None:
    def samples() -> Any:
        for i in range(25):
            yield {"__key__": f"gen/{i:03d}", "txt": f"text {i}", "cls": i % 3}

    out = str(tmp_path / "out")
    result = shardkit.build(samples(), out, options=BuildOptions(max_count=10))
    assert [s.samples for s in result.shards] == [10, 10, 5]
    assert [s["__key__"] for s in read_samples(out)] == [f"gen/{i:03d}" for i in range(25)]


def test_bad_python_samples_are_skipped_or_fail(tmp_path: Path) -> None:
    items = [{"txt": "ok"}, {"weird": object()}, {"__key__": "a.b", "txt": "dot"}, {"txt": "ok"}]
    result = shardkit.build(items, str(tmp_path / "skip"), options=BuildOptions(shuffle=False))
    assert result.samples == 2 and [p for p, _ in result.skipped] == ["item 1", "item 2"]
    from shardkit.errors import DataError

    with pytest.raises(DataError):
        shardkit.build(items, str(tmp_path / "fail"), options=BuildOptions(on_error="fail"))


def test_reshard_reshuffle_and_change_format(corpus: str, tmp_path: Path) -> None:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    first = str(tmp_path / "first")
    shardkit.build(corpus, first, options=BuildOptions(max_count=5, workers=2))
    pattern = os.path.join(first, "shard-{000000..000004}.tar")
    again = str(tmp_path / "again")
    shardkit.build(pattern, again, options=BuildOptions(max_count=9, seed=4, workers=2))
    before = {s["__key__"]: s for s in read_samples(first)}
    after = read_samples(again)
    assert len(after) == 24 and [s["__key__"] for s in after] != list(before)
    for sample in after:
        assert sample["jpg"] == before[sample["__key__"]]["jpg"]
        assert sample["json"] == before[sample["__key__"]]["json"]
    tf_out = str(tmp_path / "tf")
    shardkit.build(pattern, tf_out, options=BuildOptions(format="tfrecord", workers=1))
    names = sorted(n for n in os.listdir(tf_out) if n.endswith(".tfrecord"))
    with open(os.path.join(tf_out, names[0]), "rb") as f:
        features = decode_example(next(iter_records(f))[1])
    assert features["image/format"] == [b"jpeg"] and features["image/height"][0] > 0
    back = str(tmp_path / "back")
    shardkit.build(os.path.join(tf_out, names[0]), back, options=BuildOptions(shuffle=False))
    for sample in read_samples(back):
        original = before[sample["__key__"]]
        assert sample["jpg"] == original["jpg"] and sample["cls"] == original["cls"]
        assert json.loads(sample["json"])["path"] == json.loads(original["json"])["path"]


def test_png_list_items_from_urls_are_not_supported_offline(tmp_path: Path) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    (folder / "a.png").write_bytes(make_png(1))
    listing = tmp_path / "list.csv"
    listing.write_text("path,label\nimgs/a.png,0\n")
    result = shardkit.build(str(listing), str(tmp_path / "out"), options=BuildOptions())
    assert result.samples == 1 and read_samples(str(tmp_path / "out"))[0]["png"] == make_png(1)


def test_python_samples_to_tfrecord_encode_images_and_keep_numbers(tmp_path: Path) -> None:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    out = str(tmp_path / "out")
    options = BuildOptions(format="tfrecord", workers=2, max_count=16, shuffle=False)
    result = shardkit.build(Squares(), out, options=options, to_sample=to_sample)
    assert result.samples == 40
    features = []
    for shard in result.shards:
        with open(os.path.join(out, shard.name), "rb") as f:
            features += [decode_example(record) for _, record in iter_records(f)]
    assert [f["cls"][0] for f in features] == [i % 2 for i in range(40)]
    assert all(f["png"][0].startswith(b"\x89PNG") for f in features)
    assert features[3]["__key__"] == [b"00000003"]


def _imgs(base: Path) -> list[str]:
    """base/imgs/class{0,1}/0160{0..2}.jpg; returns their paths relative to base."""
    rels = [f"imgs/class{i % 2}/{1600 + i:05d}.jpg" for i in range(3)]
    for i, rel in enumerate(rels):
        write(str(base), rel, make_corpus_jpeg(i))
    return rels


def _keys(out: str) -> list[str]:
    return sorted(s["__key__"] for s in read_samples(out))


def test_keys_from_list_paths_are_relative_not_mangled(tmp_path: Path) -> None:
    rels = _imgs(tmp_path)
    lists = tmp_path / "meta" / "lists"
    lists.mkdir(parents=True)
    (lists / "up.csv").write_text("path,label\n" + "".join(f"../../{r},1\n" for r in rels))
    out = str(tmp_path / "up")
    shardkit.build(str(lists / "up.csv"), out, options=BuildOptions(workers=1))
    assert _keys(out) == ["class0/01600", "class0/01602", "class1/01601"]  # not __/__/imgs/...
    absolute = "".join(f"{tmp_path / r},1\n" for r in rels)
    (lists / "abs.csv").write_text("path,label\n" + absolute)
    out = str(tmp_path / "abs")
    shardkit.build(str(lists / "abs.csv"), out, options=BuildOptions(workers=1))
    assert _keys(out) == ["class0/01600", "class0/01602", "class1/01601"]  # not tmp/pytest-...
    (tmp_path / "beside.csv").write_text("path,label\n" + "".join(f"{r},1\n" for r in rels))
    out = str(tmp_path / "beside")
    shardkit.build(str(tmp_path / "beside.csv"), out, options=BuildOptions(workers=1))
    assert _keys(out) == ["imgs/class0/01600", "imgs/class0/01602", "imgs/class1/01601"]


def test_root_is_where_relative_paths_are_read_from_and_keys_start(tmp_path: Path) -> None:
    rels = _imgs(tmp_path / "data")
    (tmp_path / "list.jsonl").write_text("".join(json.dumps({"path": r}) + "\n" for r in rels))
    out = str(tmp_path / "out")
    done = run_cli(str(tmp_path / "list.jsonl"), out, "--root", str(tmp_path / "data"), "-q")
    assert done.returncode == 0, done.stderr
    assert _keys(out) == ["imgs/class0/01600", "imgs/class0/01602", "imgs/class1/01601"]
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f)["options"]["root"] == str(tmp_path / "data")
    with pytest.raises(shardkit.ConfigError, match="root applies to a CSV/JSONL list only"):
        shardkit.build(str(tmp_path / "data"), str(tmp_path / "o"), options=BuildOptions(root="x"))


def test_repeated_and_empty_rows_are_each_skipped_with_the_reason(tmp_path: Path) -> None:
    rels = _imgs(tmp_path)
    rows = [rels[0], f"imgs/../{rels[0]}", "", rels[1], rels[1], "  ", rels[2]]
    (tmp_path / "list.csv").write_text("path,label\n" + "".join(f"{r},1\n" for r in rows))
    out = str(tmp_path / "out")
    result = shardkit.build(str(tmp_path / "list.csv"), out, options=BuildOptions(workers=1))
    assert result.samples == 3
    expected = [
        (f"imgs/../{rels[0]}", f"listed twice: row 1 lists it already as {rels[0]!r}"),
        ("row 3", "empty 'path' cell"),
        (rels[1], "listed twice: row 4 lists it already"),
        ("row 6", "empty 'path' cell"),
    ]
    assert sorted(result.skipped) == sorted(expected)
    with open(os.path.join(out, "manifest.json")) as f:
        listed = {(r["path"], r["reason"]) for r in json.load(f)["skipped"]}
    assert listed == set(expected)
    lines = [{"path": rels[0]}, {"path": None}, {"path": rels[0]}, {"path": rels[1]}]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    result = shardkit.build(str(tmp_path / "list.jsonl"), str(tmp_path / "o2"))
    assert result.samples == 2
    assert sorted(result.skipped) == [
        (rels[0], "listed twice: row 1 lists it already"),
        ("row 2", "empty 'path' cell"),
    ]


def _labelled(tmp_path: Path, labels: list[str]) -> str:
    for i in range(len(labels)):
        write(str(tmp_path), f"imgs/{i:02d}.jpg", make_corpus_jpeg(i))
    rows = "".join(f"imgs/{i:02d}.jpg,{label}\n" for i, label in enumerate(labels))
    (tmp_path / "list.csv").write_text("path,label\n" + rows)
    return str(tmp_path / "list.csv")


def test_an_empty_label_skips_its_row_and_integer_labels_stay_integers(tmp_path: Path) -> None:
    listing = _labelled(tmp_path, ["2", "10", "", "3", " "])
    out = str(tmp_path / "out")
    result = shardkit.build(listing, out, options=BuildOptions(workers=1, shuffle=False))
    assert sorted(result.skipped) == [
        ("imgs/02.jpg", "no label (empty 'label' cell)"),
        ("imgs/04.jpg", "no label (empty 'label' cell)"),
    ]
    assert [int(s["cls"]) for s in read_samples(out)] == [2, 10, 3]
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f)["num_classes"] == 11
    lines = [{"path": f"imgs/{i:02d}.jpg", "label": v} for i, v in enumerate([2, None, 10])]
    (tmp_path / "list.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    out = str(tmp_path / "jsonl")
    result = shardkit.build(str(tmp_path / "list.jsonl"), out, options=BuildOptions(shuffle=False))
    assert result.skipped == [("imgs/01.jpg", "no label (empty 'label' cell)")]
    assert [int(s["cls"]) for s in read_samples(out)] == [2, 10]


def test_a_label_past_the_class_bound_is_one_line(tmp_path: Path) -> None:
    listing = _labelled(tmp_path, ["1", "10000000"])
    done = run_cli(listing, str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: {listing}: label 10000000 is too large: an integer label is a class number, "
        "below 1,000,000 (one class per number up to the highest); give the classes names "
        "instead"
    ]
    assert not os.path.exists(tmp_path / "out")


def test_a_named_label_column_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    listing = _labelled(tmp_path, ["1", "2"])
    done = run_cli(listing, str(tmp_path / "out"), "--label-column", "lable")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: {listing}: no 'lable' column (columns: path, label); name the label "
        "column with --label-column ('' for none)"
    ]
    assert not os.path.exists(tmp_path / "out")
    unlabeled = tmp_path / "plain.csv"
    unlabeled.write_text("path\nimgs/00.jpg\n")  # no column named: none expected
    assert shardkit.build(str(unlabeled), str(tmp_path / "o")).samples == 1


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_a_cell_keeps_its_text_unless_its_column_is_wholly_canonical_numbers(
    tmp_path: Path, fmt: str
) -> None:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    cells = [("001257", "3", "2.5", "1.50", "7"), ("000042", "14", "0.1", "2", "")]
    for i in range(2):
        write(str(tmp_path), f"imgs/{i}.jpg", make_corpus_jpeg(i))
    rows = "".join(f"imgs/{i}.jpg,{','.join(c)}\n" for i, c in enumerate(cells))
    (tmp_path / "list.csv").write_text("path,id,n,f,padded,some\n" + rows)
    out = str(tmp_path / "out")
    options = BuildOptions(format=fmt, shuffle=False, workers=1)  # type: ignore[arg-type]
    shardkit.build(str(tmp_path / "list.csv"), out, options=options)
    expected = [
        {"id": "001257", "n": 3, "f": 2.5, "padded": "1.50", "some": 7},
        {"id": "000042", "n": 14, "f": 0.1, "padded": "2", "some": ""},
    ]
    if fmt == "tar":
        metas = [json.loads(s["json"]) for s in read_samples(out)]
        assert [{k: m[k] for k in expected[0]} for m in metas] == expected
        return
    name = next(n for n in os.listdir(out) if n.endswith(".tfrecord"))
    with open(os.path.join(out, name), "rb") as f:
        features = [decode_example(record) for _, record in iter_records(f)]
    assert features[0]["id"] == [b"001257"] and features[1]["id"] == [b"000042"]
    assert [f["n"] for f in features] == [[3], [14]]
    assert features[0]["padded"] == [b"1.50"] and features[0]["some"] == [7]


def test_a_list_whose_every_row_is_skipped_fails_with_the_reasons(tmp_path: Path) -> None:
    (tmp_path / "list.csv").write_text("path\nmissing.jpg\nnotes.txt\n")
    out = str(tmp_path / "out")
    with pytest.raises(shardkit.EmptyBuildError, match="all 2 files found were skipped") as caught:
        shardkit.build(str(tmp_path / "list.csv"), out)
    assert caught.value.skipped == [
        ("missing.jpg", "cannot read: No such file or directory"),
        ("notes.txt", "not an image file (extension 'txt')"),
    ]
    assert not os.path.exists(out)
    back = pickle.loads(pickle.dumps(caught.value))  # e.g. from a Ray driver
    assert type(back) is shardkit.EmptyBuildError and back.skipped == caught.value.skipped
    assert str(back) == str(caught.value)


def test_second_build_in_one_process_reads_the_rewritten_input_shards(tmp_path: Path) -> None:
    """Regression (#11): the open-stream cache outlived the build that filled it, so a
    second inline build after the inputs were rewritten packed the old bytes."""
    shard = str(tmp_path / "in-000000.tar")

    def write_input(text: str) -> None:
        with shardkit.ShardWriter(str(tmp_path / "in-%06d.tar")) as sink:
            for i in range(3):
                sink.write({"__key__": f"k{i}", "txt": f"{text}-{i}"})

    write_input("old")
    shardkit.build(shard, str(tmp_path / "a"), options=BuildOptions(workers=1, shuffle=False))
    write_input("new!")  # another length: the offsets move too
    shardkit.build(shard, str(tmp_path / "b"), options=BuildOptions(workers=1, shuffle=False))
    texts = [s["txt"] for s in read_samples(str(tmp_path / "b"))]
    assert texts == [b"new!-0", b"new!-1", b"new!-2"]


def test_a_url_whose_scheme_needs_a_missing_module_stops_before_anything_is_written(
    tmp_path: Path,
) -> None:
    listing = _labelled(tmp_path, ["1", "2", "3"])
    with open(listing, "a") as f:
        f.write("gs://bucket/a.jpg,1\nftpx://host/b.jpg,2\n")
    out = str(tmp_path / "out")
    code = (
        "import sys; sys.modules['gcsfs'] = None; from shardkit.cli import main; "
        f"sys.exit(main(['build', {listing!r}, {out!r}, '-q']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: {listing}: row 4 is a gs:// URL: gs:// URLs needs gcsfs, which is not "
        "installed: pip install 'shardkit[gcs]'"
    ]
    assert not os.path.exists(out)  # not stopped mid-way: nothing was written
