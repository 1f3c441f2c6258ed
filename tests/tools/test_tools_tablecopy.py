"""``cat`` and ``split`` of shards with a member table in their index
(:mod:`shardkit.tools._tablecopy`): runs of whole samples copied as byte ranges, no tar
header parsed, with the bytes the header path gives; a bad or stale index refused as a
reader refuses it; shards the table does not account for whole read by their headers."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers.tables import FIELDS, refuse_parsing

from shardkit import Dataset, ShardWriter
from shardkit.errors import FormatError
from shardkit.formats import tar
from shardkit.tools import cat, split


def _write(folder: Path, count: int = 60, max_count: int = 25, seed: int = 0) -> list[str]:
    """Indexed shards (a member table in each ``.idx``): the reading core's awkward
    fields, random payloads and one sample larger than the size cuts below."""
    rng = random.Random(seed)
    pattern = str(folder / "shard-%06d.tar")
    with ShardWriter(pattern, max_count=max_count, encode=False) as out:
        for i in range(count):
            sample: dict[str, Any] = {
                "__key__": f"dir{i // 10}/s{i:05d}",
                **FIELDS[i % len(FIELDS)],
            }
            sample["bin"] = rng.randbytes(rng.randrange(0, 3000))
            if i == 11:
                sample["big"] = rng.randbytes(40_000)
            out.write(sample)
    return [info.url for info in out.shards]


def _bare(folder: Path, into: Path) -> list[str]:
    """A copy of ``folder``'s shards without their indexes (read by their headers)."""
    shutil.copytree(folder, into)
    for idx in into.glob("*.idx"):
        idx.unlink()
    return sorted(str(p) for p in into.glob("*.tar"))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _split(urls: list[str], out: Path, **limits: Any) -> list[tuple[Any, ...]]:
    infos = split(urls, str(out / "s-%06d.tar"), hash="blake3", **limits)
    return [(i.name, i.samples, i.bytes, i.digest, i.index) for i in infos]


SPLITS = [
    {"max_count": 7},
    {"max_size": "20KB"},
    {"max_size": 30_000, "max_count": 4},
    {"max_count": 3, "max_shards": 4},
    {"max_size": "10MB"},
]


def test_cat_and_split_copy_indexed_shards_without_parsing_a_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = _write(tmp_path / "in")
    bare = _bare(tmp_path / "in", tmp_path / "bare")
    expected_cat = tmp_path / "expected.tar"
    cat(bare, str(expected_cat))
    expected = [
        _split(bare, tmp_path / f"expected-{i}", **limits) for i, limits in enumerate(SPLITS)
    ]
    refuse_parsing(monkeypatch)  # the table path, or an AssertionError
    assert cat(urls, str(tmp_path / "all.tar")) == 60
    assert (tmp_path / "all.tar").read_bytes() == expected_cat.read_bytes()
    for i, limits in enumerate(SPLITS):
        assert _split(urls, tmp_path / f"got-{i}", **limits) == expected[i]
        assert _files(tmp_path / f"got-{i}") == _files(tmp_path / f"expected-{i}")


@pytest.mark.parametrize(
    ("skip", "count"), [(0, None), (7, 40), (30, 5), (25, 25), (59, 9), (80, 3)]
)
def test_cat_window_gives_the_bytes_the_header_path_gives(
    tmp_path: Path, skip: int, count: int | None
) -> None:
    urls = _write(tmp_path / "in")
    bare = _bare(tmp_path / "in", tmp_path / "bare")
    got, expected = tmp_path / "got.tar", tmp_path / "expected.tar"
    assert cat(urls, str(got), skip=skip, count=count) == cat(
        bare, str(expected), skip=skip, count=count
    )
    assert got.read_bytes() == expected.read_bytes()


