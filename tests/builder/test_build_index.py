"""``shardkit build`` writes each shard's ``.idx`` by default (issue 27, item 2).

Both ways a build makes its shards carry an index: parts renamed to shards (sizes known
up front: the index is written with the part and renamed with it, naming the final shard)
and shards assembled from chunks (``--resize``: indexed as they are copied). The index
never changes a shard's bytes; ``--no-index`` (``index=False``) writes none.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.build import make_corpus, snapshot

import shardkit
from shardkit.builder.options import BuildOptions
from shardkit.cli import main
from shardkit.errors import ConfigError
from shardkit.formats.index import ShardIndex


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("build") / "src"), count=120)


def _shards(out: Path) -> list[str]:
    return sorted(n for n in os.listdir(out) if n.endswith((".tar", ".tfrecord")))


@pytest.mark.parametrize("resize", [None, 24], ids=["renamed-parts", "assembled"])
def test_a_build_indexes_every_shard_by_default(
    corpus: str, tmp_path: Path, resize: int | None
) -> None:
    out = tmp_path / "out"
    result = shardkit.build(corpus, out, options=BuildOptions(max_count=40, resize=resize))
    names = _shards(out)
    assert names == [s.name for s in result.shards] and len(names) > 2
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no part index left
    for name in names:
        index = ShardIndex.from_json((out / f"{name}.idx").read_bytes())
        assert index.shard == name  # the final name, not the part's
        assert index.shard_bytes == (out / name).stat().st_size
    indexed = shardkit.IndexedDataset(str(out))
    assert len(indexed) == result.samples
    streamed = [s["__key__"] for s in shardkit.Dataset(str(out), shuffle_shards=False)]
    assert [indexed[i]["__key__"] for i in range(len(indexed))] == streamed


def test_no_index_writes_none_and_the_same_shards(corpus: str, tmp_path: Path) -> None:
    with_index, without = tmp_path / "with", tmp_path / "without"
    shardkit.build(corpus, with_index, options=BuildOptions(max_count=40))
    shardkit.build(corpus, without, options=BuildOptions(max_count=40, index=False))
    assert not [n for n in os.listdir(without) if n.endswith(".idx")]
    shards = {n: v for n, v in snapshot(str(with_index)).items() if not n.endswith(".idx")}
    assert shards == snapshot(str(without))  # same shards, same manifest
    with pytest.raises(ConfigError, match="index must be True or False"):
        BuildOptions(index="yes")  # type: ignore[arg-type]


def test_the_cli_indexes_by_default_and_takes_no_index(corpus: str, tmp_path: Path) -> None:
    for flags, indexed in (((), True), (("--index",), True), (("--no-index",), False)):
        out = tmp_path / "-".join(("out", *flags))
        assert main(["build", corpus, str(out), "--max-count", "40", "-q", *flags]) == 0
        idx = [n for n in os.listdir(out) if n.endswith(".idx")]
        assert len(idx) == (len(_shards(out)) if indexed else 0), flags
