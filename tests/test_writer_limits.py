"""The writers refuse what the reader refuses: one table of limits (formats/limits.py).

Each limit is checked from the writer's side: ``TarWriter`` / ``ShardWriter`` (and the
TFRecord framing they use) raise an EncodeError for a sample that ``read_shard`` with
its default limits would reject, and write one just inside the limit that reads back.
The same-key rule has one message, whichever writer applies it.
"""

from __future__ import annotations

import io
import mmap
import os
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

    assert tar.MAX_MEMBER_SIZE is limits.MAX_MEMBER_SIZE is reader.MAX_MEMBER_SIZE
    assert tfrecord.MAX_RECORD_LENGTH is limits.MAX_RECORD_LENGTH
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


def _tar_writer() -> Callable[[str], None]:
    writer = tar.TarWriter(io.BytesIO())
    return lambda key: writer.write({"__key__": key, "txt": b"x"})


def _shard_writer(folder: Path) -> Callable[[str], None]:
    writer = ShardWriter(str(folder / "w-%06d.tar"), max_count=10)
    return lambda key: writer.write({"__key__": key, "txt": b"x"})


def _part_writer(folder: Path) -> Callable[[str], None]:
    from shardkit.builder.partwriter import PartWriter, tar_chunks

    writer = PartWriter(str(folder / "p-%06d.tar"), max_size=1 << 20)

    def add(key: str) -> None:
        chunks, size = tar_chunks(key, [("txt", b"x")])
        writer.add(key, chunks, size)

    return add


def _output(folder: Path) -> Callable[[str], None]:
    from shardkit.tools._outputs import Output

    out = Output(str(folder / "o.tar"))
    return lambda key: out.write({"__key__": key, "txt": b"x"})


def _raw_shards(folder: Path) -> Callable[[str], None]:
    from shardkit.tools._rawsplit import RawShards

    sink = RawShards(str(folder / "r-%06d.tar"), max_count=10, max_size=None)

    def add(key: str) -> None:
        sink.add(key, 0, lambda write: None)

    return add


@pytest.mark.parametrize("make", ["tar", "shard", "part", "output", "raw"])
def test_every_writer_refuses_the_same_key_twice_in_a_row_with_one_message(
    tmp_path: Path, make: str
) -> None:
    # Was: three different messages over five copies of the check.
    factories: dict[str, Callable[[], Callable[[str], None]]] = {
        "tar": _tar_writer,
        "shard": lambda: _shard_writer(tmp_path),
        "part": lambda: _part_writer(tmp_path),
        "output": lambda: _output(tmp_path),
        "raw": lambda: _raw_shards(tmp_path),
    }
    add = factories[make]()
    add("a")
    add("b")
    with pytest.raises(EncodeError) as info:
        add("b")
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
