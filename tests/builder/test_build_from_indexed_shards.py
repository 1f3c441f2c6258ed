"""Building from shards that have ``.idx`` files: the driver lists them from the indexes,
without reading the shards' data, and the output is the same as without them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.build import snapshot
from helpers.remote import http_service

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _shards as shards
from shardkit.errors import FormatError
from shardkit.formats.example import encode_example
from shardkit.formats.tfrecord import frame_record
from shardkit.tools import write_indexes


def _inputs(folder: Path, ext: str, *, keyed: bool = True) -> list[str]:
    """Three shards of 7 samples of uneven sizes; keys repeat across shards unless
    ``keyed`` (then every key is unique)."""
    folder.mkdir()
    if ext == "tfrecord" and not keyed:  # records without a __key__ feature
        for n in range(3):
            with open(folder / f"in-{n:06d}.tfrecord", "wb") as f:
                for i in range(7):
                    text = f"{n}-{i}-" + "x" * (i * 300)
                    f.write(frame_record(encode_example({"txt": [text.encode()], "cls": [i]})))
        return [str(folder / f"in-{n:06d}.{ext}") for n in range(3)]
    with shardkit.ShardWriter(str(folder / f"in-%06d.{ext}"), max_count=7, index=False) as sink:
        for n in range(3):
            for i in range(7):
                sample: dict[str, Any] = {"txt": f"{n}-{i}-" + "x" * (i * 300), "cls": i}
                sample["__key__"] = f"s{n}/{i}" if keyed else f"k{i}"
                sink.write(sample)
    return [str(folder / f"in-{n:06d}.{ext}") for n in range(3)]


def _build(urls: list[str], out: Path, **options: Any) -> dict[str, Any]:
    pattern = urls[0].replace("000000", "{000000..000002}")  # the three shards
    options = {"workers": 1, "max_count": 4, **options}
    shardkit.build(pattern, str(out), options=BuildOptions(**options))
    return snapshot(str(out))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shards the driver reads through (``read_shard``) to list them."""
    seen: list[str] = []
    for name in ("read_shard", "read_tar_samples"):  # TFRecords / tars read through
        monkeypatch.setattr(shards, name, _spy(getattr(shards, name), seen))
    return seen


def _spy(original: Any, seen: list[str]) -> Any:
    def spy(url: str, **kwargs: Any) -> Iterator[Any]:
        seen.append(url)
        return original(url, **kwargs)  # type: ignore[no-any-return]

    return spy


@pytest.mark.parametrize(
    ("ext", "keyed", "output"),
    [
        ("tar", True, "tar"),
        ("tar", False, "tfrecord"),  # repeating keys: listed with their shard's number
        ("tfrecord", True, "tar"),
        ("tfrecord", False, "tfrecord"),  # no __key__: keys are record numbers
    ],
)
def test_output_is_identical_with_and_without_index_files(
    tmp_path: Path, ext: str, keyed: bool, output: str, reads: list[str]
) -> None:
    urls = _inputs(tmp_path / "in", ext, keyed=keyed)
    plain = _build(urls, tmp_path / "plain", format=output)
    assert reads == urls
    write_indexes(urls)
    indexed = _build(urls, tmp_path / "indexed", format=output)
    assert reads == urls  # listed from the indexes
    assert indexed == plain and len(plain) > 3  # several shards and the manifest


def test_shards_cut_by_size_are_the_same_with_index_files(tmp_path: Path) -> None:
    """The listed sizes differ (an index counts headers), but shards are cut from what
    the workers wrote, not from them."""
    urls = _inputs(tmp_path / "in", "tar")
    plain = _build(urls, tmp_path / "plain", max_count=100, max_size=6000)
    write_indexes(urls)
    indexed = _build(urls, tmp_path / "indexed", max_count=100, max_size=6000)
    assert indexed == plain and len(plain) > 3


