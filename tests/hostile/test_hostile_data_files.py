"""Data files are data: a manifest, a CSV/JSONL list, a build journal run no command and
name nothing outside their folder; names that are not UTF-8 keep the manifest strict JSON;
a manifest that under-counts a shard is an error, not silently dropped samples."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from helpers.build import make_corpus
from helpers.pipeline import keys, write_shards

import shardkit
from shardkit import BuildOptions
from shardkit.cli import main
from shardkit.errors import BuildError, ConfigError, FormatError

# --------------------------------------------------------------------------- pipe: in data


def _pipe_manifest(folder: str, marker: str) -> None:
    write_shards(folder, [2])
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"shards": [{"name": f"pipe:touch {marker}", "samples": 2}]}, f)


def test_a_pipe_shard_in_a_manifest_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, marker = str(tmp_path / "data"), str(tmp_path / "ran")
    _pipe_manifest(folder, marker)
    with pytest.raises(ConfigError, match="pipe: URL"):
        list(shardkit.Dataset(folder))
    for argv in (["cat", folder, "-o", str(tmp_path / "x.tar")], ["verify", folder]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and err.count("\n") == 1 and "pipe:" in err
    assert not os.path.exists(marker)


def test_a_pipe_shard_in_a_manifest_runs_only_when_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, marker = str(tmp_path / "data"), str(tmp_path / "ran")
    _pipe_manifest(folder, marker)
    shard = os.path.join(folder, "shard-000000.tar")
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"shards": [{"name": f"pipe:touch {marker} && cat {shard}"}]}, f)
    monkeypatch.setenv("SHARDKIT_ALLOW_PIPE", "all")
    assert keys(list(shardkit.Dataset(folder))) == ["s00000", "s00001"]
    assert os.path.exists(marker)


def test_a_pipe_row_in_a_build_list_runs_nothing_and_is_skipped(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=6, bad=False)
    marker = str(tmp_path / "ran")
    images = sorted(
        os.path.relpath(os.path.join(d, n), src) for d, _, ns in os.walk(src) for n in ns
    )
    row = f"pipe:touch {marker} # s3://bucket/x.jpg"
    with open(os.path.join(src, "list.csv"), "w") as f:
        f.write("path,label\n" + "".join(f"{p},{p.split('/')[0]}\n" for p in images))
        f.write(f"{row},circle\n")
    out = str(tmp_path / "out")
    assert main(["build", os.path.join(src, "list.csv"), out, "-q"]) == 0
    assert not os.path.exists(marker)
    with open(os.path.join(out, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["samples"] == len(images)
    (skipped,) = manifest["skipped"]
    assert skipped["path"] == row and "pipe:" in skipped["reason"]


@pytest.mark.parametrize("setting", ["maybe", "2", "enabled"])
def test_unknown_allow_pipe_settings_are_refused(
    setting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardkit.reader import read_shard

    monkeypatch.setenv("SHARDKIT_ALLOW_PIPE", setting)
    with pytest.raises(ConfigError, match="SHARDKIT_ALLOW_PIPE"):
        list(read_shard("pipe:true"))


# --------------------------------------------------------------------------- paths out of OUT


def _interrupted_build(src: str, out: str, options: BuildOptions) -> None:
    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=options, progress=stop)


@pytest.mark.parametrize("absolute", [False, True])
def test_a_forged_journal_cannot_move_a_file_from_outside_out(
    tmp_path: Path, absolute: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    src = make_corpus(str(tmp_path / "src"), count=30, bad=False)
    out = str(tmp_path / "out")
    _interrupted_build(src, out, BuildOptions(max_count=10, workers=1, seed=1))
    victim = tmp_path / "victim"
    secret = b"not yours\n" * 100
    victim.write_bytes(secret)
    journal = os.path.join(out, ".shardkit-build.journal")
    with open(journal) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    task = next(record for record in lines if record.get("task") == 0)
    name = str(victim) if absolute else "../victim"
    task["parts"] = [[name, 10, len(secret), hashlib.sha256(secret).hexdigest()]]
    with open(journal, "w") as f:
        f.write("".join(json.dumps(record) + "\n" for record in lines))
    before = sorted(os.listdir(out))
    argv = ["build", src, out, "--max-count", "10", "--workers", "1", "--seed", "1", "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "outside the output" in err
    assert victim.read_bytes() == secret
    assert sorted(os.listdir(out)) == before
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_a_manifest_in_out_naming_a_file_outside_is_refused(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=20, bad=False)
    out = str(tmp_path / "out")
    options = BuildOptions(max_count=10, workers=1)
    shardkit.build(src, out, options=options)
    shutil.move(os.path.join(out, "shard-000000.tar"), str(tmp_path / "victim"))
    path = os.path.join(out, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    manifest["shards"][0]["name"] = "../victim"
    with open(path, "w") as f:
        json.dump(manifest, f)
    before = sorted(os.listdir(out))
    for overwrite in (False, True):  # --overwrite reads the list of files to delete from it
        with pytest.raises(BuildError, match="outside the output"):
            shardkit.build(src, out, options=dataclasses.replace(options, overwrite=overwrite))
        assert os.path.exists(tmp_path / "victim")
        assert sorted(os.listdir(out)) == before


# --------------------------------------------------------------------------- names not UTF-8


def test_names_that_are_not_utf8_keep_the_manifest_strict_json(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=12, bad=False)
    cls = os.fsdecode(b"caf\xe9")
    os.rename(os.path.join(src, "circle"), os.path.join(src, cls))
    folder = os.path.join(src, cls)
    first = sorted(os.listdir(folder))[0]
    os.rename(os.path.join(folder, first), os.path.join(folder, os.fsdecode(b"img\xff.jpg")))
    with open(os.path.join(folder, os.fsdecode(b"bad\xfe.jpg")), "wb"):
        pass  # an empty file: skipped, so its name goes into the manifest
    out = str(tmp_path / "out")
    options = BuildOptions(max_count=5, workers=1)
    result = shardkit.build(src, out, options=options)
    with open(os.path.join(out, "manifest.json"), "rb") as f:
        raw = f.read()
    manifest = json.loads(raw.decode("utf-8"))  # strict UTF-8, then JSON

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for k, v in value.items() for s in strings(k) + strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return []

    assert not any("\ud800" <= c <= "\udfff" for s in strings(manifest) for c in s)
    from shardkit.formats.names import decode_name  # the documented reverse mapping

    names = [decode_name(name) for name in manifest["class_to_idx"]]
    assert b"caf\xe9" in [os.fsencode(name) for name in names]
    (skipped,) = manifest["skipped"]
    assert os.fsencode(decode_name(skipped["path"])) == b"caf\xe9/bad\xfe.jpg"
    assert len(list(shardkit.Dataset(out))) == result.samples == 12
    from shardkit.tools import verify

    report = verify(out)
    assert not report.other and not any(shard.problems for shard in report.shards)
    again = shardkit.build(src, out, options=options)
    assert again.resumed_tasks == -1 and again.samples == 12
    assert main(["index", out]) == 0  # index files hold the keys, strict UTF-8 too
    for name in os.listdir(out):
        if name.endswith(".idx"):
            with open(os.path.join(out, name), "rb") as f:
                json.loads(f.read().decode("utf-8"))
    report = verify(out)  # every index matches what the reader yields
    assert not report.other and not any(shard.problems for shard in report.shards)
    prefixed = str(tmp_path / "prefixed")  # shard names that are not UTF-8 either
    options = BuildOptions(max_count=5, workers=1, prefix=os.fsdecode(b"p\xe9"))
    first = shardkit.build(src, prefixed, options=options)
    assert os.fsencode(first.shards[0].name) == b"p\xe9-000000.tar"
    assert len(list(shardkit.Dataset(prefixed))) == 12
    report = verify(prefixed)
    assert not report.other and not any(shard.problems for shard in report.shards)
    again = shardkit.build(src, prefixed, options=options)
    assert again.resumed_tasks == -1 and again.shards == first.shards
    assert again.skipped == first.skipped


# --------------------------------------------------------------------------- manifest counts


def _undercounted(folder: str) -> None:
    write_shards(folder, [5, 5])
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        entries = [{"name": "shard-000000.tar", "samples": 4}]
        entries.append({"name": "shard-000001.tar", "samples": 5})
        json.dump({"shards": entries}, f)


def test_a_manifest_that_under_counts_a_shard_is_a_data_error(tmp_path: Path) -> None:
    folder = str(tmp_path)
    _undercounted(folder)
    with pytest.raises(FormatError, match="more samples than the 4") as info:
        list(shardkit.Dataset(folder))
    assert info.value.url == os.path.join(folder, "shard-000000.tar")


def test_an_under_count_goes_through_the_handler_and_keeps_the_epoch_length(
    tmp_path: Path,
) -> None:
    folder = str(tmp_path)
    _undercounted(folder)
    seen: list[Exception] = []

    def handler(exc: Exception) -> bool:
        seen.append(exc)
        return True

    dataset = shardkit.Dataset(folder, handler=handler)
    got = keys(list(dataset))
    assert len(got) == len(dataset) == 9
    assert [type(e) for e in seen] == [FormatError]
    assert seen[0].url == os.path.join(folder, "shard-000000.tar")  # type: ignore[attr-defined]
