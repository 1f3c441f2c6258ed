"""Names holding real characters of U+EF7F..U+EFFF (the range that escapes the bytes of
non-UTF-8 names in JSON) round-trip through every index, manifest and journal reader."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import shardkit
from shardkit import BuildOptions, IndexedDataset
from shardkit.formats.names import decode_name, encode_name
from shardkit.tools import write_indexes

_ALPHABET = st.sampled_from(
    ["a", "/", "\u00e9", "\uef7f", "\uef80", "\uefab", "\uefff", "\udc80", "\udcff", "\udce9"]
)


@given(st.lists(_ALPHABET, max_size=12).map("".join))
def test_the_name_escape_round_trips_every_name(name: str) -> None:
    encoded = encode_name(name)
    encoded.encode("utf-8")  # strict UTF-8: no lone surrogate left
    assert decode_name(encoded) == name


KEYS = ["k\uef80", "k\uefff", "k\uef7f\uef90", "plain", os.fsdecode(b"b\xef")]


def _shards(folder: Path) -> list[str]:
    folder.mkdir()
    with shardkit.ShardWriter(str(folder / "in-%06d.tar"), max_count=3) as sink:
        for i, key in enumerate(KEYS):
            sink.write({"__key__": key, "txt": f"text {i}", "cls": i})
    urls = [str(folder / f"in-{n:06d}.tar") for n in range(2)]
    write_indexes(urls)
    return urls


def test_private_use_keys_through_index_indexed_dataset_and_build(tmp_path: Path) -> None:
    urls = _shards(tmp_path / "in")
    indexed = IndexedDataset(str(tmp_path / "in"))
    assert [indexed[i]["__key__"] for i in range(len(indexed))] == KEYS
    assert [s["__key__"] for s in shardkit.Dataset(str(tmp_path / "in"))] == KEYS
    pattern = urls[0].replace("000000", "{000000..000001}")
    options = BuildOptions(workers=1, max_count=2, shuffle=False)
    result = shardkit.build(pattern, str(tmp_path / "out"), options=options)
    assert result.samples == len(KEYS) and not result.skipped
    assert sorted(s["__key__"] for s in shardkit.Dataset(str(tmp_path / "out"))) == sorted(KEYS)


def test_a_private_use_prefix_gives_a_dataset_that_reads_and_rebuilds(tmp_path: Path) -> None:
    urls = _shards(tmp_path / "in")
    pattern = urls[0].replace("000000", "{000000..000001}")
    out = str(tmp_path / "out")
    options = BuildOptions(workers=1, max_count=2, prefix="p\uef90\uef7f")
    first = shardkit.build(pattern, out, options=options)
    assert first.shards[0].name == "p\uef90\uef7f-000000.tar"
    assert len(list(shardkit.Dataset(out))) == len(KEYS)
    again = shardkit.build(pattern, out, options=options)
    assert again.resumed_tasks == -1 and again.shards == first.shards
