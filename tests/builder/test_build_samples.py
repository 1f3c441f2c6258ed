"""A folder of samples of several files (issue 22, "Build: any sample"): grouping by the
path without extensions, the field rules, each field checked by its kind, and the
class and samples layouts; the mixed jpg/txt/json/flac/mp4 folder of "Done when"."""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import webdataset as wds
from helpers.build import (
    make_corpus_jpeg,
    make_flac,
    make_mp4,
    make_png,
    read_samples,
    resume_after,
    run_cli,
    snapshot,
    write,
)

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _spill as spill_module
from shardkit.errors import ConfigError, DataError, MissingDependencyError

RATE = 16000


# The bad files of the mixed folder: (path, what its reason says).
BAD = {
    "00000/000000003.jpg": "truncated JPEG",
    "00000/000000004.txt": "UTF-8",
    "00000/000000005.json": "JSON",
    "00000/000000006.flac": "audio",
    "00000/000000007.mp4": "truncated MP4",
    "00001/000000013.flac": "empty file",
    "00001/000000014.mp4": "video",
}
# Files that are no sample's: (path, reason).
STRAY = {
    "00000_stats.json": "no image, audio or video file shares its name (extension 'json')",
    "00000/notes.xyz": "unknown field extension 'xyz'",
    "00000/000000001.parquet": "unknown field extension 'parquet'",
    "00000/LICENSE": "no extension: a field needs one",
}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[str, bytes]]]:
    """img2dataset's layout: ``0000N/00000000K.{jpg,txt,json}``, with flac or mp4 in some
    samples; the files of ``BAD`` corrupt. Returns the folder and the good samples' files
    by key and field."""
    src = str(tmp_path_factory.mktemp("mixed") / "src")
    flac, mp4 = make_flac(), make_mp4()
    good: dict[str, dict[str, bytes]] = {}
    for i in range(16):
        key = f"{i // 10:05d}/{i:09d}"
        fields = {
            "jpg": make_corpus_jpeg(i),
            "txt": f"caption {i}: a cat, ünïcödé".encode(),
            "json": json.dumps({"url": f"http://x/{i}.jpg", "caption": f"c{i}"}).encode(),
        }
        if i % 2 == 0:
            fields["flac"] = make_flac(seed=i)
        if i % 3 == 0:
            fields["mp4"] = mp4
        for ext in ("flac", "mp4"):  # the bad ones are added where a sample had none
            if f"{key}.{ext}" in BAD:
                fields[ext] = flac if ext == "flac" else mp4
        for ext, data in fields.items():
            write(src, f"{key}.{ext}", _CORRUPT.get(f"{key}.{ext}", lambda d: d)(data))
        if not any(f"{key}.{ext}" in BAD for ext in fields):
            good[key] = fields
    for rel in STRAY:
        write(src, rel, b'{"count": 16}' if rel.endswith(".json") else b"stray")
    write(src, "00000/.DS_Store", b"hidden")  # hidden: neither packed nor listed
    return src, good