@pytest.mark.parametrize("seed", range(6))
def test_split_cuts_where_the_header_path_cuts(tmp_path: Path, seed: int) -> None:
    """The cut of a run at once (:meth:`ShardFile.room`) against the cut of each sample:
    random sample sizes and limits, shards and their indexes byte for byte."""
    rng = random.Random(seed)
    urls = _write(
        tmp_path / "in", count=rng.randrange(1, 90), max_count=rng.randrange(1, 40), seed=seed
    )
    bare = _bare(tmp_path / "in", tmp_path / "bare")
    limits: dict[str, Any] = {"max_size": rng.choice([None, 3000, 9000, 50_000, 200_000])}
    if limits["max_size"] is None or rng.random() < 0.5:
        limits["max_count"] = rng.randrange(1, 30)
    if rng.random() < 0.3:
        limits["max_shards"] = rng.randrange(1, 4)
    assert _split(urls, tmp_path / "got", **limits) == _split(bare, tmp_path / "expected", **limits)
    assert _files(tmp_path / "got") == _files(tmp_path / "expected")


def _refused_by_readers(url: str) -> str:
    with pytest.raises(FormatError) as caught:
        list(Dataset([url]))
    return str(caught.value)


def test_a_stale_index_is_refused_as_a_reader_refuses_it(tmp_path: Path) -> None:
    urls = _write(tmp_path / "in")
    with open(urls[1], "ab") as f:  # the shard changed after its index was written
        f.write(bytes(tar.BLOCK))
    message = _refused_by_readers(urls[1])
    with pytest.raises(FormatError, match="stale index"):
        cat(urls, str(tmp_path / "out.tar"))
    with pytest.raises(FormatError, match="stale index"):
        split(urls, str(tmp_path / "s-%06d.tar"), max_count=5)
    assert message
    assert not (tmp_path / "out.tar").exists()


def _edit_index(url: str, edit: Any) -> None:
    path = url + ".idx"
    with open(path) as f:
        doc = json.load(f)
    edit(doc)
    with open(path, "w") as f:
        json.dump(doc, f)


def test_a_lying_index_is_refused_as_a_reader_refuses_it(tmp_path: Path) -> None:
    urls = _write(tmp_path / "in")
    keys = ["dir2/s00025", "dir2/s00026"]

    def swap(doc: dict[str, Any]) -> None:  # two keys swapped: spans and sizes still fit
        i, j = doc["keys"].index(keys[0]), doc["keys"].index(keys[1])
        doc["keys"][i], doc["keys"][j] = doc["keys"][j], doc["keys"][i]

    _edit_index(urls[1], swap)
    assert "stale index" in _refused_by_readers(urls[1])
    with pytest.raises(FormatError, match="stale index"):
        cat(urls, str(tmp_path / "out.tar"))
    with pytest.raises(FormatError, match="stale index"):
        split(urls, str(tmp_path / "s-%06d.tar"), max_size="1MB")


