"""``shardkit build`` on the command line: bad input is one line and exit 2; progress."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
from pathlib import Path

import pytest
from helpers.build import make_corpus, make_corpus_jpeg, run_cli, write

import shardkit
from shardkit import BuildOptions, EmptyBuildError
from shardkit.cli import COMMANDS, main


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
    (empty / "loose.jpg").unlink()
    _fails_cleanly([str(empty), out], out, "no images found")  # nothing at all
    (empty / "loose.jpg").write_bytes(b"\xff\xd8\xff")
    (empty / "cats" / "notes.txt").write_bytes(b"")  # something skipped: exit 1 and the reasons
    result = run_cli(str(empty), out)
    assert result.returncode == 1 and not os.path.exists(out)
    assert result.stderr.splitlines() == [
        f"Error: {empty}: no images found in the class folders: all 2 files found were skipped; "
        "nothing was written",
        "  skipped cats/notes.txt: no image, audio or video file shares its name (extension 'txt')",
        "  skipped loose.jpg: not inside a class folder",
    ]


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
        (["--max-count", "0"], "--max-count: must be at least 1"),
        (["--max-count", "ten"], "--max-count: must be an integer"),
        (["--max-size", "lots"], "--max-size: 'lots' is not a size"),
        (["--max-size", "0"], "--max-size: must be positive"),
        (["--workers", "0"], "--workers: must be at least 1"),
        (["--quality", "0"], "--quality: must be from 1 to 100"),
        (["--resize", "-5"], "--resize: must be at least 1"),
        (["--format", "zip"], "invalid choice"),
        (["--validate", "maybe"], "invalid choice"),
        (["--prefix", "a/b"], "prefix"),
    ],
)
def test_nonsense_options(corpus: str, tmp_path: Path, option: list[str], message: str) -> None:
    out = str(tmp_path / "out")
    _fails_cleanly([corpus, out, *option], out, message)


def test_success_prints_a_summary_and_no_bar_into_a_pipe(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = run_cli(corpus, out, "--max-count", "10", "--workers", "2")
    assert result.returncode == 0, result.stderr
    assert "24 samples in 3 shards" in result.stdout and "5 skipped" in result.stdout
    assert "\r" not in result.stderr and "img/s" not in result.stderr  # the bar: a terminal's
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


def _bad_only(folder: Path, count: int) -> str:
    for i in range(count):
        write(str(folder), f"cat/bad{i:02d}.jpg", b"not an image %d\n" % i)
    return str(folder)


def test_a_build_that_packs_nothing_fails_and_leaves_no_manifest(tmp_path: Path) -> None:
    src = _bad_only(tmp_path / "src", 3)
    out = str(tmp_path / "out")
    result = run_cli(src, out, "--workers", "1")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.replace("\r", "\n").strip().splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    message = "no sample was packed: all 3 items were skipped; nothing was written"
    assert errors == [f"Error: {out}: {message}"]
    reasons = lines[lines.index(errors[0]) + 1 :]
    assert reasons == [
        f"  skipped cat/bad{i:02d}.jpg: not an image (content is not JPG nor another known format)"
        for i in range(3)
    ]
    assert os.listdir(out) == [], "no manifest, journal, part or lock file may be left"
    with pytest.raises(EmptyBuildError) as caught:
        shardkit.build(src, out, options=BuildOptions(workers=2))
    assert [path for path, _ in caught.value.skipped] == [f"cat/bad{i:02d}.jpg" for i in range(3)]
    assert os.listdir(out) == []
    write(src, "cat/good.jpg", make_corpus_jpeg(0))  # fixed: the rerun just works
    again = run_cli(src, out, "-q")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("1 sample in 1 shard ")


def test_the_cli_lists_what_it_skipped(tmp_path: Path) -> None:
    src = _bad_only(tmp_path / "src", 12)
    write(str(src), "cat/good.jpg", make_corpus_jpeg(0))
    out = str(tmp_path / "out")
    result = run_cli(src, out, "--workers", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 sample in 1 shard ") and "12 skipped" in lines[0]
    assert lines[1:11] == [
        f"  skipped cat/bad{i:02d}.jpg: not an image (content is not JPG nor another known format)"
        for i in range(10)
    ]
    assert lines[11:] == ["  ... and 2 more (-v lists them all)"]
    every = run_cli(src, out, "-v").stdout.splitlines()  # -v after the subcommand
    assert every[0].startswith("already complete: 1 sample in 1 shard ")
    assert [line.split(":")[0] for line in every[1:]] == [
        f"  skipped cat/bad{i:02d}.jpg" for i in range(12)
    ]
    quiet = run_cli(src, out, "-q")
    assert quiet.stdout.splitlines() == every[:1] and quiet.stderr == ""
    both = run_cli(src, out, "-q", "-v")
    assert both.returncode == 2 and both.stderr.startswith("Error: ")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_verbose_and_quiet_work_after_every_subcommand(command: str) -> None:
    from shardkit.cli import build_parser

    parser = build_parser()
    help_text = _help_of(parser, command)
    assert "-v, --verbose" in help_text and "-q, --quiet" in help_text


def _help_of(parser: argparse.ArgumentParser, command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    return out.getvalue()


def test_skipped_names_reach_the_terminal_escaped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(str(src), "cat/ok.jpg", make_corpus_jpeg(0))
    write(str(src), "cat/\x1b[2J\u202egpj.jpg", b"not an image")
    result = run_cli(str(src), str(tmp_path / "out"), "--workers", "1")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "  skipped cat/\\x1b[2J\\u202egpj.jpg: not an image" in result.stdout