_CORRUPT = {
    "00000/000000003.jpg": lambda d: d[: len(d) // 2],
    "00000/000000004.txt": lambda d: b"caption \xff\xfe not UTF-8",
    "00000/000000005.json": lambda d: b'{"caption": "cut sh',
    "00000/000000006.flac": lambda d: d[: len(d) // 2],
    "00000/000000007.mp4": lambda d: d[: len(d) // 2],
    "00001/000000013.flac": lambda d: b"",
    "00001/000000014.mp4": lambda d: b"no video in here at all" * 4,
}


def _fields(sample: dict[str, object]) -> set[str]:
    return {name for name in sample if not name.startswith("__")}


def _webdataset_samples(urls: list[str]) -> list[dict[str, bytes]]:
    """What webdataset reads; the files it leaves open are collected here, where their
    ResourceWarning is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        read = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
        gc.collect()
    return read


def test_a_mixed_folder_packs_its_good_samples_and_lists_every_bad_file(
    mixed: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    src, good = mixed
    options = BuildOptions(layout="samples", max_count=4, workers=1)
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=options)

    skipped = dict(result.skipped)
    assert set(skipped) == set(BAD) | set(STRAY)
    for path, what in BAD.items():
        assert what in skipped[path] and skipped[path].endswith("its sample is skipped")
    for path, reason in STRAY.items():
        assert skipped[path] == reason
    with open(os.path.join(out, "manifest.json")) as f:
        listed = {s["path"]: s["reason"] for s in json.load(f)["skipped"]}
    assert listed == skipped

    # webdataset reads every good sample back, byte for byte; no bad sample is packed.
    urls = [os.path.join(out, s.name) for s in result.shards]
    read = _webdataset_samples(urls)
    got = {s["__key__"]: {k: v for k, v in s.items() if not k.startswith("__")} for s in read}
    assert got == good
    assert result.samples == len(good) == 9

    # The audio and video fields decode through shardkit's decoders.
    dataset = shardkit.Dataset(out).decode(shardkit.audio(), shardkit.video(frames=4))
    audio = video = 0
    for sample in dataset:
        if "flac" in sample:
            samples, rate = sample["flac"]
            assert rate == RATE and samples.dtype == np.float32 and samples.shape == (2, 4000)
            audio += 1
        if "mp4" in sample:
            frames, times = sample["mp4"]
            assert frames.shape == (4, 24, 32, 3) and frames.dtype == np.uint8
            assert len(times) == 4
            video += 1
    assert audio == sum("flac" in f for f in good.values()) > 0
    assert video == sum("mp4" in f for f in good.values()) > 0


def test_the_same_bytes_with_two_workers_and_after_a_resume(
    mixed: tuple[str, dict[str, dict[str, bytes]]], tmp_path: Path
) -> None:
    src, _ = mixed
    options = BuildOptions(layout="samples", max_count=3, workers=1)
    one = str(tmp_path / "one")
    shardkit.build(src, one, options=options)
    two = str(tmp_path / "two")
    shardkit.build(src, two, options=BuildOptions(layout="samples", max_count=3, workers=2))
    assert snapshot(two) == snapshot(one)

    resumed = str(tmp_path / "resumed")
    resume_after(src, resumed, options)
    assert snapshot(resumed) == snapshot(one)


def test_the_class_layout_groups_too_with_cls_from_the_folder(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    jpg, png = make_corpus_jpeg(1), make_png(2)
    write(src, "cat/0001.jpg", jpg)
    write(src, "cat/0001.txt", b"a cat")
    write(src, "cat/0002.jpg", jpg)  # one image: packed as before
    write(src, "cat/0002.cls", b"7")  # the folder gives cls
    write(src, "dog/0003.JPEG", jpg)
    write(src, "dog/0003.Seg.PNG", png)
    write(src, "dog/0003.json", b'{"own": true}')  # a sample's own json wins
    write(src, "dog/a.jpg", jpg)  # images alone: one sample each, as before
    write(src, "dog/a.png", png)
    write(src, "dog/0004.flac", make_flac())
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(workers=1, shuffle=False))
    assert result.skipped == [("cat/0002.cls", "the class folder gives cls in the class layout")]
    samples = {s["__key__"]: s for s in read_samples(out)}
    assert sorted(samples) == [
        "cat/0001",
        "cat/0002",
        "dog/0003",
        "dog/0004",
        "dog/a_jpg",
        "dog/a_png",
    ]
    first = samples["cat/0001"]
    assert (first["jpg"], first["txt"], first["cls"]) == (jpg, b"a cat", b"0")
    assert json.loads(first["json"]) == {"path": "cat/0001.jpg", "class": "cat", "label": 0}
    assert json.loads(samples["cat/0002"]["json"])["path"] == "cat/0002.jpg"
    third = samples["dog/0003"]
    assert _fields(third) == {"jpg", "seg.png", "json", "cls"}
    assert third["json"] == b'{"own": true}' and third["cls"] == b"1"
    assert samples["dog/0004"]["flac"] == make_flac()
    assert samples["dog/a_png"]["png"] == png


def test_field_rules_one_spelling_a_field_twice_and_no_media(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    jpg = make_corpus_jpeg(3)
    write(src, "a.JPG", jpg)
    write(src, "a.TXT", b"upper case")
    write(src, "b.jpg", jpg)
    write(src, "b.jpeg", jpg)  # both give jpg: the sample is skipped
    write(src, "c.txt", b"text alone")  # no media: skipped
    write(src, "c.json", b"{}")
    write(src, "sub/d.e.jpg", jpg)  # the key is the path up to the first dot
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(layout="samples", workers=1))
    twice = "two files give the field 'jpg': the sample is skipped"
    no_media = "no image, audio or video file shares its name (extension {!r})"
    assert result.skipped == [
        ("b.jpeg", twice),
        ("b.jpg", twice),
        ("c.json", no_media.format("json")),
        ("c.txt", no_media.format("txt")),
    ]
    samples = {s["__key__"]: s for s in read_samples(out)}
    assert set(samples) == {"a", "sub/d"}
    assert samples["a"]["jpg"] == jpg and samples["a"]["txt"] == b"upper case"
    assert _fields(samples["sub/d"]) == {"e.jpg"}
    assert "cls" not in samples["a"] and "json" not in samples["a"]


def test_a_picture_under_another_name_is_stored_by_its_content(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    write(src, "x.jpg", make_png(4))  # a PNG named .jpg
    write(src, "x.txt", b"caption")
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(layout="samples", workers=1))
    (sample,) = read_samples(out)
    assert _fields(sample) == {"png", "txt"}


def test_on_error_fail_names_the_bad_file(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    write(src, "x.jpg", make_corpus_jpeg(5))
    write(src, "x.json", b"{not json")
    options = BuildOptions(layout="samples", workers=1, on_error="fail")
    with pytest.raises(DataError, match="JSON") as info:
        shardkit.build(src, str(tmp_path / "out"), options=options)
    assert info.value.url == "x.json"


def test_a_missing_extra_is_loud_not_a_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = str(tmp_path / "src")
    write(src, "x.flac", make_flac())
    write(src, "x.txt", b"hello")
    monkeypatch.setitem(sys.modules, "soundfile", None)
    with pytest.raises(MissingDependencyError, match=r"shardkit\[audio\]"):
        shardkit.build(
            src, str(tmp_path / "out"), options=BuildOptions(layout="samples", workers=1)
        )


def test_validate_none_packs_without_checking(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    write(src, "x.flac", b"not flac")
    write(src, "x.txt", b"\xff")
    out = str(tmp_path / "out")
    options = BuildOptions(layout="samples", workers=1, validate="none")
    result = shardkit.build(src, out, options=options)
    assert result.samples == 1 and not result.skipped


def test_the_layout_option_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="layout must be one of classes, samples"):
        BuildOptions(layout="flat")  # type: ignore[arg-type]
    table = tmp_path / "list.csv"
    table.write_text("path,label\na.jpg,0\n")
    with pytest.raises(ConfigError, match="layout='samples' applies to a folder"):
        shardkit.build(str(table), str(tmp_path / "out"), options=BuildOptions(layout="samples"))
    # A folder with no class folders names the layout that packs it.
    src = str(tmp_path / "flat")
    write(src, "x.jpg", make_corpus_jpeg(6))
    with pytest.raises(shardkit.BuildError, match="--layout samples"):
        shardkit.build(src, str(tmp_path / "out2"))


def test_the_cli_takes_the_layout(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    write(src, "0/x.jpg", make_corpus_jpeg(7))
    write(src, "0/x.txt", b"a caption")
    out = str(tmp_path / "out")
    done = run_cli(src, out, "--layout", "samples", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1 sample in 1 shard")
    (sample,) = read_samples(out)
    assert sample["__key__"] == "0/x" and sample["txt"] == b"a caption"


def test_a_listing_larger_than_the_budget_gives_the_same_bytes(
    mixed: tuple[str, dict[str, dict[str, bytes]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src, _ = mixed
    options = BuildOptions(layout="samples", max_count=4, workers=1, shuffle=False)
    held = str(tmp_path / "held")
    shardkit.build(src, held, options=options)
    monkeypatch.setattr(spill_module, "ORDER_BUDGET", 4)  # sorted runs, samples on disk
    spilled = str(tmp_path / "spilled")
    shardkit.build(src, spilled, options=options)
    assert snapshot(spilled) == snapshot(held)


def test_a_sample_is_whole_even_when_a_folder_sorts_between_its_files(tmp_path: Path) -> None:
    """``a.b/c.jpg`` sorts between ``a.a.txt`` and ``a.jpg``: ``a`` still gets both."""
    src = str(tmp_path / "src")
    jpg = make_corpus_jpeg(8)
    for rel in ("a.a.txt", "a.b/c.jpg", "a.jpg", "a.z.json"):
        write(src, rel, b'{"k": 1}' if rel.endswith(".json") else jpg if "jpg" in rel else b"t")
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(layout="samples", shuffle=False))
    assert not result.skipped
    samples = read_samples(out)
    assert [s["__key__"] for s in samples] == ["a", "a.b/c"]  # the order of first files
    assert _fields(samples[0]) == {"a.txt", "jpg", "z.json"}


def test_a_tfrecord_build_keeps_the_field_names(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    jpg = make_corpus_jpeg(9)
    write(src, "c/a.jpg", jpg)
    write(src, "c/a.txt", b"hi")
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(format="tfrecord", workers=1))
    (sample,) = shardkit.Dataset(out)
    assert (sample["jpg"], sample["txt"], sample["cls"]) == (jpg, b"hi", 0)
    assert json.loads(sample["json"]) == {"path": "c/a.jpg", "class": "c", "label": 0}


def test_the_example_of_docs_build_md_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (Path(__file__).parents[2] / "docs" / "build.md").read_text()
    section = text.split("### Folders of samples", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    write("laion-part", "00000/000000001.jpg", make_corpus_jpeg(10))
    write("laion-part", "00000/000000001.txt", b"a caption")
    write("laion-part", "00000_stats.json", b"{}")
    exec(compile(example, "docs/build.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1 skipped: every one in shards/skipped.jsonl"
    assert lines[1].startswith("00000_stats.json no image, audio or video")
    (sample,) = read_samples("shards")
    assert sample["__key__"] == "00000/000000001" and sample["txt"] == b"a caption"
