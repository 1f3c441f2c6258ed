"""shardkit build on image folders: determinism, validation, keys, manifest, progress."""

from __future__ import annotations

import json
import os
from pathlib import Path

import blake3
import pytest
from helpers.build import (
    BAD_FILES,
    make_corpus,
    make_corpus_jpeg,
    make_png,
    read_samples,
    snapshot,
    write,
)

import shardkit
from shardkit import BuildOptions, BuildProgress
from shardkit.errors import BuildError, DataError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("build") / "src"), count=150)


def _outputs(shards: list[str], *, skipped: bool) -> list[str]:
    """What a build writes: the manifest, each shard with its .idx, and the skipped list."""
    names = ["manifest.json", *shards, *(name + ".idx" for name in shards)]
    return sorted([*names, "skipped.jsonl"] if skipped else names)


def test_same_bytes_for_1_2_and_4_workers(corpus: str, tmp_path: Path) -> None:
    snaps = []
    for workers in (1, 2, 4):
        out = str(tmp_path / f"w{workers}")
        options = BuildOptions(max_count=16, workers=workers, seed=7)
        result = shardkit.build(corpus, out, options=options)
        assert result.samples == 150 and len(result.shards) == 10
        snaps.append(snapshot(out))
    assert snaps[0] == snaps[1] == snaps[2]
    shards = [f"shard-{i:06d}.tar" for i in range(10)]
    # Each shard with its .idx (the default): the same bytes for any number of workers too.
    assert sorted(snaps[0]) == _outputs(shards, skipped=True)


