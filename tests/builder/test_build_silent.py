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
from shardkit.builder import _spill as spill_module
from shardkit.builder._spill import Spill
from shardkit.demo import make_image_folder
from shardkit.errors import BuildError
from shardkit.tools import verify, write_indexes


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
    doc.pop("members", None)  # a lie in the spans of an index without a member table
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


def test_a_key_a_shard_holds_twice_is_written_once_the_later_one_skipped(tmp_path: Path) -> None:
    # Regression: both were written (prefixed alike), exit 0; verify then reported the
    # shard and `tar -x` kept one of them.
    shard = _shard(tmp_path / "in" / "in-000000.tar", ["a", "b", "a", "c"])
    result = shardkit.build(shard, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == 3
    assert result.skipped == [(f"{shard}@4096", f"key repeats: packed from {shard}@0")]
    packed = _packed(tmp_path / "out")
    assert sorted(packed) == [
        ("000000/a", "text of a"),
        ("000000/b", "text of b"),
        ("000000/c", "text of c"),
    ]
    assert verify(str(tmp_path / "out")).ok


def test_later_repeats_are_found_the_same_across_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardkit.builder._plan import later_repeats  # new: the base has none

    keys = [f"k{i % 700}" for i in range(2000)]
    expected = {i: i % 700 for i in range(700, 2000)}
    with Spill() as spill:
        assert later_repeats(keys, len(keys), spill) == expected
        monkeypatch.setattr(spill_module, "ORDER_BUDGET", 300)  # many buckets, spilled
        assert spill_module.bucket_count(len(keys)) > 1
        assert later_repeats(keys, len(keys), spill) == expected


def test_a_key_with_a_lone_surrogate_is_skipped_with_its_reason(tmp_path: Path) -> None:
    # Regression: a raw UnicodeEncodeError stopped the whole build.
    samples = [{"__key__": key, "txt": key} for key in ("a", "b\ud800", "c")]
    result = shardkit.build(samples, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == 2
    assert result.skipped == [("item 1", "the key holds a lone surrogate U+D800 (not UTF-8 text)")]
    assert len(_manifest(tmp_path / "out")["skipped"]) == 1


def test_a_list_path_with_a_lone_surrogate_is_skipped_with_its_reason(tmp_path: Path) -> None:
    make_image_folder(str(tmp_path / "img"), count=2, classes=["a"])
    rows = ['{"path": "img/a/img_000000.jpg"}', '{"path": "img/\\ud800.jpg"}']
    rows.append('{"path": "img/a/img_000001.jpg"}')
    (tmp_path / "list.jsonl").write_text("\n".join(rows) + "\n")
    result = shardkit.build(str(tmp_path / "list.jsonl"), str(tmp_path / "out"))
    assert result.samples == 2
    assert result.skipped == [
        ("img/\ufffd.jpg", "the path holds a lone surrogate U+D800 (not UTF-8 text)")
    ]
    skipped = _manifest(tmp_path / "out")["skipped"]
    assert skipped == [{"path": "img/\ufffd.jpg", "reason": result.skipped[0][1]}]


def test_gzip_bytes_under_a_plain_shard_name_are_refused_naming_the_shard(tmp_path: Path) -> None:
    gz = _shard(tmp_path / "in" / "in-000000.tar.gz", ["a", "b"])
    plain = tmp_path / "in" / "in-000001.tar"
    os.rename(gz, plain)
    with pytest.raises(BuildError, match="decompress them first") as got:
        shardkit.build(str(plain), str(tmp_path / "out"))
    assert got.value.url == str(plain)


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_python_dataset_giving_one_key_twice_is_refused_without_a_manifest(
    tmp_path: Path, shuffle: bool
) -> None:
    # Regression: both were written, exit 0 (keys a dataset gives are known only as the
    # workers load them: they are checked where they were written).
    samples = [{"__key__": key, "txt": f"{i}"} for i, key in enumerate("abcafag")]
    options = BuildOptions(workers=1, shuffle=shuffle, max_count=2)
    # in order the two repeats are apart (counted at the end); shuffled, two come together
    again = r"the key 'a' is written twice .*2 samples written again in all"
    with pytest.raises(BuildError, match=r"the key 'a' is written twice" if shuffle else again):
        shardkit.build(samples, str(tmp_path / "out"), options=options)
    assert not (tmp_path / "out" / "manifest.json").exists()
    unique = [{"__key__": key, "txt": key} for key in "abcdef"]
    assert shardkit.build(unique, str(tmp_path / "ok"), options=options).samples == 6


@pytest.mark.parametrize("index", [True, False])
def test_the_written_keys_are_checked_without_reading_a_shard_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: bool
) -> None:
    # The repeat check read every written shard's headers even where the build had just
    # written its .idx (20-35% of a small-sample Python build); then its .idx. Now the
    # workers send the keys they wrote with their results: no shard is read back.
    from shardkit.builder import _shards as shards_module

    walked: list[str] = []
    real = shards_module.read_tar_samples

    def spy(url: str) -> Any:
        walked.append(url)
        return real(url)

    monkeypatch.setattr(shards_module, "read_tar_samples", spy)
    options = BuildOptions(workers=1, max_count=2, index=index)
    unique = [{"__key__": key, "txt": key} for key in "abcdef"]
    assert shardkit.build(unique, str(tmp_path / "ok"), options=options).samples == 6
    assert walked == []
    # a key written twice is still found: in two shards, or twice in one
    for keys in ("abcaef", "abacde"):
        with pytest.raises(BuildError, match=r"the key 'a' is written twice"):
            shardkit.build(
                [{"__key__": key, "txt": key} for key in keys],
                str(tmp_path / f"twice-{keys}"),
                options=BuildOptions(workers=1, max_count=3, index=index, shuffle=False),
            )
        assert walked == []
