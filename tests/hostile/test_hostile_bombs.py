"""Decompression bombs and lying sizes: memory and time stay bounded, errors stay clean.

Peak memory is measured in a fresh interpreter (ru_maxrss) or with tracemalloc; every
bound asserted here is recorded in docs/reliability.md.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import time
import tracemalloc
import zipfile
import zlib
from typing import Any

import numpy as np
import pytest
from helpers.hostile import header, outcome, run_measured, write_tar, zeros_gzip

from shardkit.codecs import MAX_EXPANDED_SIZE, Decoder
from shardkit.errors import DecodeError, FormatError
from shardkit.formats import tar
from shardkit.reader import read_shard


def _path(tmp_path: os.PathLike[str], name: str) -> str:
    return os.path.join(str(tmp_path), name)


# --------------------------------------------------------------------------- gzip shards


def test_a_10_gib_member_in_a_10_mb_tar_gz_is_refused_at_its_header(
    tmp_path: os.PathLike[str],
) -> None:
    path = _path(tmp_path, "bomb.tar.gz")
    size = zeros_gzip(path, [header(b"k.bin", 10 << 30), 10 << 30], crc=False)
    assert size < 12 << 20
    result = run_measured(
        f"""
        from shardkit.reader import read_shard
        try:
            list(read_shard({path!r}))
        except Exception as exc:
            result["error"] = [type(exc).__name__, str(exc)]
        """
    )
    assert result["error"][0] == "FormatLimitError" and "MAX_MEMBER" in result["error"][1]
    assert result["peak_mb"] < 60 and result["seconds"] < 5  # measured: 20 MB, 0.2 s


def test_a_bomb_of_many_members_under_the_limit_streams_in_bounded_memory(
    tmp_path: os.PathLike[str],
) -> None:
    path = _path(tmp_path, "many.tar.gz")
    one = 32 << 20  # over the 16 MiB read chunk: the large-member path
    parts: list[bytes | int] = []
    for i in range(8):
        parts += [header(b"k%d.bin" % i, one), one]
    assert zeros_gzip(path, [*parts, tar.END_OF_ARCHIVE]) < 1 << 20
    result = run_measured(
        f"""
        from shardkit.reader import read_shard
        sizes = [len(s["bin"]) for s in read_shard({path!r})]
        result["sizes"] = sizes
        """
    )
    assert result["sizes"] == [one] * 8  # 256 MiB read, one 32 MiB member at a time
    # Held at once: the sample the caller has, the one being grouped, the member being
    # read (measured: 118 MB, of which ~20 MB is the interpreter).
    assert result["peak_mb"] < 20 + 4 * 32
    with pytest.raises(FormatError, match="max_member_size"):
        next(read_shard(path, max_member_size=1 << 20))


def test_a_bomb_after_the_end_of_the_archive_is_not_inflated(tmp_path: os.PathLike[str]) -> None:
    path = _path(tmp_path, "tail.tar.gz")
    shard = write_tar([{"__key__": "k", "txt": b"hello"}])
    zeros_gzip(path, [shard, 1 << 30], crc=False)
    start = time.monotonic()
    samples = list(read_shard(path))
    assert [s["txt"] for s in samples] == [b"hello"]
    assert time.monotonic() - start < 3  # 1 MiB of the tail is read, not 1 GiB


def test_truncated_gzip_with_a_lying_member_size_allocates_nothing(
    tmp_path: os.PathLike[str],
) -> None:
    # Bug found: GzipFile.read(size) allocated the whole declared member up front.
    path = _path(tmp_path, "lie.tar.gz")
    with open(path, "wb") as f:
        # 768 MiB: under the member limit (1.5 GiB is refused at the header now)
        f.write(gzip.compress(header(b"k.bin", 3 << 28) + os.urandom(4096), mtime=0))
    result = run_measured(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from shardkit.reader import read_shard
        try:
            list(read_shard({path!r}))
        except Exception as exc:
            result["error"] = type(exc).__name__
        """
    )
    assert result["error"] == "TruncatedShardError"


SHARD = write_tar([{"__key__": f"k{i}", "txt": f"sample {i} " * 20} for i in range(5)])
SHARD_GZ = gzip.compress(SHARD, mtime=0)


