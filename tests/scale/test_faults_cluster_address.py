"""A cluster address with nothing listening: one line within a bounded wait, exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardkit
from shardkit.engines import CONNECT_TIMEOUT_S


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardkit", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_build_against_an_address_with_nothing_listening(tmp_path: Path, engine: str) -> None:
    """Regression (#12.7): Ray retried for many minutes; Dask printed a traceback after 30 s."""
    with shardkit.ShardWriter(str(tmp_path / "in-%06d.tar")) as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", "txt": b"x"})
    address = f"127.0.0.1:{_free_port()}"
    started = time.monotonic()
    args = ("build", "in-000000.tar", "out", "--engine", engine, "--address", address)
    done = _cli(tmp_path, *args)
    assert time.monotonic() - started < CONNECT_TIMEOUT_S + 15
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: cannot reach the {engine} cluster")
    assert address in lines[0]
    assert not (tmp_path / "out").exists()
    again = _cli(tmp_path, "build", "in-000000.tar", "out")  # nothing left that blocks it
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_map_shards_against_an_address_with_nothing_listening(tmp_path: Path, engine: str) -> None:
    with shardkit.ShardWriter(str(tmp_path / "in-%06d.tar")) as sink:
        sink.write({"__key__": "k", "txt": b"x"})
    address = f"tcp://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    with pytest.raises(shardkit.ConfigError, match="cannot reach"):
        shardkit.map_shards(
            dict,
            str(tmp_path / "in-000000.tar"),
            str(tmp_path / "out-%06d.tar"),
            engine=engine,  # type: ignore[arg-type]
            address=address,
        )
    assert time.monotonic() - started < CONNECT_TIMEOUT_S + 5
    assert not list(tmp_path.glob("out-*"))
