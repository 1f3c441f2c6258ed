"""Resizing in the workers, and shards assembled exactly from chunks."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, make_png, read_samples, run_cli, snapshot, write

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

    from shardkit.builder._transform import _encode, _resized, transform_image

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
    from shardkit.builder._transform import _dct_scale

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


# ------------------------------------------------------------- fixed sizes and --encode


@pytest.mark.parametrize("mode", ["center-crop", "pad"])
def test_center_crop_and_pad_give_exactly_n_by_n(corpus: str, tmp_path: Path, mode: str) -> None:
    out = str(tmp_path / "out")
    options = BuildOptions(resize=40, resize_mode=mode, workers=2)
    result = shardkit.build(corpus, out, options=options)
    assert result.samples == 91
    for sample in read_samples(out):
        ext = "png" if "png" in sample else "jpg"
        assert _size(sample[ext]) == (40, 40), sample["__key__"]
    tf_out = str(tmp_path / "tf")
    tf_options = BuildOptions(resize=40, resize_mode=mode, format="tfrecord")
    shardkit.build(corpus, tf_out, options=tf_options)
    from shardkit.formats.example import decode_example
    from shardkit.formats.tfrecord import iter_records

    with open(os.path.join(tf_out, "shard-000000.tfrecord"), "rb") as f:
        for _, record in iter_records(f):
            features = decode_example(record)
            assert (features["image/width"][0], features["image/height"][0]) == (40, 40)
            assert _size(features["image/encoded"][0]) == (40, 40)


def test_the_readme_training_snippet_collates_fixed_size_images(
    corpus: str, tmp_path: Path
) -> None:
    from torch.utils.data import DataLoader

    out = str(tmp_path / "out")
    done = run_cli(corpus, out, "--resize", "32", "--resize-mode", "center-crop", "-q")
    assert done.returncode == 0, done.stderr
    ds = shardkit.Dataset(out, seed=0).shuffle(100).decode("torchrgb8").to_tuple("jpg;png", "cls")
    loader = DataLoader(ds, batch_size=16, num_workers=0)
    shapes = [tuple(images.shape) for images, _ in loader]
    assert sum(shape[0] for shape in shapes) == 91
    assert {shape[1:] for shape in shapes} == {(3, 32, 32)}


def _reference(data: bytes, mode: str, scaled: tuple[int, int], box: tuple[int, int, int]) -> Any:
    """Full decode, antialiased bicubic resize to ``scaled``, then crop or pad (Pillow)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image = image.convert(mode).resize(scaled, Image.Resampling.BICUBIC)
    return _fit_box(image, box)


def _fit_box(image: Any, box: tuple[int, int, int]) -> Any:
    from PIL import Image

    left, top, n = box
    if image.size[0] >= n and image.size[1] >= n:
        return image.crop((left, top, left + n, top + n))
    canvas = Image.new(image.mode, (n, n), "black")
    canvas.paste(image, (left, top))
    return canvas