def _read_gz(tmp_path: os.PathLike[str], data: bytes) -> list[dict[str, object]]:
    path = _path(tmp_path, "s.tar.gz")
    with open(path, "wb") as f:
        f.write(data)
    return [{k: v for k, v in s.items() if k != "__url__"} for s in read_shard(path)]


def test_every_bit_flip_in_a_tar_gz_is_caught_or_harmless(tmp_path: os.PathLike[str]) -> None:
    # Bug found: the reader stopped at the tar end-of-archive blocks and never reached the
    # gzip trailer, so ~70% of single-bit flips gave silently wrong member bytes.
    good = _read_gz(tmp_path, SHARD_GZ)
    for pos in range(len(SHARD_GZ)):
        for bit in range(8):
            flipped = bytearray(SHARD_GZ)
            flipped[pos] ^= 1 << bit
            result = outcome(lambda d=bytes(flipped): _read_gz(tmp_path, d))  # type: ignore[misc]
            assert result == good or isinstance(result, FormatError), (pos, bit)


@pytest.mark.parametrize(
    "data",
    [
        SHARD_GZ[:-4],  # trailer cut
        SHARD_GZ[: len(SHARD_GZ) // 2],
        SHARD_GZ[:12],
        b"\x1f\x8b" + os.urandom(200),
        SHARD_GZ[:-8] + struct.pack("<II", 0, len(SHARD)),  # wrong CRC
        SHARD_GZ[:-4] + struct.pack("<I", len(SHARD) + 1),  # wrong length
    ],
    ids=["no-length", "half", "header-only", "garbage", "bad-crc", "bad-length"],
)
def test_corrupt_or_truncated_gzip_is_a_format_error(
    tmp_path: os.PathLike[str], data: bytes
) -> None:
    with pytest.raises(FormatError):
        _read_gz(tmp_path, data)


def test_bytes_after_the_gzip_stream_are_ignored_like_tar_does(tmp_path: os.PathLike[str]) -> None:
    assert len(_read_gz(tmp_path, SHARD_GZ + b"\0" * 1000)) == 5
    assert len(_read_gz(tmp_path, SHARD_GZ + b"not gzip")) == 5


# --------------------------------------------------------------------------- gzip fields


def test_gz_field_bomb_stops_at_max_gunzip_size() -> None:
    bomb = gzip.compress(bytes(64 << 20), compresslevel=1, mtime=0)
    sample = {"__key__": "k", "bin.gz": bomb}
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="max_gunzip_size") as info:
            Decoder(max_gunzip_size=1 << 20)(sample)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # the 1 MiB limit plus a piece, not 64 MiB
    assert info.value.key == "k"
    assert Decoder(max_gunzip_size=64 << 20)(sample)["bin.gz"] == bytes(64 << 20)
    # without max_gunzip_size, the budget's expanded limit (test_budget_member.py)
    assert Decoder().max_gunzip_size is None and MAX_EXPANDED_SIZE == 1 << 30


def test_gz_field_of_many_tiny_members_decodes_in_linear_time() -> None:
    # Bug found: gzip.decompress copies the rest of the data after every member, so a
    # 2 MB field of 100,000 empty members took ~25 s (quadratic).
    data = gzip.compress(b"", mtime=0) * 100_000
    start = time.monotonic()
    assert Decoder()({"__key__": "k", "bin.gz": data})["bin.gz"] == b""
    assert time.monotonic() - start < 3


# --------------------------------------------------------------------------- zip fields


def _zip(entries: dict[str, bytes], compress: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compress) as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress)
    return buffer.getvalue()


def _declare(data: bytes, size: int) -> bytes:
    """Patch every member's uncompressed size, in local and central headers, to ``size``."""
    out = bytearray(data)
    for signature, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        pos = out.find(signature)
        while pos >= 0:
            out[pos + at : pos + at + 4] = struct.pack("<I", size)
            pos = out.find(signature, pos + 4)
    return bytes(out)


