"""A remote shard read through the local cache (``cache_dir``): its index comes into the
cache with it, and once both are there, reading it is a local indexed shard's read,
slices of the mapped copy, no header parsed and no request made; a cached index that
lies or is stale is refused as a local one is. (A loopback HTTP server: no services.)"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.remote import Faults, faulty_server
from helpers.tables import FIELDS, refuse_parsing

from shardkit import Dataset, FormatError, ShardWriter, storage
from shardkit.reader import read_shard


def _shard(folder: Path, count: int = 12) -> dict[str, bytes]:
    """One shard and its index, as the server's files (path -> bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(folder / "shard-%06d.tar"), encode=False) as out:
        for i in range(count):
            out.write({"__key__": f"k/s{i:05d}", **FIELDS[i % len(FIELDS)]})
    return {f"/{p.name}": p.read_bytes() for p in folder.iterdir()}


def _plain(samples: Any) -> list[dict[str, Any]]:
    return [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()} for s in samples
    ]


def _requests_while(faults: Faults, read: Any) -> tuple[list[dict[str, Any]], int]:
    before = len(faults.requests)
    got = _plain(read())
    return got, len(faults.requests) - before


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
def test_a_cached_shard_and_its_index_read_by_slices_without_a_request(
    tmp_path: Path, copy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _shard(tmp_path / "src")
    assert "/shard-000000.tar.idx" in files
    cache = str(tmp_path / "cache")
    faults = Faults()
    with faulty_server(files, faults) as server:
        url = server + "/shard-000000.tar"
        streamed = _plain(read_shard(url))  # the stream, no cache
        ds = Dataset(url, cache_dir=cache, copy=copy)
        first, asked = _requests_while(faults, lambda: ds)
        assert first == streamed and asked >= 2  # the shard, and its index
        idx_copy = storage.cache_path(url, cache) + ".idx"
        assert Path(idx_copy).read_bytes() == files["/shard-000000.tar.idx"]
        refuse_parsing(monkeypatch)
        for again in (ds, Dataset(url, cache_dir=cache, copy=copy)):  # this run, the next
            got, asked = _requests_while(faults, lambda: again)  # noqa: B023
            assert got == streamed and asked == 0
    kind = bytes if copy else memoryview
    assert isinstance(next(iter(Dataset(url, cache_dir=cache, copy=copy)))["txt"], kind)


def test_a_cached_shard_without_an_index_is_parsed_then_sliced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _shard(tmp_path / "src")
    del files["/shard-000000.tar.idx"]
    cache = str(tmp_path / "cache")
    with faulty_server(files, Faults()) as server:
        url = server + "/shard-000000.tar"
        streamed = _plain(read_shard(url))
        ds = Dataset(url, cache_dir=cache)
        assert _plain(ds) == streamed  # streamed, and cached
        assert not os.path.exists(storage.cache_path(url, cache) + ".idx")
        assert _plain(ds) == streamed  # the copy, parsed
        assert _plain(ds) == streamed  # again: its table noted
        refuse_parsing(monkeypatch)
        assert _plain(ds) == streamed


def _cached(tmp_path: Path) -> tuple[dict[str, bytes], str]:
    files = _shard(tmp_path / "src")
    return files, str(tmp_path / "cache")


@pytest.mark.parametrize(
    ("byte", "change", "refusal"),
    [
        (1, 2, r"shard-000000\.tar\.idx: bad index member table: the members of sample 0"),
        (0, 1, r"shard-000000\.tar, sample 'k/s00000', offset 0: member 'k/s00000\.txt' is not"),
    ],
    ids=["span", "bytes"],
)
def test_a_cached_index_that_lies_is_refused(
    tmp_path: Path, byte: int, change: int, refusal: str
) -> None:
    """Member 0 said 512 bytes longer (its span is not filled: the index is refused
    whole), or one byte shorter (the span is the same: its header says otherwise)."""
    files, cache = _cached(tmp_path)
    with faulty_server(files, Faults()) as server:
        url = server + "/shard-000000.tar"
        list(Dataset(url, cache_dir=cache))
        idx_copy = storage.cache_path(url, cache) + ".idx"
        with open(idx_copy) as f:
            doc = json.load(f)
        sizes = bytearray(base64.b64decode(doc["members"]["sizes"]))
        sizes[byte] ^= change
        doc["members"]["sizes"] = base64.b64encode(bytes(sizes)).decode()
        with open(idx_copy, "w") as f:
            json.dump(doc, f)
        with pytest.raises(FormatError, match=refusal):
            list(Dataset(url, cache_dir=cache))


def test_a_cached_index_made_for_another_copy_is_refused(tmp_path: Path) -> None:
    files, cache = _cached(tmp_path)
    other = _shard(tmp_path / "other", count=7)["/shard-000000.tar"]
    with faulty_server(files, Faults()) as server:
        url = server + "/shard-000000.tar"
        list(Dataset(url, cache_dir=cache))
        copy = storage.cache_path(url, cache)
        with open(copy + ".new", "wb") as f:
            f.write(other)
        os.replace(copy + ".new", copy)  # the copy is another shard now
        with pytest.raises(FormatError, match=r"shard-000000\.tar\.idx: stale index"):
            list(Dataset(url, cache_dir=cache))


def test_a_shard_fetched_again_brings_its_index_again(tmp_path: Path) -> None:
    """A copy evicted (or removed) is fetched again with its index: the index copy never
    outlives the shard it was fetched with."""
    files, cache = _cached(tmp_path)
    with faulty_server(files, Faults()) as server:
        url = server + "/shard-000000.tar"
        list(Dataset(url, cache_dir=cache))
        idx_copy = storage.cache_path(url, cache) + ".idx"
        with open(idx_copy, "w") as f:
            f.write("{}")  # what an older run left
        os.remove(storage.cache_path(url, cache))
        assert len(list(Dataset(url, cache_dir=cache))) == 12
        assert Path(idx_copy).read_bytes() == files["/shard-000000.tar.idx"]
        del files["/shard-000000.tar.idx"]  # the server has none now
        os.remove(storage.cache_path(url, cache))
        assert len(list(Dataset(url, cache_dir=cache))) == 12
        assert not os.path.exists(idx_copy)