def _pillow_draft(
    data: bytes, mode: str, scaled: tuple[int, int], box: tuple[int, int, int]
) -> bytes:
    """What a Pillow user writes: JPEG draft, bilinear resize, crop or pad, encode."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.draft(mode, scaled)
        image = image.convert(mode).resize(scaled, Image.Resampling.BILINEAR)
    out = io.BytesIO()
    _fit_box(image, box).save(out, format="JPEG", quality=95)
    return out.getvalue()


def _psnr(got: bytes, want: Any) -> float:
    import numpy as np
    from PIL import Image

    image = Image.open(io.BytesIO(got)).convert(want.mode)
    diff = np.asarray(image, dtype=np.float64) - np.asarray(want, dtype=np.float64)
    return float(10 * np.log10(255**2 / max(np.mean(diff**2), 1e-12)))


@pytest.mark.parametrize(
    ("size", "mode", "resize_mode", "scaled", "box"),
    [
        ((640, 480), "RGB", "center-crop", (299, 224), (37, 0, 224)),  # 1/2 DCT scale
        ((300, 500), "RGB", "center-crop", (224, 373), (0, 74, 224)),  # full decode
        ((3000, 2000), "RGB", "center-crop", (336, 224), (56, 0, 224)),  # 1/8 DCT scale
        ((640, 480), "RGB", "pad", (224, 168), (0, 28, 224)),
        ((300, 500), "RGB", "pad", (134, 224), (45, 0, 224)),
        ((160, 120), "RGB", "pad", (224, 168), (0, 28, 224)),  # enlarged
        ((640, 480), "L", "pad", (224, 168), (0, 28, 224)),  # grayscale stays grayscale
        ((640, 480), "CMYK", "center-crop", (299, 224), (37, 0, 224)),  # Pillow's path
    ],
)
def test_fixed_size_jpegs_match_pillow(
    size: tuple[int, int],
    mode: str,
    resize_mode: str,
    scaled: tuple[int, int],
    box: tuple[int, int, int],
) -> None:
    from PIL import Image

    from shardkit.builder._transform import transform_image

    data = _photo(size, mode)
    out, ext, got = transform_image(
        data, "jpg", resize=224, max_side=None, quality=95, mode=resize_mode
    )
    assert ext == "jpg" and got == (224, 224)
    with Image.open(io.BytesIO(out)) as image:
        assert image.size == (224, 224) and image.mode == mode
    want = _reference(data, mode, scaled, box)
    # Within 1 dB of what Pillow's draft + resize + crop/pad gives (the resize test's rule).
    assert _psnr(out, want) > _psnr(_pillow_draft(data, mode, scaled, box), want) - 1.0


@pytest.mark.parametrize(
    ("resize_mode", "scaled", "box"),
    [("center-crop", (75, 30), (22, 0, 30)), ("pad", (30, 12), (0, 9, 30))],
)
def test_fixed_size_pngs_are_pillows_pixels(
    resize_mode: str, scaled: tuple[int, int], box: tuple[int, int, int]
) -> None:
    from shardkit.builder._transform import transform_image

    data = make_png(3, (300, 120))
    out, ext, got = transform_image(
        data, "png", resize=30, max_side=None, quality=90, mode=resize_mode
    )
    assert ext == "png" and got == (30, 30) == _size(out)
    assert _psnr(out, _reference(data, "RGB", scaled, box)) > 40


def test_encode_stores_every_image_in_one_format(corpus: str, tmp_path: Path) -> None:
    out = str(tmp_path / "png")
    shardkit.build(corpus, out, options=BuildOptions(encode="png", workers=2))
    samples = read_samples(out)
    assert len(samples) == 91 and all("png" in s and "jpg" not in s for s in samples)
    for sample in samples[:10]:
        with open(os.path.join(corpus, json.loads(sample["json"])["path"]), "rb") as f:
            assert _size(f.read()) == _size(sample["png"])  # not resized
    out = str(tmp_path / "webp")
    done = run_cli(corpus, out, "--resize", "24", "--resize-mode", "pad", "--encode", "webp", "-q")
    assert done.returncode == 0, done.stderr
    samples = read_samples(out)
    assert all(set(s) & {"jpg", "png", "webp"} == {"webp"} for s in samples)
    assert {_size(s["webp"]) for s in samples} == {(24, 24)}
    out = str(tmp_path / "jpg")
    shardkit.build(corpus, out, options=BuildOptions(encode="jpg", workers=1))
    for sample in read_samples(out):  # JPEGs keep their bytes; the PNG becomes a JPEG
        with open(os.path.join(corpus, json.loads(sample["json"])["path"]), "rb") as f:
            original = f.read()
        assert ("png" not in sample) and (sample["jpg"] == original) == original.startswith(
            b"\xff\xd8"
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"resize_mode": "center-crop"}, "resize_mode='center-crop' needs resize"),
        ({"resize_mode": "pad", "resize": 8, "max_side": 4}, "max_side does not combine"),
        ({"resize_mode": "zoom", "resize": 8}, "resize_mode must be one of"),
        ({"encode": "gif"}, "encode must be one of keep, jpg, png, webp"),
    ],
)
def test_bad_resize_modes_and_encodings_are_config_errors(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(shardkit.ConfigError, match=re.escape(message)):
        BuildOptions(**options)


def test_resizing_samples_that_are_not_image_files_is_refused(corpus: str, tmp_path: Path) -> None:
    shards = str(tmp_path / "shards")
    shardkit.build(corpus, shards, options=BuildOptions(workers=1))
    shard = os.path.join(shards, "shard-000000.tar")
    for options in (
        BuildOptions(resize=8, resize_mode="center-crop"),
        BuildOptions(encode="png"),
        BuildOptions(max_side=8),
    ):
        with pytest.raises(shardkit.ConfigError, match="a shards source packs its samples as"):
            shardkit.build(shard, str(tmp_path / "o"), options=options)
        with pytest.raises(shardkit.ConfigError, match="a dataset source packs its samples as"):
            shardkit.build(_Items(), str(tmp_path / "p"), options=options)
    assert not os.path.exists(tmp_path / "o") and not os.path.exists(tmp_path / "p")


class _Items:
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"__key__": f"k{i}", "txt": "x"}
