"""A document read whole (a manifest, an ``.idx``, a journal line) is bounded by the
budget's ``document`` limit in force, before it is read: the reading door and the journal
read to ``SHARDKIT_MAX_DOCUMENT``, not to the default constant (they read 512 MiB whatever
the variable said, and the parse refused it only after)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.hostile import run_measured

from shardkit import storage
from shardkit.errors import StorageError


def test_the_reading_door_applies_the_variable_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.tar.idx"
    path.write_bytes(b"x" * 2000)
    assert storage.read_document(str(path), what="index file") == b"x" * 2000
    monkeypatch.setenv("SHARDKIT_MAX_DOCUMENT", "1000B")
    with pytest.raises(StorageError) as info:
        storage.read_document(str(path), what="index file")
    assert str(info.value) == (
        f"{path}: the index file: 2,000 bytes declared, over the limit of 1,000 bytes for a "
        "JSON document read whole (SHARDKIT_MAX_DOCUMENT raises it)"
    )
    assert storage.read_document(str(path), limit=2000) == b"x" * 2000  # the caller's


_JOURNAL = """
import os
from shardkit.builder._journallog import FileLog
records = [r for r, _ in FileLog({path!r}).read()]
result["records"] = records
"""


def test_a_journal_line_is_read_no_further_than_the_variable(tmp_path: Path) -> None:
    """A journal whose second line is 300 MB of JSON string, under a 1 MiB document limit:
    the line was read whole (300 MB held) before the parse refused it; now 1 MiB of it is
    read, the rest skipped, and the next line is the next record."""
    path = tmp_path / "journal.jsonl"
    with open(path, "wb") as f:
        f.write(json.dumps({"journal": 1}).encode() + b"\n")
        f.write(b'{"big": "' + b"x" * (300 << 20) + b'"}\n')
        f.write(json.dumps({"task": 2}).encode() + b"\n")
    result = run_measured(
        _JOURNAL.format(path=str(path)), env={"SHARDKIT_MAX_DOCUMENT": "1MiB"}, timeout=120
    )
    assert result["records"] == [{"journal": 1}, {"task": 2}]
    assert result["peak_mb"] < 150, result


_MANIFEST = """
from shardkit.builder._manifest import read_manifest
from shardkit.builder._store import LocalStore
result["manifest"] = read_manifest(LocalStore({out!r}))
"""


def test_a_huge_manifest_in_the_output_is_not_read_whole(tmp_path: Path) -> None:
    """The build reads the output's manifest (to resume or append) through the store: a
    300 MB one was read whole before its parse refused it; now one byte past the limit."""
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "manifest.json", "wb") as f:
        f.write(b'{"shardkit_manifest": "' + b"x" * (300 << 20) + b'"}')
    result = run_measured(
        _MANIFEST.format(out=str(out)), env={"SHARDKIT_MAX_DOCUMENT": "1MiB"}, timeout=120
    )
    assert result["manifest"] is None  # over the limit: not ours, as before
    assert result["peak_mb"] < 150, result
