from __future__ import annotations

import os
import subprocess

import pytest
from helpers.tools import SHARDKIT, samples, write_shards

from shardkit.cli import COMMANDS, main

TOOLS = ["cat", "split", "show", "tsv", "proc", "verify", "stats", "convert", "index"]


@pytest.mark.parametrize("command", TOOLS)
def test_every_tool_has_help_with_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command in COMMANDS
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    assert "examples:\n  shardkit " + command in text


@pytest.mark.parametrize(
    "argv",
    [
        ["cat", "no/such/shard.tar", "-o", "x.tar"],
        ["split", "no/such.tar", "-o", "o-%02d.tar", "--max-count", "2"],
        ["split", "x.tar", "-o", "o.tar", "--max-size", "lots"],
        ["tsv", "x.tar"],
        ["show", "no/such.tar"],
        ["convert", "no/such.tar", "-o", "y.tfrecord"],
        ["proc", "x.tar", "-e", "true", "-o", "y.tar", "--on-error", "maybe"],
        ["stats", "no/such.tar"],
        ["index", "no/such.tar"],
    ],
)
def test_usage_and_input_errors_exit_2_with_one_line(
    argv: list[str],
    tmp_path: object,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(str(tmp_path))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1


def test_stats_and_index_cli(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    folder = str(tmp_path)
    write_shards(folder, samples(7), per_shard=4)
    assert main(["index", folder]) == 0
    assert sorted(n for n in os.listdir(folder) if n.endswith(".idx")) == [
        "shard-000000.tar.idx",
        "shard-000001.tar.idx",
    ]
    capsys.readouterr()
    assert main(["stats", folder, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["samples"] == 7 and doc["classes"] == {"0": 3, "1": 2, "2": 2}
    plot = os.path.join(folder, "p.png")
    assert main(["stats", folder, "--plot", plot]) == 0
    assert "classes  3" in capsys.readouterr().out
    with open(plot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_cat_into_a_closed_pipe_is_quiet(tmp_path: object) -> None:
    urls = write_shards(str(tmp_path), samples(400), per_shard=400)
    done = subprocess.run(
        f"{SHARDKIT} cat {urls[0]} | head -c 1000 > /dev/null",
        shell=True,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert done.stderr == b""


def test_refuses_a_terminal_for_binary_output(tmp_path: object) -> None:
    import pty

    urls = write_shards(str(tmp_path), samples(2))
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [SHARDKIT, "cat", urls[0]],
            stdout=follower,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(leader)
        os.close(follower)
    assert done.returncode == 2
    assert b"terminal" in done.stderr


def test_public_api_is_sorted_and_import_stays_light() -> None:
    import sys

    import shardkit.tools as tools

    assert tools.__all__ == sorted(tools.__all__)
    assert all(hasattr(tools, name) for name in tools.__all__)
    code = (
        "import sys, shardkit.tools, shardkit.cli; shardkit.cli.build_parser(); "
        "print(sorted(m for m in ('numpy', 'PIL', 'matplotlib', 'torch') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


_FRESH_OUTPUTS = {
    "cat": ["cat", "{shard}", "-o", "new/deeper/all.tar"],
    "split": ["split", "{shard}", "-o", "new/deeper/s-%03d.tar", "--max-count", "4"],
    "convert": ["convert", "{shard}", "-o", "new/deeper/all.tfrecord"],
    "proc": ["proc", "{shard}", "-e", "true", "-o", "new/deeper/p-%03d.tar"],
    "proc-file": ["proc", "{shard}", "-e", "true", "-o", "new/deeper/p.tar"],
}


@pytest.mark.parametrize("tool", sorted(_FRESH_OUTPUTS))
def test_outputs_create_their_folder(tool: str, tmp_path: object) -> None:
    """The README's examples write into folders that do not exist yet (as build does)."""
    folder = str(tmp_path)
    (shard,) = write_shards(os.path.join(folder, "in"), samples(9), per_shard=9)
    argv = [arg.format(shard=shard) for arg in _FRESH_OUTPUTS[tool]]
    done = subprocess.run([SHARDKIT, *argv], capture_output=True, cwd=folder, check=False)
    assert done.returncode == 0, done.stderr
    written = os.listdir(os.path.join(folder, "new", "deeper"))
    assert written and not [name for name in written if name.startswith(".")]


@pytest.mark.parametrize(
    "argv",
    [
        ["cat", "{shard}", "-o", "{folder}"],
        ["convert", "{shard}", "--to", "tar", "-o", "{folder}"],
        ["proc", "{shard}", "-e", "true", "-o", "{folder}"],
    ],
)
def test_an_existing_folder_as_a_file_output_is_one_line(argv: list[str], tmp_path: object) -> None:
    folder = str(tmp_path)
    (shard,) = write_shards(os.path.join(folder, "in"), samples(3), per_shard=3)
    out = os.path.join(folder, "existing")
    os.mkdir(out)
    cmd = [arg.format(shard=shard, folder=out) for arg in argv]
    done = subprocess.run([SHARDKIT, *cmd], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"Error: output {out!r} is a folder: give a file (out.tar) or a shard pattern "
        f"({os.path.join(out, 'shard-%06d.tar')})"
    ]
    assert os.listdir(out) == [] and sorted(os.listdir(folder)) == ["existing", "in"]


@pytest.mark.parametrize("command", ["split", "build"])
def test_a_max_size_without_a_unit_is_refused_with_a_hint(command: str, tmp_path: object) -> None:
    """--max-size 100 (a forgotten unit) made one shard per sample."""
    folder = str(tmp_path)
    (shard,) = write_shards(os.path.join(folder, "in"), samples(5), per_shard=5)
    out = os.path.join(folder, "out-%03d.tar" if command == "split" else "out")
    done = subprocess.run(
        [
            SHARDKIT,
            command,
            shard,
            *(["-o"] if command == "split" else []),
            out,
            "--max-size",
            "100",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: ") and "'100' has no unit" in line and "use e.g. 100MB" in line
    assert sorted(os.listdir(folder)) == ["in"]


def test_a_float_max_size_is_a_size(tmp_path: object) -> None:
    """1e9 (webdataset's maxsize habit) on the command line."""
    folder = str(tmp_path)
    (shard,) = write_shards(os.path.join(folder, "in"), samples(5), per_shard=5)
    pattern = os.path.join(folder, "o-%03d.tar")
    done = subprocess.run(
        [SHARDKIT, "split", shard, "-o", pattern, "--max-size", "1e9"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert os.path.exists(pattern % 0) and not os.path.exists(pattern % 1)
