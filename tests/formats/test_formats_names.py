"""The on-disk vocabulary lives in shardkit.formats: one list of shard suffixes (``.tfr``
included) that every entry point uses, one shard-name pattern rule, one manifest reader."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from helpers.pipeline import keys, write_shards

import shardkit
from shardkit import ShardWriter
from shardkit.cli import main
from shardkit.errors import ConfigError, FormatError, ManifestError
from shardkit.formats.manifest import parse_manifest
from shardkit.formats.names import check_pattern, is_shard_name, shard_name

SRC = Path(shardkit.__file__).parent

# --------------------------------------------------------------------------- one list of suffixes


@pytest.mark.parametrize("ext", ["tfr", "tfr.gz", "tfrecords", "tar.gz", "tgz"])
def test_every_entry_point_takes_a_folder_of_any_shard_suffix(
    tmp_path: Path, ext: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path / "data")
    write_shards(folder, [3, 2], ext=ext, manifest=False)
    assert keys(list(shardkit.Dataset(folder))) == [f"s{i:05d}" for i in range(5)]
    assert main(["verify", folder]) == 0
    joined = str(tmp_path / "all.tar")
    assert main(["cat", folder, "-o", joined]) == 0
    assert keys(list(shardkit.Dataset(joined))) == [f"s{i:05d}" for i in range(5)]
    capsys.readouterr()
    out, one = str(tmp_path / "out"), str(tmp_path / "one")
    first = os.path.join(folder, sorted(os.listdir(folder))[0])
    built = main(["build", folder, out, "--no-shuffle", "--workers", "1", "-q"])
    built_one = main(["build", first, one, "--workers", "1", "-q"])
    if ext.endswith(("gz", "tgz")):  # read as shards, which build cannot seek in (documented)
        assert (built, built_one) == (2, 2)
        assert capsys.readouterr().err.count("cannot be re-sharded") == 2
        return
    assert (built, built_one) == (0, 0)
    assert keys(list(shardkit.Dataset(out))) == [f"s{i:05d}" for i in range(5)]
    assert len(list(shardkit.Dataset(one))) == 3


def test_shard_names() -> None:
    for name in ["a.tar", "a.TFR", "a.tfrecord.gz", "a.tfrecords", "a.tgz", "a.tar.gz"]:
        assert is_shard_name(name), name
    for name in [".a.tar", "a.tar.idx", "manifest.json", "a.txt", "a.gz"]:
        assert not is_shard_name(name), name


def test_no_copy_of_the_vocabulary_outside_formats() -> None:
    """The manifest's name and the shard suffixes are spelt once, in shardkit/formats."""
    spelt = re.compile(r'"manifest\.json"|\.tfrecords?"|\.tfr"|"\.idx"')
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if path.parent.name != "formats"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if spelt.search(line)
    ]
    assert found == []


# --------------------------------------------------------------------------- one manifest reader


def test_one_manifest_reader_takes_every_shape() -> None:
    wds = parse_manifest(b'{"shardlist": [{"url": "http://h/a.tar", "nsamples": 7}]}')
    assert [(s.name, s.samples) for s in wds.shards] == [("http://h/a.tar", 7)]
    ours = parse_manifest(
        {
            "format": "tfrecord",
            "samples": 3,
            "shards": [{"name": "a.tfr", "samples": 3, "bytes": 10, "sha256": "ab" * 32}],
        }
    )
    assert ours.format == "tfrecord" and ours.samples == 3 and ours.counts == (3,)
    assert (ours.shards[0].bytes, ours.shards[0].digest) == (10, "sha256:" + "ab" * 32)
    listed = parse_manifest(["a.tar", {"path": "b.tar", "count": 2}])
    assert [s.name for s in listed.shards] == ["a.tar", "b.tar"] and listed.counts is None
    with pytest.raises(ManifestError, match="bad byte count") as info:
        parse_manifest({"shards": [{"name": "a.tar", "bytes": -1}]}, url="m.json")
    assert isinstance(info.value, ConfigError) and isinstance(info.value, FormatError)
    assert info.value.url == "m.json"


# --------------------------------------------------------------------------- shard-name patterns


def test_shard_name_patterns() -> None:
    assert shard_name("out/s-%06d.tar", 12) == "out/s-000012.tar"
    assert shard_name("out/{shard:05d}.tar", 12) == "out/00012.tar"
    assert shard_name("out/100%%-%d.tar", 3) == "out/100%-3.tar"
    assert shard_name("out/{shard}.tar", 3) == "out/3.tar"
    assert shard_name("s3://b/a%20b/{shard:03d}.tar", 3) == "s3://b/a%20b/003.tar"


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("out/%06d-%s.tar", "'%s' is not a shard-number placeholder"),
        ("out/%2147483647d.tar", "width 2147483647 is over 20"),
        ("out/{shard:99999999d}.tar", "width 99999999 is over 20"),
        ("out/%06d-%06d.tar", "exactly one"),
        ("out/{shard}-{shard}.tar", "exactly one"),
        ("out/{shard:x}.tar", "not an integer placeholder"),
        ("out/shard.tar", "exactly one"),
        ("out/%06d-%", "not a shard-number placeholder"),
    ],
)
def test_bad_patterns_are_one_config_error_naming_the_option(pattern: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        ShardWriter(pattern, max_count=1)
    assert str(info.value).startswith("pattern ")
    assert time.perf_counter() - started < 1
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_pattern(pattern, option="output")


@pytest.mark.parametrize(
    "command", [["cat"], ["split", "--max-count", "1"], ["convert"], ["proc", "-c", "true"]]
)
@pytest.mark.parametrize("pattern", ["%06d-%s.tar", "%2147483647d.tar"])
def test_bad_output_patterns_exit_2_with_one_line(
    tmp_path: Path, command: list[str], pattern: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (shard,) = write_shards(str(tmp_path / "in"), [2], manifest=False)
    out = str(tmp_path / "out")
    os.makedirs(out)
    argv = [command[0], shard, "-o", os.path.join(out, pattern), *command[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: output ") and err.count("\n") == 1
    assert os.listdir(out) == []


def test_a_manifest_is_written_once_and_read_back_by_every_reader(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    src = str(tmp_path / "src")
    write_shards(src, [2, 1], manifest=False)
    result = shardkit.build(src, out, options=shardkit.BuildOptions(workers=1, max_count=2))
    with open(os.path.join(out, "manifest.json"), "rb") as f:
        raw = f.read()
    contents = parse_manifest(raw)
    assert [s.name for s in contents.shards] == [s.name for s in result.shards]
    assert contents.counts == tuple(s.samples for s in result.shards)
    assert json.loads(raw)["shardkit_manifest"] == 1
