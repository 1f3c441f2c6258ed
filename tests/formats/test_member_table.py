"""The reading core: an index's member table makes reading an indexed tar shard slices
of the mapped shard, with no tar header parsed (:mod:`shardkit.formats.members`).

Every read path takes it (``Dataset`` with ``copy=True`` and ``copy=False``,
``IndexedDataset``, ``Loader`` workers, ``mix``); shards without an index and with an
older index (no table) read the same samples; a table that lies is refused naming the
index or the shard."""

from __future__ import annotations

import base64
import json
import os
import shutil
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.tables import FIELDS, refuse_parsing

import shardkit
from shardkit import Dataset, IndexedDataset, Loader, ShardWriter, mix
from shardkit.errors import FormatError
from shardkit.tools import write_indexes


def _samples(count: int) -> Iterator[dict[str, Any]]:
    for i in range(count):
        yield {"__key__": f"dir/s{i:05d}", **FIELDS[i % len(FIELDS)]}


def _write(folder: Path, count: int = 23, max_count: int = 10) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(folder / "shard-%06d.tar"), max_count=max_count, encode=False) as out:
        for sample in _samples(count):
            out.write(sample)
    return folder


def _shards(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.tar"))


def _as_bytes(samples: Any) -> list[dict[str, Any]]:
    return [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}
        for sample in samples
    ]


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    return _write(tmp_path / "ds")