def test_a_table_that_leaves_members_out_is_read_by_the_headers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A member after the samples its table lists (an index of a shard appended to, its
    size field made to match): the header path copies it, as it always did; the table
    path would drop it."""
    urls = _write(tmp_path / "in", count=30)
    extra = tar.encode_sample({"__key__": "zz/extra", "txt": b"appended"})
    with open(urls[0], "r+b") as f:
        body = f.read()[: -len(tar.END_OF_ARCHIVE)]
        f.seek(0)
        f.write(body + extra + tar.END_OF_ARCHIVE)
    size = os.path.getsize(urls[0])
    _edit_index(urls[0], lambda doc: doc.update(bytes=size))
    bare = _bare(tmp_path / "in", tmp_path / "bare")
    caplog.set_level("INFO", logger="shardkit.tools._tablecopy")
    assert cat(urls, str(tmp_path / "got.tar")) == 31
    assert "not followed by the end of the archive" in caplog.text
    cat(bare, str(tmp_path / "expected.tar"))
    assert (tmp_path / "got.tar").read_bytes() == (tmp_path / "expected.tar").read_bytes()


def _rotation(folder: Path, **limits: Any) -> Any:
    from shardkit.tools._rawsplit import raw_shards

    return raw_shards(str(folder / "r-%06d.tar"), limits.get("max_count"), limits.get("max_size"))


@pytest.mark.parametrize(
    ("keys", "bad"),
    [(["a", "b", "b", "c"], "b"), (["a", "", "c"], ""), (["x", "y", "x", "x"], "x")],
)
def test_a_run_refuses_the_keys_a_sample_at_a_time_refuses(
    tmp_path: Path, keys: list[str], bad: str
) -> None:
    """The key rule checked for a run at once (:meth:`ShardFile.copy_run`) refuses what
    it refuses one sample at a time (:meth:`ShardFile.copy`), with its message."""
    from shardkit.errors import EncodeError

    def refused(add: Any) -> str:
        with pytest.raises(EncodeError) as caught:
            add()
        return str(caught.value)

    one = _rotation(tmp_path / "one", max_count=100)

    def each() -> None:
        for key in keys:
            shard = one.shard(key, 512)
            shard.copy(key, 512, lambda write: write(bytes(512)), checked=True)

    run = _rotation(tmp_path / "run", max_count=100)
    expected = refused(each)
    got = refused(
        lambda: run.copy_run(keys, [512] * len(keys), lambda i, j, w: w(bytes(512 * (j - i))))
    )
    assert got == expected
    assert ("twice in a row" if bad else "non-empty") in got
    one.discard()
    run.discard()


def test_the_key_rule_holds_across_shards_copied_by_their_tables(tmp_path: Path) -> None:
    """The same key at the end of one shard and the start of the next is refused on the
    table path too (a reader would merge the two samples)."""
    from shardkit.errors import EncodeError

    first = _write(tmp_path / "a", count=3)
    with ShardWriter(str(tmp_path / "b" / "shard-%06d.tar"), encode=False) as out:
        out.write({"__key__": "dir0/s00002", "txt": b"again"})
    second = [info.url for info in out.shards]
    with pytest.raises(EncodeError, match="twice in a row"):
        cat(first + second, str(tmp_path / "out.tar"))
    with pytest.raises(EncodeError, match="twice in a row"):
        split(first + second, str(tmp_path / "s-%06d.tar"), max_count=2)


def test_shards_without_a_usable_table_are_read_by_their_headers(tmp_path: Path) -> None:
    """The choice, shard by shard: a webdataset-made shard (indexed or not: its members
    are not shardkit's plain ones, so its index has no table), a ``.tar.gz`` and a shard
    without an index go by their headers; a shardkit shard with its index by the table."""
    from shardkit.pipeline import IndexCache
    from shardkit.tools import index
    from shardkit.tools._inputs import as_refs
    from shardkit.tools._tablecopy import table_of

    wds = pytest.importorskip("webdataset")
    made = tmp_path / "wds.tar"
    with wds.TarWriter(str(made)) as sink:
        for i in range(5):
            sink.write({"__key__": f"w{i}", "txt": b"x" * i, "cls": b"%d" % i})
    index.write_indexes([str(made)])
    assert (tmp_path / "wds.tar.idx").exists()
    ours = _write(tmp_path / "ours", count=12)
    with ShardWriter(str(tmp_path / "gz-%06d.tar.gz"), encode=False) as out:
        out.write({"__key__": "g", "txt": b"gz"})
    bare = _bare(tmp_path / "ours", tmp_path / "bare")
    inputs = [str(made), ours[0], bare[0], out.shards[0].url]
    chosen = []
    for ref in as_refs(inputs):
        table = table_of(ref, IndexCache(limit=0))
        chosen.append(table is not None)
        if table is not None:
            table.raw.close()
    assert chosen == [False, True, False, False]
    mixed, headers = tmp_path / "mixed.tar", tmp_path / "headers.tar"
    assert cat([str(made), *ours], str(mixed)) == 17
    (tmp_path / "wds.tar.idx").unlink()
    assert cat([str(made), *bare], str(headers)) == 17
    assert mixed.read_bytes() == headers.read_bytes()