def test_every_good_image_packed_once_with_its_bytes(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    shardkit.build(corpus, out, options=BuildOptions(max_count=40, workers=2))
    samples = read_samples(out)
    assert len(samples) == 150
    assert len({s["__key__"] for s in samples}) == 150
    for sample in samples:
        meta = json.loads(sample["json"])
        with open(os.path.join(corpus, meta["path"]), "rb") as f:
            assert sample["jpg"] == f.read()
        assert int(sample["cls"]) == meta["label"]
        assert sample["__key__"].split("/")[0] == meta["class"]
        assert set(sample) == {"__key__", "__url__", "__offset__", "jpg", "cls", "json"}


def test_shuffle_is_seeded(corpus: str, tmp_path: Path) -> None:
    def keys(name: str, **kw: object) -> list[str]:
        out = str(tmp_path / name)
        shardkit.build(corpus, out, options=BuildOptions(workers=1, **kw))  # type: ignore[arg-type]
        return [s["__key__"] for s in read_samples(out)]

    plain = keys("plain", shuffle=False)
    assert plain == sorted(plain, key=lambda k: (k.split("/")[0], k))
    one, again, other = keys("a", seed=1), keys("b", seed=1), keys("c", seed=2)
    assert one == again != other
    assert sorted(one) == sorted(plain) and one != plain


def test_bad_files_are_skipped_and_reported(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = shardkit.build(corpus, out, options=BuildOptions(workers=2, max_count=50))
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    reasons = {s["path"]: s["reason"] for s in manifest["skipped"]}
    assert set(reasons) == set(BAD_FILES)
    for path, reason in BAD_FILES.items():
        assert reason in reasons[path], (path, reasons[path])
    assert sorted(result.skipped) == sorted(reasons.items())
    packed = {json.loads(s["json"])["path"] for s in read_samples(out)}
    assert not packed & set(BAD_FILES)


def test_on_error_fail_stops_with_the_path(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    with pytest.raises(DataError) as info:
        shardkit.build(corpus, out, options=BuildOptions(workers=2, on_error="fail"))
    assert info.value.url in BAD_FILES
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_truncated_files_rejected_by_validation_modes(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=6)
    padded = bytearray(make_png(3))
    write(src, "circle/padded.png", bytes(padded) + bytes(100))  # zero padding is fine
    for mode, expected in (("header", 7), ("full", 7), ("none", 7 + 4)):
        out = str(tmp_path / mode)
        result = shardkit.build(src, out, options=BuildOptions(validate=mode, workers=1))  # type: ignore[arg-type]
        assert result.samples == expected, mode


def test_full_validation_catches_corrupt_data_inside_a_complete_file(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=6, bad=False)
    png = bytearray(make_png(5, (64, 64)))
    png[60:70] = bytes(10)  # damage the IDAT data, keep IEND
    write(src, "square/damaged.png", bytes(png))
    header = shardkit.build(src, str(tmp_path / "h"), options=BuildOptions(workers=1))
    full = shardkit.build(src, str(tmp_path / "f"), options=BuildOptions(validate="full"))
    assert header.samples == 7 and full.samples == 6
    assert full.skipped[0][0] == "square/damaged.png"
    assert "cannot decode" in full.skipped[0][1]


# webdataset 1.0.2 leaves its shard files for the garbage collector to close.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_keys_are_unique_and_safe_for_the_first_dot_rule(tmp_path: Path) -> None:
    import webdataset as wds

    src = str(tmp_path / "src")
    png = make_png(1)
    write(src, "cls/a.jpg", make_corpus_jpeg())
    names = ["a.jpg", "a.png", "a.b.c.png", "a_b_c.png", "with space.png", "naïve 日本.png"]
    names += ["x.PNG", "x.png", "deep/er/x.png", "a_png.png"]
    for name in names[1:]:
        write(src, f"cls/{name}", png)
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(workers=1, shuffle=False))
    assert result.samples == len(names)
    dataset = wds.WebDataset(
        [os.path.join(out, s.name) for s in result.shards], shardshuffle=False, empty_check=False
    )
    read = list(dataset)
    assert len(read) == len(names)
    paths = [json.loads(s["json"])["path"] for s in read]
    assert sorted(paths) == sorted(f"cls/{n}" for n in names)
    keys = [s["__key__"] for s in read]
    assert len(set(keys)) == len(keys)
    by_path = dict(zip(paths, keys, strict=True))
    assert by_path["cls/a.b.c.png"] != by_path["cls/a_b_c.png"]
    assert by_path["cls/with space.png"] == "cls/with space"
    assert by_path["cls/naïve 日本.png"] == "cls/naïve 日本"
    assert by_path["cls/deep/er/x.png"] == "cls/deep/er/x"
    # The same stem with two extensions: told apart by the extension.
    assert by_path["cls/a.jpg"] == "cls/a_jpg"
    assert by_path["cls/a.png"] != "cls/a_png" or by_path["cls/a_png.png"] != "cls/a_png"


def test_content_decides_the_extension(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=3, bad=False)
    write(src, "circle/really_png.jpg", make_png(2))
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    sample = next(s for s in read_samples(out) if s["__key__"] == "circle/really_png")
    assert "png" in sample and "jpg" not in sample


def test_max_size_is_respected(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    limit = 120_000
    result = shardkit.build(corpus, out, options=BuildOptions(max_size=limit, workers=2))
    assert len(result.shards) > 5
    for shard in result.shards:
        assert os.path.getsize(os.path.join(out, shard.name)) == shard.bytes <= limit
        with open(os.path.join(out, shard.name), "rb") as f:
            assert shard.digest == "blake3:" + blake3.blake3(f.read()).hexdigest()
    # Cut from exact sizes: a shard is full when the next sample would not fit.
    sizes = [s.bytes for s in result.shards[:-1]]
    assert min(sizes) > limit // 2


def test_manifest_fields(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    shardkit.build(corpus, out, options=BuildOptions(max_count=64, workers=2, seed=3))
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == "tar"
    assert manifest["samples"] == 150 == sum(s["samples"] for s in manifest["shards"])
    assert manifest["class_to_idx"] == {"circle": 0, "square": 1, "stripes": 2}
    assert manifest["num_classes"] == 3
    assert manifest["class_counts"] == {"circle": 50, "square": 50, "stripes": 50}
    assert manifest["seed"] == 3 and manifest["options"]["max_count"] == 64
    assert "workers" not in manifest["options"]
    assert manifest["shardkit_version"] == shardkit.__version__
    assert set(manifest["timing"]) >= {"seconds", "workers"}
    names = [s["name"] for s in manifest["shards"]]
    assert sorted(os.listdir(out)) == _outputs(names, skipped=bool(manifest["skipped_count"]))


def test_progress_callback(corpus: str, tmp_path: Path) -> None:
    seen: list[BuildProgress] = []
    shardkit.build(
        corpus, str(tmp_path / "out"), options=BuildOptions(max_count=20), progress=seen.append
    )
    assert seen and seen[-1].samples == 150 and seen[-1].skipped == len(BAD_FILES)
    assert seen[-1].total == 150 + len(BAD_FILES) and seen[-1].shards == 8
    done = [p.samples + p.skipped for p in seen]
    assert done == sorted(done)


def test_rerun_is_a_no_op_and_other_options_need_overwrite(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    first = shardkit.build(corpus, out, options=BuildOptions(max_count=50))
    before = snapshot(out)
    again = shardkit.build(corpus, out, options=BuildOptions(max_count=50, workers=1))
    assert again.resumed_tasks == -1 and snapshot(out) == before
    assert again.shards == first.shards
    with pytest.raises(BuildError, match="overwrite"):
        shardkit.build(corpus, out, options=BuildOptions(max_count=30))
    assert snapshot(out) == before
    redo = shardkit.build(corpus, out, options=BuildOptions(max_count=30, overwrite=True))
    assert redo.samples == 150 and max(s.samples for s in redo.shards) == 30
    names = [f"shard-{i:06d}.tar" for i in range(len(redo.shards))]
    assert sorted(os.listdir(out)) == _outputs(names, skipped=bool(redo.skipped_count))


def test_changed_input_is_detected(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=9, bad=False)
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    write(src, "circle/new.png", make_png(9))
    with pytest.raises(BuildError, match="different dataset"):
        shardkit.build(src, out, options=BuildOptions(workers=1))


def test_source_errors(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="no such"):
        shardkit.build(str(tmp_path / "missing"), str(tmp_path / "o"))
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "a.jpg").write_bytes(b"x")
    with pytest.raises(BuildError, match="no class subfolders"):
        shardkit.build(str(flat), str(tmp_path / "o"))
    (flat / "empty_class").mkdir()
    with pytest.raises(BuildError, match="no images"):
        shardkit.build(str(flat), str(tmp_path / "o"))
    with pytest.raises(BuildError, match="inside the source"):
        shardkit.build(str(flat), str(flat / "out"))
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(flat / "out")


@pytest.mark.parametrize(
    "bad",
    [
        {"max_count": 0},
        {"max_size": "lots"},
        {"workers": -1},
        {"format": "zip"},
        {"validate": "maybe"},
        {"quality": 101},
        {"prefix": "a/b"},
        {"resize": 0},
    ],
)
def test_bad_options(bad: dict[str, object]) -> None:
    from shardkit.errors import ConfigError

    with pytest.raises(ConfigError):
        BuildOptions(**bad)  # type: ignore[arg-type]
