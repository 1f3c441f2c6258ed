"""Resizing in the workers, and shards assembled exactly from chunks."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from conftest_build import make_corpus, make_png, read_samples, snapshot, write

import shardkit
from shardkit import BuildOptions


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    src = make_corpus(str(tmp_path_factory.mktemp("resize") / "src"), count=90)
    write(src, "square/big.png", make_png(7, (300, 120)))
    return src


def _size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size  # type: ignore[no-any-return]


def test_resize_sets_the_shorter_side(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    result = shardkit.build(corpus, out, options=BuildOptions(resize=40, workers=2, quality=80))
    assert result.samples == 91 and len(result.skipped) == 5
    samples = read_samples(out)
    for sample in samples:
        ext = "png" if "png" in sample else "jpg"
        width, height = _size(sample[ext])
        assert min(width, height) == 40, sample["__key__"]
    big = next(s for s in samples if s["__key__"] == "square/big")
    assert _size(big["png"]) == (100, 40)


def test_max_side_only_shrinks_and_keeps_small_images_as_they_are(
    corpus: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    shardkit.build(corpus, out, options=BuildOptions(max_side=100, workers=1))
    for sample in read_samples(out):
        ext = "png" if "png" in sample else "jpg"
        width, height = _size(sample[ext])
        assert max(width, height) <= 100
        with open(os.path.join(corpus, json.loads(sample["json"])["path"]), "rb") as f:
            original = f.read()
        if max(_size(original)) <= 100:
            assert sample[ext] == original


def test_assembled_shards_are_exact_and_the_same_for_any_worker_count(
    corpus: str, tmp_path: Path
) -> None:
    snaps = []
    for workers in (1, 2, 3):
        out = str(tmp_path / f"w{workers}")
        options = BuildOptions(resize=48, max_size=30_000, max_count=12, workers=workers)
        result = shardkit.build(corpus, out, options=options)
        for shard in result.shards:
            assert shard.bytes == os.path.getsize(os.path.join(out, shard.name)) <= 30_000
            assert shard.samples <= 12
        snaps.append(snapshot(out))
    assert snaps[0] == snaps[1] == snaps[2]
    sizes = [len(read_samples(str(tmp_path / "w1")))]
    assert sizes == [91]


def test_resized_tfrecord_has_the_new_height_and_width(corpus: str, tmp_path: Path) -> None:
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    out = str(tmp_path / "out")
    options = BuildOptions(resize=36, format="tfrecord", workers=2)
    result = shardkit.build(corpus, out, options=options)
    count = 0
    for shard in result.shards:
        with open(os.path.join(out, shard.name), "rb") as f:
            for _, record in iter_records(f):
                features = decode_example(record)
                width, height = _size(features["image/encoded"][0])
                assert (width, height) == (features["image/width"][0], features["image/height"][0])
                assert min(width, height) == 36
                count += 1
    assert count == 91


def test_interrupted_assembly_resumes_to_identical_output(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    options = BuildOptions(resize=32, max_count=10, workers=1)

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(corpus, out, options=options, progress=stop)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    resumed = shardkit.build(corpus, out, options=options)
    fresh = str(tmp_path / "fresh")
    shardkit.build(corpus, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)
    assert resumed.samples == 91


def _photo(size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> bytes:
    """A smooth, photo-like JPEG (noise upscaled): resampling errors show in its PSNR."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    cells = (size[1] // 16 + 2, size[0] // 16 + 2, 3)  # detail at the target's scale
    small = rng.integers(0, 256, cells, dtype=np.uint8)
    image = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC).convert(mode)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=92)
    return out.getvalue()


def _psnr_against_pillow(data: bytes, out: bytes) -> float:
    """PSNR of ``out`` against a full-size decode + antialiased bicubic resize."""
    import numpy as np
    from PIL import Image

    got = Image.open(io.BytesIO(out))
    with Image.open(io.BytesIO(data)) as image:
        want = image.convert(got.mode).resize(got.size, Image.Resampling.BICUBIC)
    diff = np.asarray(got, dtype=np.float64) - np.asarray(want, dtype=np.float64)
    return float(10 * np.log10(255**2 / np.mean(diff**2)))


@pytest.mark.parametrize(
    ("size", "mode", "resize", "want"),
    [
        ((640, 480), "RGB", 224, (299, 224)),  # 1/2 DCT scale, then bilinear
        ((300, 500), "RGB", 224, (224, 373)),  # full decode, bilinear under 2x
        ((3000, 2000), "RGB", 224, (336, 224)),  # 1/8 DCT scale, then bilinear (375 -> 336)
        ((640, 480), "RGB", 20, (27, 20)),  # 1/8 DCT scale, then area averaging (80 -> 27)
        ((160, 120), "RGB", 224, (299, 224)),  # enlarged: bicubic
        ((640, 480), "L", 224, (299, 224)),  # grayscale stays grayscale
        ((640, 480), "CMYK", 224, (299, 224)),  # not on the fast path: Pillow
    ],
)
def test_jpeg_resize_matches_a_full_decode_and_antialiased_resize(
    size: tuple[int, int], mode: str, resize: int, want: tuple[int, int]
) -> None:
    from PIL import Image

    from shardkit.builder.transform import _encode, _resized, transform_image

    data = _photo(size, mode)
    out, ext, got = transform_image(data, "jpg", resize=resize, max_side=None, quality=95)
    assert ext == "jpg" and got == want
    with Image.open(io.BytesIO(out)) as image:
        assert image.size == want and image.mode == mode
    # Within 1 dB of Pillow's JPEG draft + antialiased resize (aliasing costs 2 dB here).
    with Image.open(io.BytesIO(data)) as image:
        pillow = _encode(_resized(image, want, "jpg"), "jpg", 95)
    assert _psnr_against_pillow(data, out) > _psnr_against_pillow(data, pillow) - 1.0


def test_dct_scale_never_goes_under_the_target() -> None:
    from shardkit.builder.transform import _dct_scale

    assert _dct_scale(1000, 800, (280, 224)) == 2
    assert _dct_scale(448, 448, (224, 224)) == 2
    assert _dct_scale(446, 448, (224, 224)) == 1
    assert _dct_scale(4000, 3000, (299, 224)) == 8
    assert _dct_scale(100, 100, (224, 224)) == 1


def test_a_jpeg_that_does_not_decode_is_skipped_with_its_reason(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    good = _photo((320, 240))
    write(src, "a/good.jpg", good)
    write(src, "a/bad.jpg", good[:600] + bytes(len(good) - 602) + b"\xff\xd9")  # ends well
    out = str(tmp_path / "out")
    result = shardkit.build(src, out, options=BuildOptions(resize=64, workers=1))
    assert result.samples == 1
    assert [path for path, _ in result.skipped] == ["a/bad.jpg"]
    assert "decode" in result.skipped[0][1]


def test_resizing_without_opencv_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)  # what `import cv2` sees without it
    out = tmp_path / "out"
    match = r"needs opencv-python-headless, .* pip install 'shardkit\[images\]'"
    with pytest.raises(shardkit.ConfigError, match=match):
        shardkit.build(str(tmp_path), str(out), options=BuildOptions(resize=64))
    assert not out.exists()