@pytest.fixture
def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tar header parser's entry points raise: a read that parses fails loudly (in a
    forked worker too)."""
    refuse_parsing(monkeypatch)


def test_shardwriter_and_shardkit_index_write_the_same_table(indexed: Path) -> None:
    shard = _shards(indexed)[0]
    with open(shard + ".idx") as f:
        written = json.load(f)
    os.remove(shard + ".idx")
    write_indexes([shard])
    with open(shard + ".idx") as f:
        rebuilt = json.load(f)
    assert written["members"] == rebuilt["members"]
    layouts = written["members"]["layouts"]
    assert ["txt", "cls"] in layouts and ["jpg"] in layouts and ["seg.png", "cls"] in layouts


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
def test_a_dataset_pass_over_indexed_shards_parses_no_header(
    indexed: Path, copy: bool, request: pytest.FixtureRequest
) -> None:
    expected = _as_bytes(Dataset(str(indexed), copy=copy))
    request.getfixturevalue("no_parsing")
    ds = Dataset(str(indexed), copy=copy)
    got = list(ds)
    assert _as_bytes(got) == expected and len(got) == 23
    kind = bytes if copy else memoryview
    assert all(isinstance(s["txt"], kind) for s in got if "txt" in s)
    assert _as_bytes(ds) == expected  # a second pass: the table was kept, checked once


def test_indexed_dataset_reads_by_the_table_without_parsing(
    indexed: Path, no_parsing: None
) -> None:
    for copy in (True, False):
        ds = IndexedDataset(str(indexed), copy=copy)
        sample = ds[11]
        assert sample["__key__"] == "dir/s00011" and bytes(sample["cls"]) == b""
        assert bytes(sample["txt"]) == b"y" * 512
        assert bytes(ds[3]["jpg"]).startswith(b"\xff\xd8")


def test_loader_workers_and_mix_read_by_the_table_without_parsing(
    indexed: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    other = _write(tmp_path / "other", count=7)
    request.getfixturevalue("no_parsing")
    ds = Dataset(str(indexed)).batched(4, collate=None)
    loader = Loader(ds, num_workers=2, multiprocessing_context="fork")
    keys = sorted(s["__key__"] for batch in loader for s in batch)
    assert keys == [f"dir/s{i:05d}" for i in range(23)]
    mixed = list(mix([Dataset(str(indexed)), Dataset(str(other))]))
    assert {s["__key__"] for s in mixed} >= {"dir/s00000", "dir/s00006"}


def _drop_tables(folder: Path) -> None:
    for shard in _shards(folder):
        with open(shard + ".idx") as f:
            doc = json.load(f)
        del doc["members"]
        with open(shard + ".idx", "w") as f:
            json.dump(doc, f)


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
def test_no_index_and_an_older_index_read_the_same_samples(
    indexed: Path, tmp_path: Path, copy: bool
) -> None:
    with_table = _as_bytes(Dataset(str(indexed), copy=copy))
    older = Path(shutil.copytree(indexed, tmp_path / "older"))
    _drop_tables(older)
    bare = Path(shutil.copytree(indexed, tmp_path / "bare"))
    for idx in bare.glob("*.idx"):
        idx.unlink()
    for folder in (older, bare):
        got = _as_bytes(Dataset(str(folder), copy=copy))
        for sample in got:
            sample["__url__"] = sample["__url__"].replace(str(folder), str(indexed))
        assert got == with_table
    assert len(with_table) == 23 and with_table[3]["__key__"] == "dir/s00003"
    assert [IndexedDataset(str(older))[i] for i in (3, 4)] == [
        {**IndexedDataset(str(indexed))[i], "__url__": _shards(older)[0]} for i in (3, 4)
    ]


def test_a_key_longer_than_a_header_name_leaves_the_shard_without_a_table(tmp_path: Path) -> None:
    folder = tmp_path / "long"
    folder.mkdir()
    with ShardWriter(str(folder / "shard-%06d.tar")) as out:
        out.write({"__key__": "k" * 150, "txt": b"long"})
        out.write({"__key__": "short", "txt": b"s"})
    (shard,) = _shards(folder)
    with open(shard + ".idx") as f:
        assert "members" not in json.load(f)
    assert [s["__key__"] for s in Dataset(str(folder))] == ["k" * 150, "short"]


def _edit_table(shard: str, edit: Any) -> None:
    with open(shard + ".idx") as f:
        doc = json.load(f)
    edit(doc["members"])
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)


def _sizes(table: dict[str, Any]) -> array[int]:
    sizes = array("I")
    sizes.frombytes(base64.b64decode(table["sizes"]))
    return sizes


def _set_sizes(table: dict[str, Any], sizes: array[int]) -> None:
    table["sizes"] = base64.b64encode(sizes.tobytes()).decode()


def _shift_members(table: dict[str, Any]) -> None:
    """Sample 2's txt (513 bytes) a block shorter, its cls (1 byte) a block longer: the
    span is still filled exactly, but its cls is not where the table says."""
    sizes = _sizes(table)
    sizes[4], sizes[5] = 1, 513  # members 0-1: sample 0, 2-3: sample 1, 4-6: sample 2
    _set_sizes(table, sizes)


def _swap_extensions(table: dict[str, Any]) -> None:
    table["layouts"][0] = list(reversed(table["layouts"][0]))  # txt,cls -> cls,txt


def _overfill(table: dict[str, Any]) -> None:
    sizes = _sizes(table)
    sizes[0] += 5000
    _set_sizes(table, sizes)


@pytest.mark.parametrize(
    "edit, where, message",
    [
        (_overfill, ".idx", "do not fill its span"),
        (_swap_extensions, ".tar", "member table lists dir/s00000.cls"),
        (_shift_members, ".tar", "not the plain member of 1 bytes"),
        (lambda t: t["layouts"].__setitem__(0, ["txt", "__key__"]), ".idx", "'__key__'"),
        (lambda t: t.__setitem__("layout", "AAA="), ".idx", "bad index"),
        (lambda t: t.__setitem__("sizes", "!!"), ".idx", "bad index file"),
    ],
    ids=["overfill", "swapped", "shifted", "reserved", "layout", "sizes"],
)
def test_a_lying_member_table_is_refused_naming_the_shard(
    indexed: Path, edit: Any, where: str, message: str
) -> None:
    shard = _shards(indexed)[0]
    _edit_table(shard, edit)
    url = shard + (".idx" if where == ".idx" else "")
    with pytest.raises(FormatError, match=message) as caught:
        list(Dataset(str(indexed)))
    assert caught.value.url == url
    with pytest.raises(FormatError, match=message) as caught:
        ds = IndexedDataset(str(indexed))
        [ds[i] for i in range(3)]
    assert caught.value.url == url


def _index(shard: str) -> dict[str, Any]:
    with open(shard + ".idx") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _put_index(shard: str, doc: dict[str, Any]) -> None:
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)


def _refused(folder: Path, url: str, message: str) -> None:
    """A read of ``folder`` by its tables refuses what a parse would not give, naming
    ``url``."""
    with pytest.raises(FormatError, match=message) as caught:
        list(Dataset(str(folder)))
    assert caught.value.url == url


def test_a_table_whose_key_a_parse_would_split_elsewhere_is_refused(tmp_path: Path) -> None:
    """A member ``dir/a.b.txt`` is key ``dir/a`` with field ``b.txt`` to a parse; an index
    that calls it key ``dir/a.b`` with field ``txt`` matches its header name byte for byte,
    and would re-key the sample; so would a key whose last part starts with a dot."""
    folder = tmp_path / "ds"
    folder.mkdir()
    with ShardWriter(str(folder / "shard-%06d.tar"), encode=False) as out:
        out.write({"__key__": "dir/a", "b.txt": b"x" * 10})
        out.write({"__key__": "dir/c", "txt": b"y"})
    (shard,) = _shards(folder)
    honest = _index(shard)
    assert [s["__key__"] for s in Dataset(str(folder))] == ["dir/a", "dir/c"]
    for key, ext in [("dir/a.b", "txt"), ("dir/.a", "b.txt")]:
        doc = json.loads(json.dumps(honest))
        doc["keys"][0] = key
        doc["members"]["layouts"][0] = [ext]
        _put_index(shard, doc)
        _refused(folder, shard + ".idx", "is not what its members' names give")


def test_a_table_that_leaves_out_a_sample_is_refused(indexed: Path) -> None:
    """An index listing samples 0 and 2 of a shard (sample 1 dropped, every other field
    consistent) would read two samples where the shard holds three."""
    shard = _shards(indexed)[0]
    doc = _index(shard)
    members = doc["members"]
    layout = array("H", base64.b64decode(members["layout"]))
    sizes = _sizes(members)
    counts = [len(members["layouts"][n]) for n in layout]
    first = sum(counts[:1])
    del sizes[first : first + counts[1]]
    del layout[1]
    members["layout"] = base64.b64encode(layout.tobytes()).decode()
    _set_sizes(members, sizes)
    for field in ("keys", "offsets", "sizes"):
        del doc[field][1]
    _put_index(shard, doc)
    _refused(indexed, shard + ".idx", "sample 1 .* does not start where sample 0 ends")


def test_a_shard_that_goes_on_after_its_index_is_refused(indexed: Path) -> None:
    """A member appended after the last sample (the end blocks moved after it, the
    index's size edited to match) is a sample to a parse, left out by the table."""
    shard = _shards(indexed)[0]
    doc = _index(shard)
    end = doc["offsets"][-1] + doc["sizes"][-1]
    extra = tmp = Path(shard).parent / "extra"
    tmp.mkdir()
    with ShardWriter(str(tmp / "x-%06d.tar"), encode=False) as out:
        out.write({"__key__": "dir/zz", "txt": b"appended"})
    (added,) = _shards(extra)
    with open(added, "rb") as f:
        member = f.read(1024)  # its header and data block
    shutil.rmtree(extra)
    with open(shard, "r+b") as f:
        f.seek(end)
        tail = f.read()
        f.seek(end)
        f.write(member + tail)
    doc["bytes"] += len(member)
    _put_index(shard, doc)
    _refused(indexed, shard, "goes on after its index's last sample")
    bare = Path(shard).parent.parent / "bare.tar"
    shutil.copyfile(shard, bare)  # no index beside it: parsed
    assert "dir/zz" in [s["__key__"] for s in Dataset(str(bare))]


def test_a_shard_rewritten_at_the_same_size_is_caught_by_its_bytes(
    indexed: Path, tmp_path: Path
) -> None:
    """Other keys of the same length, the same sizes: the index still fits the shard's
    size and spans, the member headers say otherwise."""
    shard = _shards(indexed)[0]
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    with ShardWriter(str(renamed / "shard-%06d.tar"), max_count=10, encode=False) as out:
        for sample in list(_samples(10)):
            out.write({**sample, "__key__": sample["__key__"].replace("dir/s", "dir/t")})
    shutil.copyfile(_shards(renamed)[0], shard)  # its .idx is the old one's
    with pytest.raises(FormatError, match="the index says sample 'dir/s00000'") as caught:
        list(Dataset(str(indexed)))
    assert caught.value.url == shard
    seen: list[Exception] = []
    lenient = Dataset(str(indexed), handler=lambda exc: seen.append(exc) or True)
    keys = {s["__key__"] for s in lenient}  # that shard refused, the next one read
    assert keys == {f"dir/s{i:05d}" for i in range(10, 23)} and seen


def test_an_edit_to_the_shard_after_a_pass_is_seen_by_the_next(indexed: Path) -> None:
    ds = Dataset(str(indexed))
    assert len(list(ds)) == 23
    shard = _shards(indexed)[0]
    with open(shard + ".idx") as f:
        offset = json.load(f)["offsets"][1]
    with open(shard, "r+b") as f:  # sample 1's first header: another name, same size
        f.seek(offset)
        f.write(b"dir/x")
    os.utime(shard, ns=(0, 0))
    with pytest.raises(FormatError, match="'dir/x00001'"):
        list(ds)


def test_the_table_is_refused_for_a_gzipped_or_tfrecord_shard(tmp_path: Path) -> None:
    folder = _write(tmp_path / "ds", count=3)
    (shard,) = _shards(folder)
    with open(shard + ".idx") as f:
        doc = json.load(f)
    doc["compressed"] = True
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)
    with pytest.raises(FormatError, match="member table for a gzipped"):
        shardkit.IndexedDataset(str(folder))[0]
