"""Hostile archives through ``shardkit proc`` (the one tool that writes files per sample).

Members named ``../../x`` and ``/abs/path``, symlinks, hard links, device files, a
5000-character name; a command that leaves a symlink to /etc/passwd. Each run is a CLI
subprocess with its own TMPDIR inside a sandbox folder: afterwards the sandbox holds
only what the test put there and the output, nothing exists at the absolute targets,
and no link was followed or packed.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from shardkit.formats.tar import iter_samples


def _member(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for field, value in fields.items():
        setattr(info, field, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


LINKS: dict[str, dict[str, Any]] = {
    "symlink": {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"},
    "hardlink": {"type": tarfile.LNKTYPE, "linkname": "/etc/passwd"},
    "device": {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3},
    "fifo": {"type": tarfile.FIFOTYPE},
}


def _hostile_shard(path: Path, names: list[str], link: str | None = None) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        _member(tar, "good0.txt", b"hello")
        for name in names:
            _member(tar, name, b"evil")
        if link is not None:
            _member(tar, "link.txt", **LINKS[link])
        _member(tar, "x" * 5000 + ".txt", b"long")
        _member(tar, "good2.txt", b"!")


def _proc(
    sandbox: Path, shard: Path, command: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(sandbox / "tmp")}
    return subprocess.run(
        [sys.executable, "-m", "shardkit", "proc", str(shard), "-e", command, *extra],
        cwd=sandbox / "cwd",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    for name in ("tmp", "cwd"):
        (tmp_path / name).mkdir()
    return tmp_path


COPY_ALL = 'for f in *; do cp "$f" "copy.$f"; done; ls -la >&2'


@pytest.mark.parametrize("link", sorted(LINKS))
def test_proc_refuses_links_and_devices(sandbox: Path, link: str) -> None:
    shard = sandbox / "in.tar"
    _hostile_shard(shard, [], link)
    out = sandbox / "cwd" / "out.tar"
    done = _proc(sandbox, shard, COPY_ALL, "-o", str(out), "--on-error", "skip")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "non-regular member 'link.txt'" in last, last
    assert _tree(sandbox) == {"tmp", "cwd", "in.tar"}  # nothing followed, no output


@pytest.mark.parametrize("names", ["sample", "key"])
def test_proc_over_enormous_names_writes_only_in_its_folder(sandbox: Path, names: str) -> None:
    shard = sandbox / "in.tar"
    _hostile_shard(shard, [])
    out = sandbox / "cwd" / "out.tar"
    done = _proc(sandbox, shard, COPY_ALL, "-o", str(out), "--names", names)
    assert done.returncode == 0, done.stderr
    assert _tree(sandbox) == {"tmp", "cwd", "in.tar", "cwd/out.tar"}
    with open(out, "rb") as f:
        samples = list(iter_samples(f))
    assert [s["__key__"] for s in samples] == ["good0", "x" * 5000, "good2"]
    assert [s["txt"] for s in samples] == [b"hello", b"long", b"!"]
    copies = [[k for k in s if k != "txt" and k.endswith(".txt")] for s in samples]
    assert all(len(c) == 1 for c in copies)  # the command's copy came back, nothing else
    assert all(b"root:" not in v for s in samples for v in s.values() if isinstance(v, bytes))


@pytest.mark.parametrize("names", ["sample", "key"])
@pytest.mark.parametrize("kind", ["dotdot", "absolute"])
def test_proc_refuses_traversal_and_absolute_keys(sandbox: Path, names: str, kind: str) -> None:
    target = f"/tmp/shardkit-hostile-{uuid.uuid4().hex}"
    hostile = {
        "dotdot": ["../../escape.txt", "a/../../../up.txt"],
        "absolute": [target + ".txt"],
    }[kind]
    shard = sandbox / "in.tar"
    _hostile_shard(shard, hostile)
    out = sandbox / "cwd" / "out.tar"
    done = _proc(sandbox, shard, COPY_ALL, "-o", str(out), "--names", names, "--on-error", "skip")
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: sample ") and "must be a relative path" in last, last
    assert not os.path.exists(target + ".txt") and not os.path.exists(target)
    assert _tree(sandbox) == {"tmp", "cwd", "in.tar"}  # no output, no temp folder left


def test_a_symlink_the_command_leaves_is_not_packed(sandbox: Path) -> None:
    shard = sandbox / "in.tar"
    with tarfile.open(shard, "w") as tar:
        _member(tar, "k0.txt", b"a")
        _member(tar, "k1.txt", b"b")
    out = sandbox / "cwd" / "out.tar"
    command = (
        "ln -s /etc/passwd sample.pw; ln -s / sample.dir; mkdir sample.sub; echo ok > sample.ok"
    )
    done = _proc(sandbox, shard, command, "-o", str(out))
    assert done.returncode == 0, done.stderr
    with open(out, "rb") as f:
        samples = list(iter_samples(f))
    assert [sorted(k for k in s if not k.startswith("__")) for s in samples] == [["ok", "txt"]] * 2
    assert all(b"root:" not in s["ok"] for s in samples)
    assert _tree(sandbox) == {"tmp", "cwd", "in.tar", "cwd/out.tar"}  # temp folders gone


def test_a_command_that_only_leaves_links_is_an_error(sandbox: Path) -> None:
    shard = sandbox / "in.tar"
    with tarfile.open(shard, "w") as tar:
        _member(tar, "k0.txt", b"a")
    command = "rm -f sample.txt; ln -s /etc/passwd sample.pw"
    done = _proc(sandbox, shard, command, "-o", str(sandbox / "cwd" / "out.tar"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "no files" in done.stderr
    assert not (sandbox / "cwd" / "out.tar").exists()


def test_proc_timeout_kills_the_commands_children_too(sandbox: Path, tmp_path: Path) -> None:
    """Regression (#12.6): only the shell was killed; its child slept on, holding the
    output pipes open, so the run (and whatever read its output) waited for it."""
    import time

    import shardkit

    shard = sandbox / "in-000000.tar"
    with shardkit.ShardWriter(str(sandbox / "in-%06d.tar")) as sink:
        sink.write({"__key__": "a", "txt": b"x"})
    pids = tmp_path / "pids"
    command = f"sleep 120 & echo $! >> {pids}; wait"
    started = time.monotonic()
    done = _proc(sandbox, shard, command, "--timeout", "1", "--on-error", "skip", "-o", "-")
    assert time.monotonic() - started < 30 and done.returncode == 0, done.stderr
    assert "timed out after 1.0 s" in done.stderr
    child = int(pids.read_text().split()[0])
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)  # a killed orphan is reaped by init
    assert not os.path.exists(f"/proc/{child}")


def test_proc_on_a_key_holding_a_nul_byte_follows_on_error(sandbox: Path) -> None:
    """Regression (#12.12): a ValueError traceback, even with --on-error skip."""
    import shardkit

    shard = sandbox / "in-000000.tfrecord"
    with shardkit.ShardWriter(str(sandbox / "in-%06d.tfrecord")) as sink:
        sink.write({"__key__": "a\0b", "txt": b"x"})
        sink.write({"__key__": "c", "txt": b"y"})
    out = sandbox / "out.tar"
    done = _proc(sandbox, shard, "true", "-o", str(out), "--on-error", "skip")
    assert done.returncode == 0, done.stderr
    assert "NUL byte" in done.stderr and "Traceback" not in done.stderr
    with open(out, "rb") as f:
        assert [s["__key__"] for s in iter_samples(f)] == ["c"]
    failed = _proc(sandbox, shard, "true", "-o", str(sandbox / "fail.tar"))
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "NUL byte" in failed.stderr
