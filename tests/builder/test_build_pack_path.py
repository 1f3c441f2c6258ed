"""The build's per-image path (issue 27, item 3): the member table of each shard's
``.idx`` is made from what the writer knows (no parse of the bytes it just wrote), the
tar headers come from a template, and the pixel limit is looked up once per task. The
bytes stay those of the reference paths: the parser's table, ``encode_sample``'s members,
``check_pixels``'s verdicts.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from helpers.build import make_corpus, snapshot, write

import shardkit
from shardkit.builder._inputs import FileSource
from shardkit.builder._validate import check_image
from shardkit.builder.options import BuildOptions
from shardkit.demo import make_jpeg
from shardkit.errors import LimitError
from shardkit.formats import members as members_module
from shardkit.formats.index import ShardIndex
from shardkit.formats.members import TableBuilder, sample_members
from shardkit.formats.tar import encode_sample, tar_chunks, tar_sample
from shardkit.tools.index import build_index


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = make_corpus(str(tmp_path_factory.mktemp("pack") / "src"), count=60)
    jpeg = make_jpeg(random.Random(3), 0)
    for rel in ("Ünïcode/a.JPG", "Ünïcode/b.jpeg", "circle/UPPER.JPG", "circle/x.y.jpg"):
        write(folder, rel, jpeg)
    return folder


def _tables(out: Path) -> dict[str, bytes]:
    return {n: (out / n).read_bytes() for n in sorted(os.listdir(out)) if n.endswith(".idx")}


def test_a_build_tables_its_members_without_parsing_them(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken: a build in this process (one worker) never parses a sample
    it wrote, and each .idx has its member table."""

    def parse(*args: object) -> None:
        raise AssertionError("the build parsed a sample it wrote to make the member table")

    monkeypatch.setattr(members_module, "sample_members", parse)
    out = tmp_path / "out"
    shardkit.build(corpus, out, options=BuildOptions(max_count=25, workers=1))
    tables = _tables(out)
    assert len(tables) >= 3
    for data in tables.values():
        assert ShardIndex.from_json(data).members is not None


def test_the_tables_are_those_the_parser_makes(corpus: str, tmp_path: Path) -> None:
    """Every .idx (member table included) is what `shardkit index` makes by parsing the
    shard, for odd names too (upper-case and non-ASCII paths, a dot in a file's stem)."""
    out = tmp_path / "out"
    shardkit.build(corpus, out, options=BuildOptions(max_count=25, workers=2))
    tables = _tables(out)
    assert tables
    for name, data in tables.items():
        shard = str(out / name.removesuffix(".idx"))
        assert build_index(shard).to_json() == data


@pytest.mark.parametrize(
    "key",
    ["a/b", "Ünïcode/a", "x" * 95, "x" * 120, "a.b/c", "bad\udcffbyte", "a\udcc3\udca9"],
)
def test_tar_sample_is_encode_sample_and_says_what_a_table_records(key: str) -> None:
    fields = [("jpg", b"\xff" * 5000), ("cls", b"3"), ("JSON", b"{}"), ("é", b"")]
    chunks, total, members = tar_sample(key, fields)
    data = b"".join(chunks)
    assert data == encode_sample({"__key__": key, **dict(fields)})
    assert total == len(data) and tar_chunks(key, fields) == (chunks, total)
    parsed = TableBuilder().add(key, data)
    if members is None:
        return  # a name the reader may decode otherwise, or a long one: the table parses
    fast = TableBuilder().add_fields(key, *members)
    assert (fast is None) == (parsed is None)
    if fast is not None and parsed is not None:
        assert fast.build().to_doc() == parsed.build().to_doc()


def test_tar_sample_leaves_names_a_reader_decodes_otherwise_to_the_parser() -> None:
    assert tar_sample("x" * 120, [("jpg", b"1")])[2] is None  # a long name
    assert tar_sample("a", [("é", b"1")])[2] is None  # not ASCII
    assert tar_sample("a\udcc3\udca9", [("jpg", b"1")])[2] is None  # decodes to 'é'
    assert tar_sample("a/b", [("jpg", b"1"), ("cls", b"22")])[2] == (["jpg", "cls"], [1, 2])


@pytest.mark.parametrize(
    ("key", "exts"),
    [("a/b", ["jpg", "JPG"]), ("a/b", ["__key__"]), ("a/b.c", ["jpg"]), ("a/", ["jpg"])],
)
def test_add_fields_refuses_what_sample_members_refuses(key: str, exts: list[str]) -> None:
    data = b"".join(b"".join(tar_chunks(key, [(ext, b"1")])[0]) for ext in exts)
    assert sample_members(data, key) is None
    assert TableBuilder().add_fields(key, exts, [1] * len(exts)) is None


def test_the_pixel_limit_looked_up_once_gives_the_same_verdicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jpeg = make_jpeg(random.Random(1), 0)  # a few hundred pixels a side
    assert check_image(jpeg, "jpg", max_pixels=10**9) == "jpg"
    monkeypatch.setenv("SHARDKIT_MAX_IMAGE_PIXELS", "100")
    with pytest.raises(LimitError) as reference:
        check_image(jpeg, "jpg")
    with pytest.raises(LimitError) as fast:
        check_image(jpeg, "jpg", max_pixels=100)
    assert str(fast.value) == str(reference.value)


def test_a_local_folder_is_read_without_the_sources_dispatch(
    corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker reads a local folder's files straight from their paths (the fast path
    is taken: the source's load is never called), and packs the same bytes."""
    reference = tmp_path / "reference"
    shardkit.build(corpus, reference, options=BuildOptions(max_count=25, workers=1))

    def refuse(*args: object) -> None:
        raise AssertionError("a local folder's file went through FileSource.load")

    monkeypatch.setattr(FileSource, "load", refuse)
    monkeypatch.setattr(FileSource, "http_url", refuse)
    out = tmp_path / "out"
    result = shardkit.build(corpus, out, options=BuildOptions(max_count=25, workers=1))
    assert result.skipped and snapshot(str(out)) == snapshot(str(reference))