def _npy(array: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def test_npz_zip_bomb_is_refused_from_its_directory() -> None:
    # Bug found: a 2 MB npz of deflated zeros decoded to a 2 GB array (np.load trusts it).
    honest = _zip({"a.npy": _npy(np.zeros(8 << 20, dtype=np.uint8))})
    assert len(honest) < 64 << 10
    decoded = Decoder()({"__key__": "k", "npz": honest})["npz"]
    assert decoded["a"].shape == (8 << 20,) and not decoded["a"].any()
    bomb = _declare(honest, 3 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="declare"):
            Decoder()({"__key__": "k", "npz": bomb})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    understated = _declare(honest, 1000)  # zipfile stops at the declared size
    with pytest.raises(DecodeError):
        Decoder()({"__key__": "k", "npz": understated})


def test_npz_member_header_claiming_more_than_its_member_is_refused() -> None:
    head = b"{'descr': '<f8', 'fortran_order': False, 'shape': (100000000000,), }"
    lying = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + head.ljust(117) + b"\n"
    with pytest.raises(DecodeError, match="claims"):
        Decoder()({"__key__": "k", "npz": _zip({"a.npy": lying + bytes(64)})})


def test_torch_zip_bomb_is_refused_from_its_directory() -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(torch.zeros(1 << 20, dtype=torch.uint8), buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as source:
        deflated = _zip({i.filename: source.read(i) for i in source.infolist()})
    assert len(deflated) < 64 << 10  # torch loads deflated records: 1 MiB from ~1 KB
    assert Decoder()({"__key__": "k", "pth": deflated})["pth"].shape == (1 << 20,)
    with pytest.raises(DecodeError, match="declare"):
        Decoder()({"__key__": "k", "pth": _declare(deflated, 3 << 30)})


# --------------------------------------------------------------------------- images


def _png(width: int, height: int, idat: bytes = b"") -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_images_declaring_huge_sizes_fail_fast_in_little_memory(
    tmp_path: os.PathLike[str],
) -> None:
    import PIL.Image

    image = PIL.Image.new("RGB", (16, 16))
    small: dict[str, bytes] = {}
    for ext, fmt in (("jpg", "JPEG"), ("gif", "GIF"), ("bmp", "BMP")):
        buffer = io.BytesIO()
        image.save(buffer, format=fmt)
        small[ext] = buffer.getvalue()
    jpg = bytearray(small["jpg"])
    sof = jpg.find(b"\xff\xc0")
    jpg[sof + 5 : sof + 9] = struct.pack(">HH", 65000, 65000)
    gif = bytearray(small["gif"])
    gif[6:10] = struct.pack("<HH", 65535, 65535)
    descriptor = gif.find(b"\x2c")
    gif[descriptor + 5 : descriptor + 9] = struct.pack("<HH", 65535, 65535)
    bmp = bytearray(small["bmp"])
    bmp[18:26] = struct.pack("<ii", 100_000, 100_000)
    cases = {
        "png": _png(100_000, 100_000, zlib.compress(bytes(100))),
        "jpg": bytes(jpg),
        "gif": bytes(gif),
        "bmp": bytes(bmp),
        "seg.png": _png(9000, 9000, zlib.compress(bytes(100))),  # under the limit, truncated
    }
    path = _path(tmp_path, "cases.npz")
    arrays: dict[str, Any] = {k: np.frombuffer(v, dtype=np.uint8) for k, v in cases.items()}
    np.savez(path, **arrays)
    result = run_measured(
        f"""
        import time
        import numpy as np
        from shardkit.codecs import Decoder
        from shardkit.errors import DecodeError
        with np.load({path!r}) as cases:
            for ext in cases.files:
                start = time.monotonic()
                try:
                    Decoder("rgb")({{"__key__": "k", ext: cases[ext].tobytes()}})
                    result[ext] = "decoded"
                except DecodeError as exc:
                    result[ext] = [type(exc.__cause__).__name__, time.monotonic() - start]
        """
    )
    for ext in ("png", "jpg", "gif", "bmp"):  # the budget's refusal, from the header
        assert result[ext][0] == "DecodeLimitError", (ext, result[ext])
    assert result["seg.png"][0] == "OSError"  # truncated: Pillow's error, as a DecodeError
    assert all(result[ext][1] < 1 for ext in cases)
    assert result["peak_mb"] < 200
