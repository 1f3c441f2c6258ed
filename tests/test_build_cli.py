"""``shardkit build`` on the command line: bad input is one line and exit 2; progress."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest_build import make_corpus, run_cli

from shardkit.cli import main


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("cli") / "src"), count=24)


def _fails_cleanly(args: list[str], out: str, message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert message in lines[0], lines[0]
    assert not os.path.exists(out), "nothing may be written"


def test_missing_source(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    _fails_cleanly([str(tmp_path / "nope"), out], out, "no such file or folder")


def test_empty_source_and_no_class_folders(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails_cleanly([str(empty), out], out, "no class subfolders")
    (empty / "loose.jpg").write_bytes(b"\xff\xd8\xff")
    _fails_cleanly([str(empty), out], out, "no class subfolders")
    (empty / "cats").mkdir()
    _fails_cleanly([str(empty), out], out, "no images found")


def test_output_inside_the_source(corpus: str) -> None:
    out = os.path.join(corpus, "circle", "shards")
    _fails_cleanly([corpus, out], out, "inside the source")


def test_unwritable_output(corpus: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    out = str(blocker / "out")
    _fails_cleanly([corpus, out], out, "cannot create the output folder")
    _fails_cleanly([corpus, str(blocker)], str(blocker / "x"), "not a folder")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--max-count", "0"], "max_count must be at least 1"),
        (["--max-count", "ten"], "invalid int value"),
        (["--max-size", "lots"], "max_size 'lots' is not a size"),
        (["--max-size", "0"], "max_size must be positive"),
        (["--workers", "0"], "workers must be at least 1"),
        (["--quality", "0"], "quality must be from 1 to 100"),
        (["--resize", "-5"], "resize must be at least 1"),
        (["--format", "zip"], "invalid choice"),
        (["--validate", "maybe"], "invalid choice"),
        (["--prefix", "a/b"], "prefix"),
    ],
)
def test_nonsense_options(corpus: str, tmp_path: Path, option: list[str], message: str) -> None:
    out = str(tmp_path / "out")
    _fails_cleanly([corpus, out, *option], out, message)


def test_success_prints_a_summary_and_one_progress_bar(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = run_cli(corpus, out, "--max-count", "10", "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert "24 samples in 3 shards" in result.stdout and "5 skipped" in result.stdout
    final = result.stderr.replace("\r", "\n").strip().splitlines()[-1]
    assert "29/29" in final and "3 shards" in final and "5 skipped" in final, final
    assert "MB/s" in final and "img/s" in final
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f)["samples"] == 24
    again = run_cli(corpus, out, "--max-count", "10", "-q")
    assert again.returncode == 0 and again.stdout.startswith("already complete")
    assert again.stderr == ""


def test_main_returns_2_for_a_locked_or_foreign_folder(corpus: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "shard-000000.tar").write_bytes(b"not ours")
    assert main(["build", corpus, str(out), "-q"]) == 2
    assert sorted(os.listdir(out)) == ["shard-000000.tar"]
    assert main(["build", corpus, str(out), "-q", "--overwrite"]) == 0
    assert "manifest.json" in os.listdir(out)
