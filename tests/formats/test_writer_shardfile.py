"""One shard file: every entry point that writes a shard composes ``writer.ShardFile``.

The same samples give the same bytes whichever entry point writes them (``ShardWriter``,
``map_shards``, ``cat``/``convert`` to one file or to a pattern, ``split``, the build's part
writer), in tar, tar.gz and TFRecord; there is one gzip framing.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shardkit.errors import EncodeError
from shardkit.formats import gzframe, tar
from shardkit.formats.names import format_from_name
from shardkit.mapshards import map_shards
from shardkit.reader import read_shard
from shardkit.writer import ShardFile, ShardWriter, encode_sample

SAMPLES = [
    {"__key__": f"s/{i:04d}", "bin": os.urandom(300 + 97 * i), "txt": f"sample {i}".encode()}
    for i in range(12)
]


def _identity(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def _source(folder: Path) -> str:
    """The samples as a plain tar shard (the input of the tools and of map_shards)."""
    url = str(folder / "in.tar")
    with ShardFile.open(url) as shard:
        for sample in SAMPLES:
            shard.write_sample(sample)
    return url


def _shard_writer(folder: Path, source: str, name: str) -> str:
    with ShardWriter(str(folder / f"w-%06d{name}"), encode=False) as writer:
        for sample in SAMPLES:
            writer.write(sample)
    return writer.shards[0].url


def _shard_file(folder: Path, source: str, name: str) -> str:
    url = str(folder / f"f{name}")
    kind, gz = format_from_name(url)
    with ShardFile.open(url, kind, gzip=gz) as shard:
        for sample in SAMPLES:
            shard.write_sample(sample)
    return url


def _map_shards(folder: Path, source: str, name: str) -> str:
    [result] = map_shards(_identity, [source], [str(folder / f"m{name}")], workers=1)
    return result.output


def _cat_file(folder: Path, source: str, name: str) -> str:
    from shardkit.tools import cat

    cat([source], str(folder / f"c{name}"))
    return str(folder / f"c{name}")


def _cat_pattern(folder: Path, source: str, name: str) -> str:
    from shardkit.tools import cat

    cat([source], str(folder / f"p-%06d{name}"))
    return str(folder / f"p-000000{name}")


def _convert(folder: Path, source: str, name: str) -> str:
    from shardkit.tools import convert

    convert([source], str(folder / f"v{name}"))
    return str(folder / f"v{name}")


def _split(folder: Path, source: str, name: str) -> str:
    from shardkit.tools import split

    [info] = split([source], str(folder / f"t-%06d{name}"), max_count=100)
    return info.url


def _part_writer(folder: Path, source: str, name: str) -> str:
    from shardkit.builder._partwriter import PartWriter
    from shardkit.builder._store import LocalStore
    from shardkit.formats.cut import Cut

    trailer = tar.END_OF_ARCHIVE if name == ".tar" else b""
    cut = Cut(trailer=len(trailer))
    writer = PartWriter(LocalStore(str(folder)), f"b-%d{name}", cut=cut, trailer=trailer)
    for sample in SAMPLES:
        key, data = encode_sample(sample, "tar" if trailer else "tfrecord")
        chunks, size = [data], len(data)
        if trailer:  # the build's own encoding: headers from a template
            fields = [(k, v) for k, v in sample.items() if k != "__key__"]
            chunks, size = tar.tar_chunks(key, fields)
        writer.add(key, chunks, size)
    writer.close()
    return str(folder / f"b-0{name}")


ENTRY_POINTS: dict[str, Callable[[Path, str, str], str]] = {
    "ShardWriter": _shard_writer,
    "ShardFile": _shard_file,
    "map_shards": _map_shards,
    "cat-file": _cat_file,
    "cat-pattern": _cat_pattern,
    "convert": _convert,
    "split": _split,
    "build-part": _part_writer,
}


NAMES = [".tar", ".tar.gz", ".tfrecord", ".tfrecord.gz"]
CASES = [
    (entry, name)
    for entry in ENTRY_POINTS
    for name in NAMES
    if not (entry == "build-part" and name.endswith(".gz"))  # build parts are never gzipped
]


@pytest.mark.parametrize(("entry", "name"), CASES)
def test_every_entry_point_writes_the_same_bytes(tmp_path: Path, entry: str, name: str) -> None:
    # Was: a .tar.gz from map_shards or cat (GzipFile, level 9) differed from ShardWriter's
    # (level 6, its own header).
    source = _source(tmp_path)
    expected = Path(_shard_writer(tmp_path / "expected", source, name)).read_bytes()
    got = Path(ENTRY_POINTS[entry](tmp_path / "out", source, name)).read_bytes()
    assert got == expected
    if name.endswith(".gz"):
        assert got[:10] == gzframe.HEADER
        plain = gzip.decompress(got)
        assert plain == Path(_shard_writer(tmp_path / "plain", source, name[:-3])).read_bytes()


def test_the_tar_bytes_are_the_tar_writers(tmp_path: Path) -> None:
    url = _shard_file(tmp_path, "", ".tar")
    expected = b"".join(tar.encode_sample(s) for s in SAMPLES) + tar.END_OF_ARCHIVE
    assert Path(url).read_bytes() == expected


def test_map_shards_refuses_the_same_key_twice_in_a_row(tmp_path: Path) -> None:
    # Was: written, and read_shard then raised "duplicate extension" on the output.
    source = _source(tmp_path)
    out = str(tmp_path / "same.tar")
    with pytest.raises(EncodeError) as info:
        map_shards(_same_key, [source], [out], workers=1)
    assert info.value.message == tar.SAME_KEY and info.value.key == "one"
    assert not os.path.exists(out)


def _same_key(sample: dict[str, Any]) -> dict[str, Any]:
    return {"__key__": "one", "txt": sample["txt"]}


def test_what_map_shards_writes_reads_back(tmp_path: Path) -> None:
    source = _source(tmp_path)
    [result] = map_shards(_identity, [source], [str(tmp_path / "o.tfrecord.gz")], workers=1)
    assert result.samples_out == len(SAMPLES)
    keys = [s["__key__"] for s in read_shard(result.output)]
    assert keys == [s["__key__"] for s in SAMPLES]
