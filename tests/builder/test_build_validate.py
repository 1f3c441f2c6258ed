"""Header validation per format, key derivation, and tar bytes identical to TarWriter."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from helpers.build import make_corpus, read_samples, write

import shardkit
from shardkit import BuildOptions, TarWriter

FORMATS = {"png": "PNG", "gif": "GIF", "bmp": "BMP", "webp": "WEBP", "tif": "TIFF", "ppm": "PPM"}


def _image(fmt: str, ext: str) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (37, 23), (200, 30, 90))
    for x in range(0, 37, 3):
        image.putpixel((x, x % 23), (x * 6, 255 - x, 7))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize("ext", sorted(FORMATS))
def test_truncated_files_of_every_format_are_rejected(ext: str, tmp_path: Path) -> None:
    good = _image(FORMATS[ext], ext)
    src = str(tmp_path / "src")
    write(src, f"c/good.{ext}", good)
    write(src, f"c/cut.{ext}", good[: len(good) * 2 // 3])
    write(src, f"c/empty.{ext}", b"")
    write(src, f"c/text.{ext}", b"hello, not an image\n" * 3)
    result = shardkit.build(src, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == 1, result.skipped
    assert {p for p, _ in result.skipped} == {f"c/cut.{ext}", f"c/empty.{ext}", f"c/text.{ext}"}
    (sample,) = read_samples(str(tmp_path / "out"))
    assert sample[ext] == good


def test_jpeg_with_trailing_bytes_after_eoi_is_kept(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=3, bad=False)
    path = os.path.join(src, "circle", "img_000000.jpg")
    with open(path, "rb") as f:
        data = f.read()
    write(src, "circle/padded.jpg", data + bytes(64))
    write(src, "circle/trailer.jpg", data + b"extra data some cameras append")
    write(src, "circle/no_eoi.jpg", data[:-2])
    result = shardkit.build(src, str(tmp_path / "out"), options=BuildOptions(workers=1))
    assert result.samples == 5 and [p for p, _ in result.skipped] == ["circle/no_eoi.jpg"]


def test_tar_output_is_exactly_what_tarwriter_writes(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=12, bad=False)
    tiny = b"\xff\xd8\xff\xe0" + bytes(50) + b"\xff\xd9"
    write(src, "circle/" + "long name " * 12 + ".jpg", tiny)
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(workers=1, max_count=5))
    for shard in result.shards:
        path = os.path.join(out, shard.name)
        with open(path, "rb") as f:
            data = f.read()
        from shardkit.formats.tar import iter_samples

        buffer = io.BytesIO()
        with TarWriter(buffer) as writer:
            for sample in iter_samples(io.BytesIO(data)):
                del sample["__url__"], sample["__offset__"]
                writer.write(sample)
        assert buffer.getvalue() == data


def test_one_check_for_the_fields_of_a_sample_names_a_file_or_a_field() -> None:
    from helpers.build import make_corpus_jpeg, make_png

    from shardkit.builder._sources import SampleFileError
    from shardkit.builder._validate import Blame, check_fields
    from shardkit.errors import DataError

    jpg, png = make_corpus_jpeg(1), make_png(2)
    calls = []

    def transform(data: bytes, ext: str) -> tuple[bytes, str]:
        calls.append(ext)
        return b"x" + data, f"{ext}2"

    fields = [("jpg", png, Blame(field="jpg")), ("txt", b"hi", Blame(field="txt"))]
    fields.append(("", jpg, Blame(field="image")))  # a parquet cell: its bytes tell its kind
    checked = check_fields(fields, transform=transform)
    assert checked == [("png2", b"x" + png), ("txt", b"hi"), ("jpg2", b"x" + jpg)]
    assert calls == ["png", "jpg"]  # images only, under the format their bytes show
    with pytest.raises(SampleFileError, match="; its sample is skipped") as folder:
        check_fields([("seg.png", jpg[:100], Blame(file="a/0001.seg.png"))])
    assert folder.value.url == "a/0001.seg.png"
    with pytest.raises(DataError, match=r"^field 'flac': empty file$"):
        check_fields([("jpg", jpg, Blame(field="jpg")), ("flac", b"", Blame(field="flac"))])
    with pytest.raises(DataError, match=r"two fields are stored as 'png' \(an image by[^:]*$"):
        check_fields([("jpg", png, Blame(file="a.jpg")), ("png", png, Blame(file="a.png"))])
    with pytest.raises(DataError, match=r"'jpg' \(an image by its content\): name them with --"):
        check_fields([("", jpg, Blame(field="image")), ("", jpg, Blame(field="mask"))])
    assert check_fields([("txt", b"\xff", Blame(field="txt"))], "none") == [("txt", b"\xff")]
