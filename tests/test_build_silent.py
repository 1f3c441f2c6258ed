"""Builds that used to lose samples or labels with exit 0 (issue 28, cases 8-12 and 14):
every input is packed, or named as skipped with its reason, or the build stops."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

import shardkit
from shardkit import BuildOptions
from shardkit.demo import make_image_folder
from shardkit.errors import BuildError
from shardkit.tools import write_indexes


def _shard(path: Path, keys: list[str], **extra: Any) -> str:
    """One tar shard (no index) of a sample per key: ``txt`` and ``cls`` (its position)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with shardkit.ShardWriter(str(path).replace("000000", "%06d"), index=False, **extra) as sink:
        for i, key in enumerate(keys):
            sink.write({"__key__": key, "txt": f"text of {key}", "cls": i})
    return str(path)


def _packed(out: Path) -> list[tuple[str, str]]:
    """(key, txt) of every sample of a build's output, in order."""
    return [(s["__key__"], s["txt"].decode()) for s in shardkit.Dataset(str(out))]


def _pax_shard(path: Path, keys: list[str]) -> str:
    """The shard :func:`_shard` writes, by Python's tarfile in PAX format (a long name is
    in a PAX ``path`` record)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for i, key in enumerate(keys):
            for ext, data in (("cls", str(i).encode()), ("txt", f"text of {key}".encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("writer", [_shard, _pax_shard])
def test_a_shard_without_index_with_long_member_names_is_packed_whole(
    tmp_path: Path, writer: Any
) -> None:
    # Regression: the listing took the offset of a member's own header, after its
    # long-name (././@LongLink / PAX) header, so the worker read a 100-byte name back
    # and skipped the sample: 3 of 4 packed, exit 0.
    long_key = "k" * 120
    keys = ["a", long_key, "b", long_key + "x"]
    shard = writer(tmp_path / "in" / "in-000000.tar", keys)
    assert [s["__key__"] for s in shardkit.Dataset(shard)] == keys
    result = shardkit.build(shard, str(tmp_path / "out"), options=BuildOptions(shuffle=False))
    assert result.samples == 4 and result.skipped == []
    assert _packed(tmp_path / "out") == [(k, f"text of {k}") for k in keys]


def _merge_spans(url: str, first: int) -> None:
    """Rewrite a shard's index so that one span covers samples ``first`` and ``first+1``
    (the spans still tile the shard, its size still matches)."""
    with open(url + ".idx", "rb") as f:
        doc = json.load(f)
    doc["sizes"][first] += doc["sizes"][first + 1]
    for field in ("keys", "offsets", "sizes"):
        del doc[field][first + 1]
    with open(url + ".idx", "w") as f:
        json.dump(doc, f)


def test_an_index_span_holding_two_samples_stops_the_build_naming_both(tmp_path: Path) -> None:
    # Regression: the span was skipped naming one sample, the other lost unnamed: 8 of
    # 10 packed, exit 0.
    keys = [f"s{i:02d}" for i in range(10)]
    shard = _shard(tmp_path / "in" / "in-000000.tar", keys)
    write_indexes([shard])
    _merge_spans(shard, 4)
    with pytest.raises(BuildError, match=r"\.idx is wrong.*holds 2 samples.*'s04', 's05'") as got:
        shardkit.build(shard, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert got.value.url == shard
    assert not (tmp_path / "out" / "manifest.json").exists()
    os.remove(shard + ".idx")  # read through: all ten
    result = shardkit.build(shard, str(tmp_path / "out2"), options=BuildOptions(workers=1))
    assert result.samples == 10 and result.skipped == []


def test_a_fifo_named_by_a_brace_pattern_is_refused_not_opened(tmp_path: Path) -> None:
    # Regression: the listing opened the FIFO and waited for a writer forever.
    _shard(tmp_path / "in" / "in-000000.tar", ["a", "b"])
    os.mkfifo(tmp_path / "in" / "in-000001.tar")
    pattern = str(tmp_path / "in" / "in-{000000..000001}.tar")
    with pytest.raises(BuildError, match="not a regular file") as got:
        shardkit.build(pattern, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert got.value.url == str(tmp_path / "in" / "in-000001.tar")


def test_a_fifo_named_like_a_shard_in_a_source_folder_is_listed_as_skipped(
    tmp_path: Path,
) -> None:
    # Regression: it was left out without a word.
    _shard(tmp_path / "in" / "in-000000.tar", ["a", "b"])
    os.mkfifo(tmp_path / "in" / "in-000001.tar")
    result = shardkit.build(str(tmp_path / "in"), str(tmp_path / "out"))
    assert result.samples == 2
    assert result.skipped == [("in-000001.tar", "not a regular file (a FIFO)")]
    with open(tmp_path / "out" / "manifest.json") as f:
        assert json.load(f)["skipped"] == [
            {"path": "in-000001.tar", "reason": "not a regular file (a FIFO)"}
        ]


def _manifest(out: Path) -> dict[str, Any]:
    with open(out / "manifest.json") as f:
        return json.load(f)  # type: ignore[no-any-return]


def test_resharding_a_build_keeps_its_classes(tmp_path: Path) -> None:
    # Regression: every label was kept but class_to_idx and class_counts came out empty,
    # num_classes 0.
    source = tmp_path / "images"
    make_image_folder(str(source), count=5, classes=["cat", "dog"])
    first = tmp_path / "first"
    shardkit.build(str(source), str(first))
    again = tmp_path / "again"
    shardkit.build(str(first), str(again), options=BuildOptions(max_count=2))
    before, after = _manifest(first), _manifest(again)
    assert before["class_to_idx"] == {"cat": 0, "dog": 1}
    assert before["class_counts"] == {"cat": 3, "dog": 2}
    for field in ("class_to_idx", "num_classes", "class_counts", "samples"):
        assert after[field] == before[field], field


def test_resharding_shards_without_a_manifest_counts_their_labels(tmp_path: Path) -> None:
    shard = _shard(tmp_path / "in" / "in-000000.tar", ["a", "b", "c"])
    shardkit.build(shard, str(tmp_path / "out"))
    manifest = _manifest(tmp_path / "out")
    assert manifest["num_classes"] == 3
    assert manifest["class_counts"] == {"0": 1, "1": 1, "2": 1}
