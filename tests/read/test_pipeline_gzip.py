from __future__ import annotations

import os

import pytest

import shardkit
from shardkit.errors import FormatError
from shardkit.writer import ShardWriter


def _gzip_shard(folder: str) -> str:
    pattern = os.path.join(folder, "s-%06d.tar.gz")
    with ShardWriter(pattern, encode=False) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i}", "txt": f"sample {i}".encode()})
    return sink.shards[0].url


def test_dataset_reads_gzip_shards(tmp_path: os.PathLike[str]) -> None:
    url = _gzip_shard(str(tmp_path))
    assert [s["txt"] for s in shardkit.Dataset(url)] == [f"sample {i}".encode() for i in range(5)]


def test_dataset_checks_the_gzip_crc(tmp_path: os.PathLike[str]) -> None:
    url = _gzip_shard(str(tmp_path))
    with open(url, "r+b") as f:  # corrupt the CRC32 in the gzip trailer
        f.seek(-8, os.SEEK_END)
        crc = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([crc[0] ^ 0xFF]))
    with pytest.raises(FormatError, match="gzip") as info:
        list(shardkit.Dataset(url))
    assert info.value.url == url
    skipped = list(shardkit.Dataset(url, handler="ignore"))
    assert len(skipped) == 5  # the samples were intact; only the trailer is wrong


def test_dataset_refuses_members_over_the_size_limit(tmp_path: os.PathLike[str]) -> None:
    import tarfile

    path = os.path.join(str(tmp_path), "lie.tar")
    with tarfile.open(path, "w") as tf:
        info = tarfile.TarInfo("k.bin")
        info.size = 0
        tf.addfile(info)
    with open(path, "r+b") as f:  # declare 3 GiB for the member, with a valid checksum
        header = bytearray(f.read(512))
        header[124:136] = b"%011o\0" % (3 << 30)
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
        f.seek(0)
        f.write(header)
    with pytest.raises(FormatError, match=r"over the limit of .*SHARDKIT_MAX_MEMBER"):
        list(shardkit.Dataset(path))
