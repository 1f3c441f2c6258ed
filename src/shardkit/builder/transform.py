"""Resize and re-encode images in the workers (``resize`` / ``max_side`` / ``quality``).

``resize=N`` scales an image so its shorter side is N pixels (torchvision's
``Resize(N)``); ``max_side=M`` shrinks it so its longer side is at most M (never enlarges);
with both, ``resize`` applies first. An image already at its target size keeps its
original bytes (no generation loss). JPEGs that shrink are decoded at a reduced scale
(libjpeg's DCT scaling through :meth:`PIL.Image.Image.draft`): a 1/2, 1/4 or 1/8 size
decode is several times cheaper than a full one and still leaves at least the target
size for the final resize: antialiased bilinear when shrinking (torchvision's default;
after DCT scaling the remaining ratio is under 2, where it matches bicubic closely at
two thirds of the cost), bicubic when enlarging. JPEG and WebP stay in their format
(``quality`` applies); every other format is re-encoded as PNG (lossless).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

from ..errors import DataError

__all__ = ["image_size", "target_size", "transform_image"]

_LOSSY = {"jpg": "jpg", "webp": "webp"}
_JPEG_MODES = frozenset({"L", "RGB", "CMYK"})


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


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image header, without decoding the pixels."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                return image.size  # type: ignore[no-any-return]
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, ...
        raise DataError(f"cannot read the image header: {exc}") from exc


def transform_image(
    data: bytes, ext: str, *, resize: int | None, max_side: int | None, quality: int
) -> tuple[bytes, str, tuple[int, int]]:
    """(bytes, extension, (width, height)) of the image after resizing and re-encoding."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                size = target_size(*image.size, resize, max_side)
                if size == image.size:
                    return data, ext, size
                out_ext = _LOSSY.get(ext, "png")
                return _encode(_resized(image, size, out_ext), out_ext, quality), out_ext, size
    except DataError:
        raise
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, ...
        raise DataError(f"cannot decode: {exc}") from exc


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
