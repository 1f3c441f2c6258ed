"""Every consumer of an ``.idx`` file applies the same two rules: the index is checked
whole before use (each key once, spans in order and not overlapping, inside the shard:
:func:`shardkit.formats.index.check_index`), and an index span holds exactly its one
sample (:func:`shardkit.formats.index.indexed_sample`), tar and TFRecord alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.pipeline import write_shards

import shardkit
from shardkit import BuildOptions
from shardkit.errors import BuildError, FormatError
from shardkit.tools import write_indexes

COUNTS = [10]


def _edit(shard: str, edit: Any) -> None:
    with open(shard + ".idx") as f:
        doc: dict[str, list[Any]] = json.load(f)
    # These lies are in the spans: an index without a member table (an older one) is read
    # span by span; a lying table is tests/formats/test_member_table.py's.
    doc.pop("members", None)
    edit(doc)
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)


def _merge(doc: dict[str, list[Any]]) -> None:
    """Entry 3 covers sample 4 too, which the index no longer lists: the spans still tile
    the shard, and its recorded size still matches (the index is not stale)."""
    doc["sizes"][3] += doc["sizes"].pop(4)
    del doc["offsets"][4], doc["keys"][4]


def _repeat(doc: dict[str, list[Any]]) -> None:
    """Sample 1 listed twice (as entries 1 and 2), sample 2 not at all."""
    for field in ("keys", "offsets", "sizes"):
        doc[field][2] = doc[field][1]


def _indexed(tmp_path: Path, ext: str) -> str:
    folder = str(tmp_path / f"in-{ext}")
    (shard,) = write_shards(folder, COUNTS, ext=ext, manifest=False, payload=700)
    write_indexes([shard])
    return shard


@pytest.mark.parametrize("ext", ["tar", "tfrecord"])
def test_a_build_from_an_index_span_of_two_samples_drops_nothing_silently(
    tmp_path: Path, ext: str
) -> None:
    shard = _indexed(tmp_path, ext)
    _edit(shard, _merge)
    # was: exit 0, 9 of 10 packed, nothing reported; then one skipped, the other unnamed:
    # the build stops naming both samples of the span, and writes no manifest
    with pytest.raises(BuildError, match=r"\.idx is wrong.*holds 2 samples"):
        shardkit.build(
            os.path.dirname(shard), str(tmp_path / "out"), options=BuildOptions(workers=1)
        )
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("ext", ["tar", "tfrecord"])
def test_an_index_listing_a_sample_twice_is_refused_whole(tmp_path: Path, ext: str) -> None:
    shard = _indexed(tmp_path, ext)
    _edit(shard, _repeat)
    folder = os.path.dirname(shard)
    with pytest.raises(FormatError, match="bad index") as caught:
        len(shardkit.IndexedDataset(folder))  # was: 10, with sample 1 twice and no sample 2
    assert caught.value.url == shard + ".idx"
    with pytest.raises(FormatError, match="bad index"):
        len(shardkit.Dataset(folder))
    report = shardkit.tools.verify(folder)
    assert any("bad index" in p.message for p in report.problems)


def test_a_tfrecord_span_holding_two_records_is_a_format_error(tmp_path: Path) -> None:
    shard = _indexed(tmp_path, "tfrecord")
    _edit(shard, _merge)
    ds = shardkit.IndexedDataset(os.path.dirname(shard))
    assert ds[3 - 1]["__key__"] == "s00002"
    with pytest.raises(FormatError, match="holds another record too") as caught:
        ds[3]  # was: the first record, and sample 4 never read
    assert caught.value.url == shard
