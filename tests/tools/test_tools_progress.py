"""Progress of the long tools and of build: one live bar on a terminal, none on a pipe or
a log file (only the summary line), nothing with -q; the library's ``progress=`` callback
hears of every input shard; summaries say "1 shard", not "1 shards"."""

from __future__ import annotations

import fcntl
import itertools
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from helpers.tools import samples, write_shards

from shardkit import tools
from shardkit.demo import make_image_folder
from shardkit.tools import _progress

SHARDKIT = [sys.executable, "-m", "shardkit"]


def _commands(folder: str, out: Path) -> dict[str, list[str]]:
    return {
        "cat": ["cat", folder, "-o", str(out / "all.tar")],
        "split": ["split", folder, "-o", str(out / "s-%03d.tar"), "--max-count", "100"],
        "convert": ["convert", folder, "-o", str(out / "t-%03d.tfrecord"), "--max-count", "100"],
        "proc": ["proc", folder, "-e", "true", "-o", str(out / "p-%03d.tar"), "--max-count", "100"],
        "verify": ["verify", folder],
        "index": ["index", folder],
        "stats": ["stats", folder],
    }


def _on_terminal(argv: list[str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal; (exit status, what reached the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 120 columns
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave
    ) as process:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
        status = process.wait(timeout=120)
    os.close(master)
    return status, b"".join(chunks).decode(errors="replace")


@pytest.fixture
def folder(tmp_path: Path) -> str:
    write_shards(str(tmp_path / "d"), samples(30), per_shard=10)
    return str(tmp_path / "d")


@pytest.mark.parametrize("command", ["cat", "split", "convert", "proc", "verify", "index", "stats"])
def test_a_bar_on_a_terminal_only_the_summary_on_a_pipe_nothing_with_q(
    folder: str, tmp_path: Path, command: str
) -> None:
    argv = _commands(folder, tmp_path / "out")[command]
    (tmp_path / "out").mkdir()
    piped = subprocess.run([*SHARDKIT, *argv], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stderr and "shard/s" not in piped.stderr and "it/s" not in piped.stderr
    if command != "stats":  # stats prints its report on stdout
        # verify also says what it could not check (these shards have no digest)
        lines = [n for n in piped.stderr.splitlines() if not n.startswith("not checked: ")]
        assert len(lines) == 1, piped.stderr
    for name in os.listdir(tmp_path / "out"):
        os.unlink(tmp_path / "out" / name)
    quiet = subprocess.run([*SHARDKIT, *argv, "-q"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    for name in os.listdir(tmp_path / "out"):
        os.unlink(tmp_path / "out" / name)
    status, seen = _on_terminal([*SHARDKIT, *argv])
    assert status == 0, seen
    assert re.search(r"\d/3 \[", seen), seen  # tqdm's "n/3 [elapsed<left, rate]"


def test_build_draws_its_bar_on_a_terminal_and_not_into_a_pipe(tmp_path: Path) -> None:
    make_image_folder(str(tmp_path / "images"), count=12)
    argv = [*SHARDKIT, "build", str(tmp_path / "images"), str(tmp_path / "a"), "--workers", "1"]
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "img/s" not in piped.stderr, piped.stderr
    status, seen = _on_terminal([*argv[:-3], str(tmp_path / "b"), "--workers", "1"])
    assert status == 0 and "12/12" in seen and "img/s" in seen, seen


def test_every_tool_function_reports_each_input_shard(folder: str, tmp_path: Path) -> None:
    runs: dict[str, Any] = {
        "cat": lambda p: tools.cat(folder, str(tmp_path / "c.tar"), progress=p),
        "cat --shuffle": lambda p: tools.cat(
            folder, str(tmp_path / "c2.tar"), shuffle=5, progress=p
        ),
        "split": lambda p: tools.split(
            folder, str(tmp_path / "s-%02d.tar"), max_count=7, progress=p
        ),
        "convert": lambda p: tools.convert(folder, str(tmp_path / "t.tfrecord"), progress=p),
        "proc": lambda p: tools.proc(folder, "true", str(tmp_path / "p.tar"), progress=p),
        "verify": lambda p: tools.verify(folder, progress=p),
        "stats": lambda p: tools.stats(folder, progress=p),
        "index": lambda p: tools.write_indexes(
            [str(Path(folder) / f"shard-{i:06d}.tar") for i in range(3)], progress=p
        ),
    }
    for name, run in runs.items():
        seen: list[_progress.ToolProgress] = []
        run(seen.append)
        assert [(p.shards, p.total) for p in seen] == [(1, 3), (2, 3), (3, 3)], name
        assert all(b.elapsed >= a.elapsed for a, b in itertools.pairwise(seen)), name


def test_summaries_count_one_shard_in_the_singular(tmp_path: Path) -> None:
    write_shards(str(tmp_path / "d"), samples(5), per_shard=10)
    folder = str(tmp_path / "d")
    run = [*SHARDKIT]
    verify = subprocess.run([*run, "verify", folder], capture_output=True, text=True, timeout=60)
    assert "verified 1 shard, 5 samples: no problems" in verify.stderr, verify.stderr
    index = subprocess.run([*run, "index", folder], capture_output=True, text=True, timeout=60)
    assert "indexed 1 shard, 5 samples" in index.stderr, index.stderr
    out = str(tmp_path / "o-%02d.tar")
    split = subprocess.run(
        [*run, "split", folder, "-o", out, "--max-count", "9"], capture_output=True, text=True
    )
    assert "wrote 5 samples into 1 shard\n" in split.stderr, split.stderr
