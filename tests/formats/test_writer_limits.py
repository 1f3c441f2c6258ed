"""The writers refuse what the reader refuses: one table of limits (formats/limits.py).

Each limit is checked from the writer's side: ``TarWriter`` / ``ShardWriter`` (and the
TFRecord framing they use) raise an EncodeError for a sample that ``read_shard`` with
its default limits would reject, and write one just inside the limit that reads back.
The same-key rule has one message, whichever writer applies it; the table of writers is
checked against the source: every function or class that composes ``writer.ShardFile``.
"""

from __future__ import annotations

import ast
import io
import mmap
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shardkit.errors import EncodeError, FormatError
from shardkit.formats import limits, tar
from shardkit.formats.tfrecord import frame_record
from shardkit.reader import read_shard
from shardkit.writer import ShardWriter


def _write(sample: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with tar.TarWriter(buffer) as writer:
        writer.write(sample)
    return buffer.getvalue()


@pytest.fixture
def huge() -> Iterator[memoryview]:
    """A zero-filled buffer one byte over the member limit, not backed by memory until
    touched: the writer must refuse it before copying it."""
    size = limits.MAX_MEMBER_SIZE + 1
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(region)
    yield view
    view.release()
    region.close()


def test_the_limits_are_one_table() -> None:
    from shardkit import reader
    from shardkit.formats import tfrecord

    assert reader.MAX_RECORD_LENGTH is tfrecord.MAX_RECORD_LENGTH is limits.MAX_RECORD_LENGTH
    assert limits.MAX_NAME_BYTES < limits.MAX_TAR_META_SIZE


def test_a_member_over_the_limit_is_refused_before_it_is_copied(huge: memoryview) -> None:
    with pytest.raises(EncodeError, match="max_member_size"):
        _write({"__key__": "k", "bin": huge})
    with pytest.raises(EncodeError, match="max_member_size"):
        tar.encode_sample({"__key__": "k", "txt": b"x", "bin": huge})


def test_a_record_over_the_limit_is_refused(huge: memoryview) -> None:
    with pytest.raises(EncodeError, match="max_record_length"):
        frame_record(huge)


def test_a_name_over_the_limit_is_refused_and_one_at_it_reads_back(tmp_path: Path) -> None:
    ext = "txt"
    at_limit = "k" * (limits.MAX_NAME_BYTES - len(ext) - 1)  # key + "." + ext
    with pytest.raises(EncodeError, match="limit readers apply to names"):
        _write({"__key__": at_limit + "k", ext: b"x"})
    path = tmp_path / "s-%06d.tar"
    with ShardWriter(str(path), max_count=10) as writer:
        writer.write({"__key__": at_limit, ext: b"x"})
    [sample] = list(read_shard(writer.shards[0].url))
    assert sample["__key__"] == at_limit and sample[ext] == b"x"


@pytest.mark.parametrize(
    "sample",
    [
        {"__key__": "k", "jpg": b"1", "JPG": b"2"},
        {"__key__": "k", "seg.png": b"1", "SEG.png": b"2"},
    ],
    ids=["jpg-JPG", "seg.png-SEG.png"],
)
def test_extensions_equal_once_lower_cased_are_refused(
    tmp_path: Path, sample: dict[str, Any]
) -> None:
    # Was: written, and read_shard then raised "duplicate extension" on the shard.
    with pytest.raises(EncodeError, match="lower-cased"):
        _write(sample)
    with (
        pytest.raises(EncodeError, match="lower-cased"),
        ShardWriter(str(tmp_path / "s-%06d.tar")) as writer,
    ):
        writer.write(sample)
    assert not list(tmp_path.iterdir())


def test_an_extension_with_nul_is_refused() -> None:
    # Was: written; the reader cut the name at the NUL and read another member name.
    with pytest.raises(EncodeError, match="NUL"):
        _write({"__key__": "k", "t\0xt": b"x"})


Write = Callable[[Path, list[str]], None]  # writes one sample per key, in order


def _tar_writer(folder: Path, keys: list[str]) -> None:
    with tar.TarWriter(io.BytesIO()) as writer:
        for key in keys:
            writer.write({"__key__": key, "txt": b"x"})


def _shard_writer(folder: Path, keys: list[str]) -> None:
    with ShardWriter(str(folder / "w-%06d.tar"), max_count=10) as writer:
        for key in keys:
            writer.write({"__key__": key, "txt": b"x"})


def _shard_file(folder: Path, keys: list[str]) -> None:
    from shardkit.writer import ShardFile

    with ShardFile.open(str(folder / "f.tfrecord")) as shard:
        for key in keys:
            shard.write_sample({"__key__": key, "txt": b"x"})


def _part_writer(folder: Path, keys: list[str]) -> None:
    from shardkit.builder._partwriter import PartWriter
    from shardkit.builder._store import LocalStore
    from shardkit.formats.cut import Cut
    from shardkit.formats.tar import tar_chunks

    writer = PartWriter(LocalStore(str(folder)), "p-%06d.tar", cut=Cut(10_000, 1 << 20))
    try:
        for key in keys:
            chunks, size = tar_chunks(key, [("txt", b"x")])
            writer.add(key, chunks, size)
    finally:
        writer.abort()


def _output(folder: Path, keys: list[str]) -> None:
    from shardkit.tools._outputs import Output

    with Output(str(folder / "o.tar")) as out:
        for key in keys:
            out.write({"__key__": key, "txt": b"x"})


def _rotation(folder: Path, keys: list[str]) -> None:
    from shardkit.tools._rawsplit import raw_shards

    sink = raw_shards(str(folder / "r-%06d.tar"), max_count=10, max_size=None)
    try:
        for key in keys:
            shard = sink.shard(key, 0)
            assert shard is not None
            shard.copy(key, 0, lambda write: None)
    finally:
        sink.discard()


def _renamed(sample: dict[str, Any]) -> dict[str, Any]:
    return {"__key__": sample["txt"].decode(), "txt": b"x"}


def _map_shards(folder: Path, keys: list[str]) -> None:
    from shardkit.mapshards import map_shards

    source = folder / "in.tar"
    source.write_bytes(
        b"".join(tar.encode_sample({"__key__": f"k{i}", "txt": key}) for i, key in enumerate(keys))
        + tar.END_OF_ARCHIVE
    )
    map_shards(_renamed, [str(source)], [str(folder / f"m{len(keys)}.tar")], workers=1)


# Every writer of shard bytes, by the function or class that writes them: the ones that
# compose ``writer.ShardFile`` are found in the source (test below), and TarWriter, the
# stream writer of formats/.
_WRITERS: dict[str, Write] = {
    "shardkit.formats.tar.TarWriter": _tar_writer,
    "shardkit.writer.ShardFile": _shard_file,
    "shardkit.writer.ShardWriter": _shard_writer,
    "shardkit.builder._partwriter.PartWriter": _part_writer,
    "shardkit.tools._outputs.Output": _output,
    "shardkit.writer.Rotation": _rotation,
    "shardkit.tools._rawsplit.raw_shards": _rotation,
    "shardkit.mapshards.run_shard": _map_shards,
}


def _called(node: ast.AST) -> set[str]:
    """The names that ``node`` calls, or whose attribute it calls (``ShardFile.open``)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func.value if isinstance(call.func, ast.Attribute) else call.func
            if isinstance(func, ast.Name):
                names.add(func.id)
    return names


def _shard_file_users() -> set[str]:
    """Every module-level function or class of shardkit that makes a ``ShardFile`` or a
    ``Rotation`` (of ShardFiles)."""
    import shardkit

    root = Path(shardkit.__file__).parent
    found = set()
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("shardkit", *path.relative_to(root).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name == "ShardFile":
                continue
            if _called(node) & {"ShardFile", "Rotation"}:
                found.add(f"{module}.{node.name}")
    return found


def test_the_writers_table_lists_every_writer_of_a_shard_file() -> None:
    # Was: a table kept by hand, without map_shards.
    users = _shard_file_users()
    assert "shardkit.mapshards.run_shard" in users
    # The build's assembly copies the samples its part writers (above) wrote and checked.
    # writers of samples they make themselves, through a ShardFile the table covers: an
    # assembled shard's indexed copy, a token build's groups (sizes bounded by GROUP_TOKENS)
    made_here = {
        "shardkit.builder._assembly._assemble_indexed",
        "shardkit.builder._tokens._write_shard",
    }
    missing = users - set(_WRITERS) - made_here
    assert not missing, f"writers of shard files missing from _WRITERS: {sorted(missing)}"
    stale = set(_WRITERS) - users - {"shardkit.formats.tar.TarWriter", "shardkit.writer.ShardFile"}
    assert not stale, f"_WRITERS lists what writes no shard file: {sorted(stale)}"


def test_only_the_shard_file_applies_the_key_rule_and_the_gzip_framing() -> None:
    """No writer keeps a key-order state or a gzip framing of its own."""
    import shardkit

    root = Path(shardkit.__file__).parent
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        text = path.read_text()
        if name not in (
            "writer.py",
            "formats/tar.py",
            "formats/_tarrules.py",
            "formats/_tarwrite.py",
        ):
            assert "check_key_order" not in text, name
        if name not in ("writer.py", "formats/gzframe.py", "codecs/_builtin.py"):
            writes_gzip = re.search(r"(?<!de)compressobj|GzipFile\([^)]*\bwb", text)
            assert writes_gzip is None, name


@pytest.mark.parametrize("make", list(_WRITERS))
def test_every_writer_refuses_the_same_key_twice_in_a_row_with_one_message(
    tmp_path: Path, make: str
) -> None:
    # Was: three different messages over five copies of the check; map_shards wrote it.
    _WRITERS[make](tmp_path, ["a", "b"])
    with pytest.raises(EncodeError) as info:
        _WRITERS[make](tmp_path, ["a", "b", "b"])
    assert info.value.message == tar.SAME_KEY and info.value.key == "b"


def test_split_and_cat_across_shards_refuse_a_key_that_would_merge(tmp_path: Path) -> None:
    from shardkit.tools import cat, split

    first, second = tmp_path / "a.tar", tmp_path / "b.tar"
    first.write_bytes(_write({"__key__": "k", "txt": b"1"}))
    second.write_bytes(_write({"__key__": "k", "txt": b"2"}))
    for run in (
        lambda: split([str(first), str(second)], str(tmp_path / "s-%06d.tar"), max_count=5),
        lambda: cat([str(first), str(second)], str(tmp_path / "all.tar")),
    ):
        with pytest.raises(EncodeError) as info:
            run()
        assert info.value.message == tar.SAME_KEY
    assert sorted(os.listdir(tmp_path)) == ["a.tar", "b.tar"]


def test_what_the_writer_accepts_the_reader_reads(tmp_path: Path) -> None:
    sample = {"__key__": "d/k", "JPG": b"1", "seg.png": b"2", "cls": b"3"}
    path = tmp_path / "s.tar"
    path.write_bytes(_write(sample))
    try:
        [got] = list(read_shard(str(path)))
    except FormatError as exc:  # pragma: no cover - the point of the test
        raise AssertionError(f"the reader refused what the writer wrote: {exc}") from exc
    assert {k: v for k, v in got.items() if not k.startswith("__")} == {
        "jpg": b"1",
        "seg.png": b"2",
        "cls": b"3",
    }
