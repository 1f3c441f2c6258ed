"""Resize and re-encode images in the workers (``resize`` / ``max_side`` / ``quality``).

``resize=N`` scales an image so its shorter side is N pixels (torchvision's
``Resize(N)``); ``max_side=M`` shrinks it so its longer side is at most M (never enlarges);
with both, ``resize`` applies first. An image already at its target size keeps its
original bytes (no generation loss). JPEG and WebP stay in their format (``quality``
applies); every other format is re-encoded as PNG (lossless).

JPEGs (YCbCr or grayscale: nearly all of them) take the fast path, where the time goes
into libjpeg-turbo and OpenCV, not Python:

1. decode with libjpeg-turbo (simplejpeg), at 1/2, 1/4 or 1/8 scale when that still
   leaves at least the target size (libjpeg-turbo's SIMD reduced IDCTs: cheaper than a
   full decode, where its other M/8 scales are slower than a full decode and blurrier);
2. resize with OpenCV (one thread): bilinear while the remaining shrink is under 2x
   (every input pixel then still reaches the output, so there is no aliasing), area
   averaging above that, bicubic when enlarging;
3. encode with libjpeg-turbo, 4:2:0 chroma (Pillow's default).

On the build benchmark's photos that costs 1.6 ms an image against 3.0 ms for Pillow's
decode + antialiased resize + encode (whose resampler alone costs more than the decode),
and stays within 44 dB PSNR (mean) of a full-size decode + antialiased bicubic resize.
Other images (PNG, WebP, CMYK JPEGs, ...) go through Pillow: JPEG DCT scaling through
:meth:`PIL.Image.Image.draft`, then an antialiased bilinear shrink or bicubic enlargement.

Fixed-size output (``resize_mode``, after img2dataset's ``resize_mode``): ``center-crop``
scales the shorter side to N as above and keeps the centred N x N square (torchvision's
``Resize(N)`` + ``CenterCrop(N)``); ``pad`` scales the longer side to N and centres the
image on a black N x N canvas (img2dataset's ``border``). Both run on either path: the
scale first, then a crop or pad of the pixel array. ``encode`` picks the output format
(``jpg``, ``png``, ``webp``) instead of keeping JPEG/WebP and making the rest PNG; an image
already at its size and in that format keeps its bytes.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

from .._optional import require
from ..codecs import image_failures
from ..errors import DataError

__all__ = [
    "Shape",
    "check_available",
    "limit_threads",
    "plan_shape",
    "target_size",
    "transform_image",
]

_LOSSY = {"jpg": "jpg", "webp": "webp"}
_JPEG_MODES = frozenset({"L", "RGB", "CMYK"})
# JPEG colour spaces of the fast path -> (simplejpeg colour space, chroma subsampling)
_FAST_SPACES = {"YCbCr": ("RGB", "420"), "Gray": ("GRAY", "Gray")}
_AREA_ABOVE = 2.0  # shrink ratios from which OpenCV averages areas instead of bilinear


def check_available() -> None:
    """Raise MissingDependencyError unless the image libraries resizing needs are here."""
    for module in ("PIL.Image", "simplejpeg", "cv2"):
        require(module, "resize and max_side")


def target_size(
    width: int, height: int, resize: int | None, max_side: int | None
) -> tuple[int, int]:
    """The output size for an input of ``width`` x ``height``."""
    if resize is not None:
        if width <= height:
            width, height = resize, max(1, round(height * resize / width))
        else:
            width, height = max(1, round(width * resize / height)), resize
    if max_side is not None and max(width, height) > max_side:
        scale = max_side / max(width, height)
        width, height = max(1, round(width * scale)), max(1, round(height * scale))
    return width, height


class Shape(NamedTuple):
    """How one image changes: scaled to ``scaled``, then cropped or padded to ``size``.

    ``offset`` is the top-left corner of the kept square in the scaled image (crop), or
    where the scaled image sits on the canvas (pad); (0, 0) when ``scaled == size``.
    """

    scaled: tuple[int, int]
    size: tuple[int, int]
    offset: tuple[int, int]


def plan_shape(
    width: int, height: int, resize: int | None, max_side: int | None, mode: str = "keep-ratio"
) -> Shape:
    """The :class:`Shape` of an input of ``width`` x ``height`` (modes: module docstring)."""
    if mode == "keep-ratio" or resize is None:
        size = target_size(width, height, resize, max_side)
        return Shape(size, size, (0, 0))
    if mode == "center-crop":
        scaled = target_size(width, height, resize, None)  # the shorter side is resize
        offset = ((scaled[0] - resize) // 2, (scaled[1] - resize) // 2)
    else:  # pad: the longer side is resize
        longer = max(width, height)
        scaled = (max(1, round(width * resize / longer)), max(1, round(height * resize / longer)))
        offset = ((resize - scaled[0]) // 2, (resize - scaled[1]) // 2)
    return Shape(scaled, (resize, resize), offset)


def output_extension(ext: str, encode: str) -> str:
    """The extension a re-encoded ``ext`` image gets (``encode`` ``keep``: module docstring)."""
    return _LOSSY.get(ext, "png") if encode == "keep" else encode


def transform_image(
    data: bytes,
    ext: str,
    *,
    resize: int | None,
    max_side: int | None,
    quality: int,
    mode: str = "keep-ratio",
    encode: str = "keep",
) -> tuple[bytes, str, tuple[int, int]]:
    """(bytes, extension, (width, height)) of the image after resizing and re-encoding."""

    def shape_of(width: int, height: int) -> Shape:
        return plan_shape(width, height, resize, max_side, mode)

    if ext == "jpg":
        fast = _transform_jpeg(data, shape_of, output_extension(ext, encode), quality)
        if fast is not None:
            return fast
    require("PIL.Image", "resize and max_side")
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                shape = shape_of(*image.size)
                if shape.scaled == shape.size == image.size and encode in ("keep", ext):
                    return data, ext, shape.size
                out_ext = output_extension(ext, encode)
                image = _fit(_resized(image, shape.scaled, out_ext), shape)
                return _encode(image, out_ext, quality), out_ext, shape.size
    except DataError:
        raise
    except image_failures() as exc:
        raise DataError(f"cannot decode: {exc}") from exc


def _transform_jpeg(
    data: bytes, shape_of: Callable[[int, int], Shape], out_ext: str, quality: int
) -> tuple[bytes, str, tuple[int, int]] | None:
    """The fast path (module docstring); None for a JPEG it does not handle (CMYK)."""
    require("simplejpeg", "resize and max_side")
    import simplejpeg

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return None  # Pillow reports what is wrong with it
    if colorspace not in _FAST_SPACES:
        return None
    shape = shape_of(width, height)
    if shape.scaled == shape.size == (width, height) and out_ext == "jpg":
        return data, "jpg", shape.size
    space, subsampling = _FAST_SPACES[colorspace]
    scale = _dct_scale(width, height, shape.scaled)
    try:
        pixels = simplejpeg.decode_jpeg(
            data,
            colorspace=space,
            min_width=-(-width // scale),  # libjpeg's size at 1/scale (rounded up)
            min_height=-(-height // scale),
        )
    except ValueError as exc:
        raise DataError(f"cannot decode: {exc}") from exc
    pixels = _fit_array(_resize_array(pixels, shape.scaled), shape)
    if out_ext != "jpg":
        from ..codecs import encode_image

        return encode_image(pixels, out_ext, quality=quality), out_ext, shape.size
    out = simplejpeg.encode_jpeg(
        pixels, quality=quality, colorspace=space, colorsubsampling=subsampling
    )
    return out, "jpg", shape.size


def _dct_scale(width: int, height: int, size: tuple[int, int]) -> int:
    """The largest of 1, 2, 4, 8 that divides the image and still covers ``size``."""
    scale = 1
    while (
        scale < 8 and -(-width // (2 * scale)) >= size[0] and -(-height // (2 * scale)) >= size[1]
    ):
        scale *= 2
    return scale


def limit_threads() -> None:
    """One OpenCV thread per worker: a build with N workers uses N cores."""
    require("cv2", "resize and max_side")
    import cv2

    cv2.setNumThreads(1)


def _resize_array(pixels: Any, size: tuple[int, int]) -> Any:
    """HxWxC uint8 pixels resized to ``size`` (width, height) with OpenCV."""
    require("cv2", "resize and max_side")
    import cv2

    height, width = pixels.shape[:2]
    if (width, height) == size:
        return pixels
    ratio = width / size[0]
    if ratio < 1:
        method = cv2.INTER_CUBIC
    elif ratio < _AREA_ABOVE:
        method = cv2.INTER_LINEAR
    else:
        method = cv2.INTER_AREA
    out = cv2.resize(pixels, size, interpolation=method)
    return out.reshape(*out.shape[:2], pixels.shape[2])  # OpenCV drops a channel axis of 1


def _fit_array(pixels: Any, shape: Shape) -> Any:
    """HxWxC pixels at ``shape.scaled`` cropped or padded (black) to ``shape.size``."""
    import numpy as np

    if shape.scaled == shape.size:
        return pixels
    (left, top), (width, height) = shape.offset, shape.size
    if shape.scaled[0] >= width and shape.scaled[1] >= height:  # crop
        return np.ascontiguousarray(pixels[top : top + height, left : left + width])
    canvas = np.zeros((height, width, pixels.shape[2]), dtype=pixels.dtype)
    canvas[top : top + pixels.shape[0], left : left + pixels.shape[1]] = pixels
    return canvas


def _fit(image: Any, shape: Shape) -> Any:
    """A PIL image at ``shape.scaled`` cropped or padded (black) to ``shape.size``."""
    from PIL import Image

    if shape.scaled == shape.size:
        return image
    (left, top), (width, height) = shape.offset, shape.size
    if shape.scaled[0] >= width and shape.scaled[1] >= height:  # crop
        return image.crop((left, top, left + width, top + height))
    canvas = Image.new(image.mode, shape.size, "black")
    canvas.paste(image, shape.offset)
    return canvas


def _resized(image: Any, size: tuple[int, int], out_ext: str) -> Any:
    from PIL import Image

    if image.format == "JPEG" and size[0] < image.size[0]:
        image.draft(image.mode if image.mode in _JPEG_MODES else "RGB", size)
    if out_ext == "jpg" and image.mode not in _JPEG_MODES:
        image = image.convert("RGB")
    elif image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif image.mode not in ("L", "LA", "RGB", "RGBA", "I", "I;16", "F", "CMYK"):
        image = image.convert("RGB")
    shrink = size[0] * size[1] < image.size[0] * image.size[1]
    resample = Image.Resampling.BILINEAR if shrink else Image.Resampling.BICUBIC
    return image.resize(size, resample)


def _encode(image: Any, ext: str, quality: int) -> bytes:
    from ..codecs import encode_image

    if ext == "png" and image.mode == "CMYK":
        image = image.convert("RGB")
    return encode_image(image, ext, quality=quality)
