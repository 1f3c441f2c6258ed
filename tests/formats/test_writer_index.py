"""What shardkit writes is complete: every writer of shards leaves each shard's ``.idx``
file beside it (issue 21), so ``len()``, equal ranks and ``shardkit.mix`` work on the
output at once, without ``shardkit index``; the file is the one ``shardkit index`` writes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import shardkit
from shardkit.mapshards import map_shards
from shardkit.tools import cat, convert, split
from shardkit.tools.index import build_index
from shardkit.writer import ShardWriter


def _write(folder: Path, prefix: str, count: int, ext: str = "tar") -> list[str]:
    with ShardWriter(str(folder / f"s-%06d.{ext}"), max_count=7) as writer:
        for i in range(count):
            writer.write({"__key__": f"{prefix}{i:04d}", "txt": f"{prefix} {i}", "cls": i})
    return [info.url for info in writer.shards]


def _keys(dataset: Any) -> list[str]:
    return [sample["__key__"] for sample in dataset]


def test_mix_of_two_folders_written_by_shard_writer(tmp_path: Path) -> None:
    # Was: ConfigError "has no per-shard sample counts" until `shardkit index` was run.
    _write(tmp_path / "a", "a", 30)
    _write(tmp_path / "b", "b", 50)
    a, b = shardkit.Dataset(str(tmp_path / "a")), shardkit.Dataset(str(tmp_path / "b"))
    assert (len(a), len(b)) == (30, 50)
    mixed = shardkit.mix([a, b])
    keys = _keys(mixed)
    assert len(keys) == len(mixed) > 0
    assert {k[0] for k in keys} == {"a", "b"}


def test_equal_ranks_on_what_shard_writer_wrote(tmp_path: Path) -> None:
    _write(tmp_path, "k", 45)
    ranks = [shardkit.Dataset(str(tmp_path), node=(r, 3), equalize="drop") for r in range(3)]
    counts = [len(_keys(d)) for d in ranks]
    assert counts == [len(d) for d in ranks] and len(set(counts)) == 1


@pytest.mark.parametrize("ext", ["tar", "tar.gz", "tfrecord", "tfrecord.gz"])
def test_the_index_is_what_shardkit_index_writes(tmp_path: Path, ext: str) -> None:
    for url in _write(tmp_path, "k", 20, ext):
        assert Path(url + ".idx").read_bytes() == build_index(url).to_json()


def _keep(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def test_every_tool_that_writes_a_shard_pattern_leaves_counts(tmp_path: Path) -> None:
    inputs = _write(tmp_path / "in", "k", 20)
    written = {
        "map_shards": [r.output for r in map_shards(_keep, inputs, str(tmp_path / "m/%02d.tar"))],
        "split": [i.url for i in split(inputs, str(tmp_path / "s/%02d.tar"), max_count=6)],
        "split-gz": [i.url for i in split(inputs, str(tmp_path / "g/%02d.tar.gz"), max_count=6)],
        "convert": [i.url for i in convert(inputs, str(tmp_path / "c/%02d.tfrecord"))[1]],
    }
    cat(inputs, str(tmp_path / "p/%02d.tar"), count=11)
    written["cat"] = sorted(str(p) for p in (tmp_path / "p").glob("*.tar"))
    for tool, urls in written.items():
        assert urls and all(os.path.exists(url + ".idx") for url in urls), tool
        folder = os.path.dirname(urls[0])
        assert len(shardkit.Dataset(folder)) == (11 if tool == "cat" else 20), tool


def test_index_false_writes_none(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "s-%06d.tar"), index=False) as writer:
        writer.write({"__key__": "k", "txt": "x"})
    assert os.listdir(tmp_path) == ["s-000000.tar"]