def test_shards_with_index_files_are_listed_without_reading_them(
    tmp_path: Path, reads: list[str]
) -> None:
    urls = _inputs(tmp_path / "in", "tar")
    write_indexes(urls[:2])  # the third has none: it is read
    listing = shards.list_shards(urls, "tar")
    assert reads == [urls[2]]
    assert len(listing.items) == 21 and not listing.sizes_known


def test_a_stale_index_is_refused_as_datasets_refuse_it(tmp_path: Path) -> None:
    urls = _inputs(tmp_path / "in", "tar")
    write_indexes(urls)
    shard = str(tmp_path / "in" / "in-%06d.tar")
    with shardkit.ShardWriter(shard, start_index=1, index=False) as sink:
        sink.write({"__key__": "other", "txt": "rewritten after indexing"})
    with pytest.raises(FormatError, match="stale index") as caught:
        _build(urls, tmp_path / "out")
    assert caught.value.url == urls[1] + ".idx"


def _lie(url: str) -> None:
    """Swap the first two keys of a shard's index (its size still matches)."""
    with open(url + ".idx", "rb") as f:
        doc = json.load(f)
    doc["keys"][0], doc["keys"][1] = doc["keys"][1], doc["keys"][0]
    with open(url + ".idx", "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("keyed", [True, False])
def test_an_index_whose_keys_lie_fails_the_samples_it_lies_about(
    tmp_path: Path, keyed: bool
) -> None:
    urls = _inputs(tmp_path / "in", "tar", keyed=keyed)
    write_indexes(urls)
    _lie(urls[0])
    with pytest.raises(FormatError, match="the index says sample"):
        _build(urls, tmp_path / "fail", on_error="fail", shuffle=False)
    pattern = urls[0].replace("000000", "{000000..000002}")
    result = shardkit.build(pattern, str(tmp_path / "skip"), options=BuildOptions(workers=1))
    assert result.samples == 19 and len(result.skipped) == 2
    assert all("the index says sample" in why for _, why in result.skipped)
    assert all(where.startswith(urls[0] + "@") for where, _ in result.skipped)
    assert not os.path.exists(tmp_path / "fail" / "manifest.json")


def test_remote_shards_with_index_files_are_listed_without_reading_them(
    tmp_path: Path, reads: list[str]
) -> None:
    root, base = http_service()
    urls = _inputs(Path(root) / "in", "tar")
    served = [f"{base}/in/{os.path.basename(url)}" for url in urls]
    plain = _build(served, tmp_path / "plain")
    assert reads == served
    write_indexes(urls)
    indexed = _build(served, tmp_path / "indexed")
    assert reads == served  # listed from the indexes, fetched over http
    assert indexed == plain and len(plain) > 3


def _edit_index(url: str, change: str) -> None:
    """Rewrite a shard's index so that it leaves a sample out or lists one twice (its
    recorded shard size still matches, so it is not stale)."""
    with open(url + ".idx", "rb") as f:
        doc = json.load(f)
    for field in ("keys", "offsets", "sizes"):
        values = doc[field]
        doc[field] = values[:2] + values[3:] if change == "dropped" else values[:3] + values[2:]
    with open(url + ".idx", "w") as f:
        json.dump(doc, f)


@pytest.mark.parametrize("change", ["dropped", "repeated"])
def test_an_index_that_drops_or_repeats_a_sample_is_not_used(
    tmp_path: Path, change: str, reads: list[str]
) -> None:
    # Regression (found in review): the listing took every index that was not stale at
    # its word, so one that left a sample out (or listed one twice) silently dropped (or
    # repeated) it in the output. An index is used only when its spans tile the shard.
    urls = _inputs(tmp_path / "in", "tar")
    plain = _build(urls, tmp_path / "plain")
    write_indexes(urls)
    _edit_index(urls[1], change)
    reads.clear()
    assert _build(urls, tmp_path / "indexed") == plain
    assert reads == [urls[1]]  # that shard was read through instead
