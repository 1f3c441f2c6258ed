"""Image extensions, and encoding images (PIL images or numpy arrays) to bytes."""

from __future__ import annotations

import io
import warnings
from typing import Any

from .._optional import require
from ..errors import ConfigError, DataError

__all__ = [
    "ENCODABLE_IMAGE_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "IMAGE_FEATURE",
    "encode_image",
    "image_extension",
    "image_size",
    "last_component",
    "normalize_image_extension",
]

#: Extensions of raster images that Pillow reads; the image spec of a
#: :class:`~shardkit.codecs.Decoder` applies to fields whose last extension is one of these.
#: (webdataset's list also holds names such as ``eps``, ``mpg``, ``h5`` or ``rgb`` that
#: Pillow only identifies or that run external programs; we leave those out.)
IMAGE_EXTENSIONS = frozenset(
    {
        "apng",
        "avif",
        "bmp",
        "dib",
        "gif",
        "ico",
        "j2k",
        "jfif",
        "jp2",
        "jpe",
        "jpeg",
        "jpg",
        "jpx",
        "pbm",
        "pcx",
        "pgm",
        "png",
        "pnm",
        "ppm",
        "psd",
        "sgi",
        "tga",
        "tif",
        "tiff",
        "webp",
    }
)

#: The field of a sample read from a TFRecord that holds its image: the ``image/encoded``
#: feature of the shardkit TFRecord schema (:mod:`shardkit.formats.tfschema`), which is
#: TensorFlow's usual name. Image specs and the tools treat it as an image field.
IMAGE_FEATURE = "image/encoded"

_ALIASES = {"jpeg": "jpg", "jpe": "jpg", "jfif": "jpg"}

# Pillow format used to save each (normalized) extension.
_SAVE_FORMATS = {
    "bmp": "BMP",
    "jpg": "JPEG",
    "pbm": "PPM",
    "pgm": "PPM",
    "png": "PNG",
    "ppm": "PPM",
    "tif": "TIFF",
    "tiff": "TIFF",
    "webp": "WEBP",
}
_LOSSY = {"JPEG", "WEBP"}

#: Extensions :func:`encode_image` can write.
ENCODABLE_IMAGE_EXTENSIONS = frozenset({*_SAVE_FORMATS, "jpeg"})


def last_component(ext: str) -> str:
    """The lower-cased last dot-component of an extension: ``seg.PNG`` -> ``png``."""
    return ext.rsplit(".", 1)[-1].lower()


def image_extension(ext: str) -> bool:
    """Whether the field ``ext`` (``jpg``, ``seg.png``, ``.JPEG``, ``image/encoded``)
    holds an image."""
    return last_component(ext) in IMAGE_EXTENSIONS or ext.lower() == IMAGE_FEATURE


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image header, without decoding the pixels.

    Raises :class:`~shardkit.errors.DataError` if the header does not read, and
    MissingDependencyError (a ConfigError) if Pillow is not installed.
    """
    from ._failures import image_failures

    require("PIL.Image", "reading image sizes")
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                return image.size  # type: ignore[no-any-return]
    except image_failures() as exc:
        raise DataError(f"cannot read the image header: {exc}") from exc


def normalize_image_extension(ext: str) -> str:
    """Lower-case an image extension and spell JPEG one way: ``.JPEG`` -> ``jpg``.

    ``jpeg``, ``jpe`` and ``jfif`` become ``jpg``; every other name (``tif`` too) only
    loses its case and a leading dot. A prefix is kept: ``seg.JPEG`` -> ``seg.jpg``.
    """
    head, _, last = ext.removeprefix(".").lower().rpartition(".")
    if last not in IMAGE_EXTENSIONS:
        raise ConfigError(
            f"{ext!r} is not an image extension; known ones: {', '.join(sorted(IMAGE_EXTENSIONS))}"
        )
    last = _ALIASES.get(last, last)
    return f"{head}.{last}" if head else last


def _from_array(value: Any) -> Any:
    import numpy as np

    require("PIL.Image", "encoding images")
    import PIL.Image

    arr = np.asarray(value)
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (3, 4))) or arr.size == 0:
        raise TypeError(f"an image array must be HxW, HxWx1, HxWx3 or HxWx4, not {arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.isfinite(arr).all() or arr.min() < -0.001 or arr.max() > 1.001:
            raise ValueError("a float image must hold values in [0, 1]")
        arr = np.rint(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
    elif arr.dtype != np.uint8:
        raise TypeError(f"an image array must be uint8, or float in [0, 1], not {arr.dtype}")
    return PIL.Image.fromarray(np.ascontiguousarray(arr))


def encode_image(image: Any, ext: str, *, quality: int = 90) -> bytes:
    """Encode a PIL image or a numpy array (uint8, or float in [0, 1]) as ``ext``.

    Arrays are HxW (grayscale), HxWx3 (RGB) or HxWx4 (RGBA); floats are scaled by 255 and
    rounded. ``quality`` applies to the lossy formats (jpg, webp). Pillow writes no
    timestamps, so the same image always gives the same bytes.
    """
    require("PIL.Image", "encoding images")
    import PIL.Image

    fmt = _SAVE_FORMATS.get(_ALIASES.get(last_component(ext), last_component(ext)))
    if fmt is None:
        raise ConfigError(
            f"cannot encode images as {ext!r}; "
            f"pick one of {', '.join(sorted(ENCODABLE_IMAGE_EXTENSIONS))}"
        )
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ConfigError(f"quality must be an int from 1 to 100, not {quality!r}")
    if not isinstance(image, PIL.Image.Image):
        image = _from_array(image)
    options: dict[str, Any] = {"quality": quality} if fmt in _LOSSY else {}
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()
