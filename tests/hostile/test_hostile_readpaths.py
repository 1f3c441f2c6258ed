"""Every tool that reads shards applies the reader's limits, in bounded memory.

A tar header that lies about its member's size, a member over the ``member`` limit, a gzip
bomb, a TFRecord length that lies: each tool (``split``, ``cat``, ``verify``, ``verify
--decode``, ``index``, ``stats``, ``show``, ``convert``, ``proc``) ends with one line
naming the shard and the offset (``verify``: a problem line, exit 1), never a
MemoryError. Each command runs in a fresh interpreter under a 1 GiB address-space limit
and its peak memory (VmHWM) is measured.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest
from helpers.hostile import header, member, run_measured, write_tar, zeros_gzip

from shardkit.formats import tar
from shardkit.formats.tfrecord import frame_record, masked_crc32c

_CLI = """
import contextlib, io, resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from shardkit.cli import main
err, out = io.StringIO(), io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
    result["rc"] = main({argv!r})
result["stderr"] = err.getvalue()
result["stdout"] = out.getvalue()
"""

# tool -> its command line (IN: the shard, OUT: a fresh output folder)
TOOLS: dict[str, list[str]] = {
    "split": ["split", "IN", "-o", "OUT/s-%06d.tar", "--max-count", "10"],
    "cat": ["cat", "IN", "-o", "OUT/all.tar"],
    "verify": ["verify", "IN"],
    "verify --decode": ["verify", "--decode", "IN"],
    "index": ["index", "IN"],
    "stats": ["stats", "IN"],
    "show": ["show", "IN"],
    "convert": ["convert", "IN", "-o", "OUT/all.tfrecord"],
    "proc": ["proc", "IN", "-e", "true", "-o", "OUT/p.tar"],
}


def _run(tool: str, shard: Path, out: Path) -> dict[str, Any]:
    out.mkdir(exist_ok=True)
    argv = [a.replace("IN", str(shard)).replace("OUT", str(out)) for a in TOOLS[tool]]
    return run_measured(_CLI.format(argv=argv), timeout=120)


def _one_error(tool: str, result: dict[str, Any], shard: Path, offset: int, words: str) -> None:
    """The run ended as the reader would: one line naming the shard, the offset, ``words``."""
    if tool.startswith("verify"):
        assert result["rc"] == 1, result
        lines = [line.split("\t") for line in result["stdout"].splitlines()]
        assert [str(shard), str(offset)] in [[line[0], line[2]] for line in lines], lines
        assert any(words in line[3] for line in lines), lines
        return
    assert result["rc"] == 2, result
    last = result["stderr"].strip().splitlines()
    assert len(last) == 1, last
    assert last[0].startswith("Error: ") and str(shard) in last[0], last
    assert f"offset {offset}" in last[0] and words in last[0], last


def _lying_tar(path: Path, declared: int) -> int:
    """A 1.5 KB tar: one good sample, then a member declaring ``declared`` bytes and
    holding 512. Returns the offset of the lying header."""
    good = member(b"a.txt", b"ok")
    path.write_bytes(good + header(b"b.bin", declared) + os.urandom(512))
    return len(good)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_header_that_lies_about_its_size(tmp_path: Path, tool: str) -> None:
    # Was: split allocated the declared 1.5 GiB (1.6 GB RSS; MemoryError under the cap).
    shard = tmp_path / "lie.tar"
    offset = _lying_tar(shard, 3 << 28)  # 768 MiB: under the budget's member limit
    result = _run(tool, shard, tmp_path / "out")
    _one_error(tool, result, shard, offset, "ends inside a tar member")
    assert result["peak_mb"] < 150, result["peak_mb"]


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_member_over_max_member_size(tmp_path: Path, tool: str) -> None:
    # Was: the tools' own scanner allowed 1 TiB members (split, cat, verify, index, stats).
    shard = tmp_path / "over.tar"
    offset = _lying_tar(shard, 3 << 30)
    result = _run(tool, shard, tmp_path / "out")
    _one_error(tool, result, shard, offset, "SHARDKIT_MAX_MEMBER")
    assert result["peak_mb"] < 150, result["peak_mb"]


@pytest.mark.parametrize("tool", ["verify --decode", "verify", "cat", "split"])
def test_a_gzip_bomb(tmp_path: Path, tool: str) -> None:
    # Was: verify --decode on a 3 MB .tar.gz holding a 3 GiB member died with MemoryError.
    shard = tmp_path / "bomb.tar.gz"
    first = member(b"a.txt", b"ok")
    size = zeros_gzip(str(shard), [first, header(b"b.bin", 3 << 30), 3 << 30, tar.END_OF_ARCHIVE])
    assert size < 4 << 20
    result = _run(tool, shard, tmp_path / "out")
    _one_error(tool, result, shard, len(first), "SHARDKIT_MAX_MEMBER")
    assert result["peak_mb"] < 150, result["peak_mb"]


def _lying_tfrecord(path: Path, length: int) -> int:
    """One good record, then a record header claiming ``length`` bytes (valid length CRC)
    followed by 4 KiB. Returns the offset of the lying record."""
    from shardkit.formats.example import sample_to_example

    good = frame_record(sample_to_example({"__key__": "a", "txt": b"ok"}))
    size = struct.pack("<Q", length)
    path.write_bytes(good + size + struct.pack("<I", masked_crc32c(size)) + os.urandom(4096))
    return len(good)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_tfrecord_length_that_lies(tmp_path: Path, tool: str) -> None:
    # Was: verify and index read the claimed 1.5 GiB at once (MemoryError under the cap).
    # 192 MiB: under the budget's record limit (refused at the header: see
    # test_tfrecord_record_budget.py), so only the bounded reads keep the memory small.
    shard = tmp_path / "lie.tfrecord"
    offset = _lying_tfrecord(shard, 3 << 26)
    result = _run(tool, shard, tmp_path / "out")
    _one_error(tool, result, shard, offset, "stream ends inside a record")
    assert result["peak_mb"] < 150, result["peak_mb"]


def test_the_tools_still_read_good_shards_in_full(tmp_path: Path) -> None:
    shard = tmp_path / "good.tar"
    shard.write_bytes(write_tar([{"__key__": f"k{i}", "txt": b"x" * i} for i in range(30)]))
    for tool in ("split", "cat", "verify", "index", "stats"):
        result = _run(tool, shard, tmp_path / "out")
        assert result["rc"] == 0, (tool, result)
