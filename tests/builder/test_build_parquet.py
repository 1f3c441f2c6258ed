"""Parquet lists: the same items, keys and bytes as the same rows in a JSONL list."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.build import make_corpus, read_samples, run_cli, snapshot
from helpers.hostile import run_measured

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _parquet as parquet
from shardkit.errors import MissingDependencyError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("parquet") / "src"), count=24, bad=False)


def _rows(corpus: str) -> list[dict[str, Any]]:
    """Relative paths (two that are skipped), int labels and typed extra columns."""
    rels = sorted(
        f"src/{c}/{f}" for c in sorted(os.listdir(corpus)) for f in os.listdir(f"{corpus}/{c}")
    )
    rows: list[dict[str, Any]] = [
        {
            "path": rel,
            "label": i % 3,
            "caption": f"a picture number {i}",
            "score": i / 8,
            "width": 40 + i,
            "tags": [f"t{i}", "all"],
        }
        for i, rel in enumerate(rels)
    ]
    rows.insert(5, {**rows[0], "path": "src/missing.jpg"})
    rows.insert(9, {**rows[0], "path": "src/notes.txt"})
    return rows


def _write_lists(corpus: str, rows: list[dict[str, Any]]) -> tuple[str, str]:
    folder = os.path.dirname(corpus)
    jsonl, table = f"{folder}/list.jsonl", f"{folder}/list.parquet"
    with open(jsonl, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    pq.write_table(pa.Table.from_pylist(rows), table, row_group_size=7)  # 4 row groups
    return jsonl, table


def _shards(out: str) -> dict[str, Any]:
    files = snapshot(out)
    manifest = files.pop("manifest.json")
    return {"files": files, "samples": manifest["samples"], "skipped": manifest.get("skipped")}


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_a_parquet_list_builds_the_shards_of_the_same_jsonl_list(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    jsonl, table = _write_lists(corpus, _rows(corpus))
    monkeypatch.setattr(parquet, "BATCH_ROWS", 5)  # batches that straddle row groups
    monkeypatch.setattr(parquet, "BATCH_BYTES", 90)  # and are split into slices
    options = BuildOptions(workers=2, max_count=7, seed=4, format=fmt)  # type: ignore[arg-type]
    from_json = shardkit.build(jsonl, tmp_path / "jsonl", options=options)
    from_parquet = shardkit.build(table, tmp_path / "parquet", options=options)
    assert from_parquet.samples == from_json.samples == 24
    assert sorted(from_parquet.skipped) == sorted(from_json.skipped)
    assert {p for p, _ in from_parquet.skipped} == {"src/missing.jpg", "src/notes.txt"}
    assert _shards(str(tmp_path / "parquet")) == _shards(str(tmp_path / "jsonl"))
    if fmt == "tar":  # the columns keep their types in each sample's json
        metas = [json.loads(s["json"]) for s in read_samples(str(tmp_path / "parquet"))]
        assert all(isinstance(m["width"], int) and isinstance(m["score"], float) for m in metas)
        assert all(m["tags"][1] == "all" and m["label"] == int(m["class"]) for m in metas)


def test_parquet_list_errors_are_one_line(corpus: str, tmp_path: Path) -> None:
    rows = [{"image": "src/a.jpg", "label": 1}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "nopath.parquet")
    when = datetime.datetime(2024, 1, 2)
    rows = [{"path": "src/a.jpg", "taken": when}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "timestamp.parquet")
    (tmp_path / "text.parquet").write_text("path,label\na.jpg,1\n")
    whole = (tmp_path / "nopath.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2] + whole[-8:])  # footer lost
    cases = {
        "nopath": "no 'path' column (columns: image, label); name the path column",
        "timestamp": "column 'taken' is of type timestamp[us], which a sample's json cannot",
        "text": "cannot read the list: ",
        "cut": "cannot read the list: ",
    }
    for name, message in cases.items():
        result = run_cli(str(tmp_path / f"{name}.parquet"), str(tmp_path / f"out-{name}"))
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and f"{name}.parquet" in result.stderr
        assert len(result.stderr.splitlines()) == 1
        assert not os.path.exists(tmp_path / f"out-{name}")


def test_without_pyarrow_a_parquet_list_is_one_line_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pq.write_table(pa.Table.from_pylist([{"path": "a.jpg"}]), tmp_path / "list.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import now raises ImportError
    with pytest.raises(MissingDependencyError) as info:
        shardkit.build(str(tmp_path / "list.parquet"), str(tmp_path / "out"))
    assert info.value.message == (
        "a parquet list needs pyarrow, which is not installed: pip install 'shardkit[parquet]'"
    )
    code = (
        "import sys; sys.modules['pyarrow'] = None; from shardkit.cli import main; "
        f"sys.exit(main(['build', {str(tmp_path / 'list.parquet')!r}, {str(tmp_path / 'o')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "Error: a parquet list needs pyarrow, which is not installed: "
        "pip install 'shardkit[parquet]'"
    ]


_HUGE_CELL = """
import resource
import pyarrow as pa, pyarrow.parquet as pq
import shardkit
rows = 200
value = pa.array(["x" * 20_000_000])
note = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), value)
table = pa.table({{"path": [f"a{{i}}.jpg" for i in range(rows)], "note": note}})
pq.write_table(table, {path!r}, compression="zstd")
result["file"] = len(open({path!r}, "rb").read())
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY))
try:
    shardkit.build({path!r}, {out!r})
except shardkit.errors.BuildError as exc:
    result["error"] = str(exc)
"""


def test_a_huge_value_repeated_over_the_rows_is_refused_before_it_is_repeated(
    tmp_path: Path,
) -> None:
    """2 KB of parquet: one 20 MB value (stored once, in a dictionary page) in each of 200
    rows. Listed, it became 4 GB of Python strings (a MemoryError under a 3 GiB cap)."""
    path, out = str(tmp_path / "huge.parquet"), str(tmp_path / "out")
    result = run_measured(_HUGE_CELL.format(path=path, out=out))
    assert result["file"] < 4096
    assert result["error"] == (
        f"{path}: row 1, column 'note': a cell: 20,000,000 bytes declared, over the limit of "
        "65,536 bytes for a list cell's values (SHARDKIT_MAX_CELL raises it)"
    )
    assert result["peak_mb"] < 400, result
    assert not os.path.exists(out)
