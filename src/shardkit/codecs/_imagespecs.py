"""Image decode specs, named and behaving as webdataset's ``imagehandler(spec)``.

A spec says what an image decodes to: a numpy array, a torch tensor or a PIL image; uint8
or float32 in [0, 1]; grayscale, RGB or RGBA. Every image is converted to the spec's mode
whatever mode it was stored in, as webdataset does. Layouts: numpy HxW / HxWxC, torch
CxHxW for colour and HxW for grayscale (webdataset adds no channel axis for ``torchl8``).

JPEGs in YCbCr or grayscale decode with simplejpeg (libjpeg-turbo) when it is installed,
with the settings Pillow uses (accurate DCT, fancy upsampling), so the pixels are the ones
Pillow gives; anything else, and any JPEG simplejpeg refuses, goes through Pillow. Pillow's
decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) applies to both paths. Torch
specs put the channels first with OpenCV's ``split`` when OpenCV is installed (the
``images`` extra holds it), numpy's copy otherwise: the same bytes either way.
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass
from typing import Any, Literal

from .._optional import optional, require
from ..budget import allow
from ..errors import ConfigError, DecodeError, DecodeLimitError
from ._failures import image_failures
from ._images import IMAGE_FEATURE, image_extension, last_component
from ._pixels import check_pixels

__all__ = ["IMAGE_SPECS", "RESIZE_MODES", "SizedImageSpec", "check_spec", "decode_image"]

_Kind = Literal["numpy", "torch", "pil"]
_Mode = Literal["L", "RGB", "RGBA"]

# spec -> (kind, float32 in [0, 1]?, mode): webdataset's table.
_SPECS: dict[str, tuple[_Kind, bool, _Mode]] = {
    "l8": ("numpy", False, "L"),
    "rgb8": ("numpy", False, "RGB"),
    "rgba8": ("numpy", False, "RGBA"),
    "l": ("numpy", True, "L"),
    "rgb": ("numpy", True, "RGB"),
    "rgba": ("numpy", True, "RGBA"),
    "torchl8": ("torch", False, "L"),
    "torchrgb8": ("torch", False, "RGB"),
    "torchrgba8": ("torch", False, "RGBA"),
    "torchl": ("torch", True, "L"),
    "torchrgb": ("torch", True, "RGB"),
    "torch": ("torch", True, "RGB"),
    "torchrgba": ("torch", True, "RGBA"),
    "pill": ("pil", False, "L"),
    "pil": ("pil", False, "RGB"),
    "pilrgb": ("pil", False, "RGB"),
    "pilrgba": ("pil", False, "RGBA"),
}

#: The image spec names, in webdataset's order.
IMAGE_SPECS = tuple(_SPECS)

_JPEG = frozenset({"jpg", "jpeg", "jpe", "jfif"})
# Formats Pillow may open. EPS is left out: loading it runs Ghostscript on the data.
_UNSAFE_FORMATS = frozenset({"EPS"})


def check_spec(spec: str) -> str:
    """The canonical (lower-case) name of ``spec``; ConfigError when there is none."""
    name = spec.lower()
    if name not in _SPECS:
        raise ConfigError(f"unknown image spec {spec!r}; valid specs: {', '.join(IMAGE_SPECS)}")
    return name


@functools.cache
def _simplejpeg() -> Any:
    return optional("simplejpeg")  # the fast path; Pillow decodes without it


def _pil_formats() -> tuple[str, ...]:
    # Not cached: plugins registered later (pillow-heif, ...) must count too.
    import PIL.Image

    PIL.Image.init()
    return tuple(f for f in PIL.Image.OPEN if f not in _UNSAFE_FORMATS)


def _open_pil(data: bytes, mode: _Mode) -> Any:
    require("PIL.Image", "decoding images")
    import PIL.Image

    check_pixels(data, error=DecodeLimitError)
    with PIL.Image.open(io.BytesIO(data), formats=_pil_formats()) as img:
        img.load()
        return img.convert(mode)


def _decode_jpeg(data: bytes, mode: _Mode) -> Any:
    """The pixels of a JPEG as a uint8 array via simplejpeg, or None to use Pillow."""
    sj = _simplejpeg()
    if sj is None:
        return None
    require("PIL.Image", "decoding images")
    import PIL.Image

    try:
        height, width, colorspace, _ = sj.decode_jpeg_header(data)
    except ValueError:
        return None  # not a JPEG after all, or damaged: Pillow decides
    allow("image_pixels", width * height, what=f"a {width}x{height} JPEG", error=DecodeLimitError)
    limit = PIL.Image.MAX_IMAGE_PIXELS
    if colorspace not in ("YCbCr", "Gray") or (limit is not None and height * width > limit):
        return None  # CMYK/YCCK convert differently; big images get Pillow's bomb check
    gray = mode == "L" and colorspace == "Gray"
    target = "GRAY" if gray else ("RGBA" if mode == "RGBA" else "RGB")
    try:
        arr = sj.decode_jpeg(data, colorspace=target, fastdct=False, fastupsample=False)
    except ValueError:
        return None
    if gray:
        return arr[:, :, 0]
    if mode == "L":
        # libjpeg's Y channel is not Pillow's L (which is computed from clamped RGB).
        return _writable(PIL.Image.fromarray(arr).convert("L"))
    return arr


def _writable(img: Any) -> Any:
    import numpy as np

    return np.array(img)


@functools.cache
def _opencv() -> Any:
    return optional("cv2")  # splits channels faster; numpy does it without


def _channels_first(arr: Any) -> Any:
    """A contiguous CxHxW copy of an HxWxC uint8 array. OpenCV's ``split`` writes each
    plane in one vectorized pass: ~40 µs for 384x384x3, where numpy's strided copy takes
    ~230 µs (a third of decoding the JPEG)."""
    import numpy as np

    out = np.empty((arr.shape[2], *arr.shape[:2]), arr.dtype)  # budget: arr's own, decoded
    cv2 = _opencv()
    if cv2 is None or arr.dtype != np.uint8 or not arr.flags.c_contiguous or not arr.size:
        np.copyto(out, arr.transpose(2, 0, 1))
        return out
    planes = list(out)
    for plane, got in zip(planes, cv2.split(arr, planes), strict=True):
        if not np.may_share_memory(plane, got):  # OpenCV made its own: copy it in
            plane[...] = got
    return out


def _finish(arr: Any, to_float: bool, kind: _Kind) -> Any:
    import numpy as np

    if kind == "torch":
        require("torch", "decoding images to torch tensors")
        if arr.ndim == 3:
            arr = _channels_first(arr)  # before the float conversion: a quarter the bytes
    if to_float:
        arr = arr.astype(np.float32)
        arr /= 255.0  # in place: one float copy of a large image, not two
    if kind == "numpy":
        return arr
    import torch

    return torch.from_numpy(arr)


def _is_jpeg(data: bytes, ext: str) -> bool:
    """Whether to try libjpeg-turbo: a JPEG extension, or a TFRecord's ``image/encoded``
    (whatever format it holds) that starts like a JPEG."""
    if last_component(ext) in _JPEG:
        return True
    return ext.lower() == IMAGE_FEATURE and data[:3] == b"\xff\xd8\xff"


def decode_image(data: bytes, spec: str, ext: str) -> Any:
    """Decode image bytes the way ``spec`` (a name from :data:`IMAGE_SPECS`) says."""
    kind, to_float, mode = _SPECS[spec]
    arr = None
    if kind != "pil" and _is_jpeg(data, ext):
        arr = _decode_jpeg(data, mode)
    if arr is None:
        img = _open_pil(data, mode)
        if kind == "pil":
            return img
        arr = _writable(img)
        del img  # let Pillow's copy go before the float conversion
    return _finish(arr, to_float, kind)


#: How :class:`SizedImageSpec` fits an image to its size.
RESIZE_MODES = ("center-crop", "keep-ratio", "pad")


@dataclass(frozen=True)
class SizedImageSpec:
    """A decoder for ``.decode()``: image fields at training size, made by
    :func:`shardkit.image`; other fields pass on to the next decoder.

    ``center-crop``: the centre square, scaled to ``size x size``. ``keep-ratio``: the
    long side scaled to ``size``. ``pad``: as ``keep-ratio``, centred on a black
    ``size x size`` canvas. A JPEG decodes at the smallest reduced DCT scale that still
    covers the target (libjpeg-turbo's M/8 scales through simplejpeg when it is installed,
    else Pillow's ``draft``: 1/2, 1/4, 1/8; the pixels differ slightly between the two),
    so a 2000 px photo for a 224 px crop decodes a fraction of its pixels; the resize is
    OpenCV's (bilinear; area averaging past 2x down), which the ``images`` extra installs.
    The output's shape and the crop box come from the image's own size, whatever scale it
    decoded at (``keep-ratio`` of 1024x683 at 224 is 224x149: 683 x 224/1024 rounded).
    ``spec`` is the output, as the image specs (:data:`IMAGE_SPECS`) name it: ``"rgb8"``
    numpy HxWx3 uint8, ``"torchrgb"`` CxHxW float32, ``"pil"`` ...
    """

    size: int = 224
    mode: str = "center-crop"
    spec: str = "rgb8"

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ConfigError(f"image(size=) takes an int >= 1, not {self.size!r}")
        if self.mode not in RESIZE_MODES:
            raise ConfigError(
                f"image(mode=) takes one of {', '.join(RESIZE_MODES)}, not {self.mode!r}"
            )
        object.__setattr__(self, "spec", check_spec(self.spec))

    def __call__(self, ext: str, data: bytes) -> Any:
        if not image_extension(ext):
            return None
        require("PIL.Image", "decoding images")
        require("cv2", "shardkit.image(size=...)")  # the resize (the images extra has it)
        try:
            return self._decode(data, ext)
        except DecodeError:
            raise
        except image_failures() as exc:
            raise DecodeError(f"{type(exc).__name__}: {exc}") from exc

    def _decode(self, data: bytes, ext: str) -> Any:
        kind, to_float, mode = _SPECS[self.spec]
        decoded = None
        if mode != "L" and _is_jpeg(data, ext):
            decoded = _decode_jpeg_scaled(data, mode, self.size, self.mode == "center-crop")
        if decoded is None:
            decoded = self._decode_pil(data, mode)
        out = self._fit(*decoded)
        if kind == "pil":
            import PIL.Image

            return PIL.Image.fromarray(out)
        return _finish(out, to_float, kind)

    def _decode_pil(self, data: bytes, mode: _Mode) -> tuple[Any, int, int, float]:
        """Pillow's decode; for a JPEG, at the smallest DCT scale that covers the target.
        The pixels, the image's own width and height, and the scale decoded at."""
        import numpy as np
        import PIL.Image

        check_pixels(data, error=DecodeLimitError)
        with PIL.Image.open(io.BytesIO(data), formats=_pil_formats()) as img:
            width, height = img.size
            m = _eighths(width, height, self.size, self.mode == "center-crop")
            img.draft(mode, (math.ceil(width * m / 8), math.ceil(height * m / 8)))
            img.load()
            # asarray: read-only, and no copy; every mode makes its output anew.
            arr = np.asarray(img.convert(mode))
        return arr, width, height, _scale_of(arr, width, height, (1, 1 / 2, 1 / 4, 1 / 8))

    def _fit(self, arr: Any, width: int, height: int, scale: float) -> Any:
        """``arr`` (HxW[xC]: a ``width`` x ``height`` image decoded at ``scale``) resized and
        cropped or padded as the mode says. The geometry is the image's own, whatever the
        scale: the output's shape and the crop box are computed on ``width`` x ``height``
        and then mapped onto ``arr`` (rounded to its pixels)."""
        import numpy as np

        size = self.size
        if self.mode == "center-crop":
            side = min(width, height)
            box = ((width - side) / 2, (height - side) / 2, side, side)
            return _resize_box(arr, box, scale, size, size)
        ratio = size / max(width, height)
        out_w, out_h = max(1, round(width * ratio)), max(1, round(height * ratio))
        fitted = _resize_box(arr, (0, 0, width, height), scale, out_w, out_h)
        if self.mode == "keep-ratio":
            return fitted
        canvas = np.zeros((size, size, *arr.shape[2:]), arr.dtype)  # budget: size is the option
        top, left = (size - out_h) // 2, (size - out_w) // 2
        canvas[top : top + out_h, left : left + out_w] = fitted
        return canvas


def _eighths(width: int, height: int, size: int, cover_short: bool) -> int:
    """The least M (1..8) for which M/8 of a ``width`` x ``height`` image keeps its short
    side (``cover_short``) or its long side at least ``size``."""
    scale = size / (min if cover_short else max)(width, height)
    return min(8, max(1, math.ceil(scale * 8 - 1e-9)))


def _scale_of(arr: Any, width: int, height: int, scales: tuple[float, ...]) -> float:
    """Which of ``scales`` a decoder used to give ``arr`` (it rounds up), else the ratio."""
    for scale in scales:
        if arr.shape[:2] == (math.ceil(height * scale), math.ceil(width * scale)):
            return scale
    return float(arr.shape[1] / width)


def _resize_box(arr: Any, box: tuple[float, ...], scale: float, width: int, height: int) -> Any:
    """The part of ``arr`` that ``box`` (left, top, width, height, in the image's own pixels;
    ``arr`` is the image at ``scale``) covers, resized to ``width`` x ``height``."""
    import cv2

    left, top = round(box[0] * scale), round(box[1] * scale)
    right = min(arr.shape[1], max(left + 1, round((box[0] + box[2]) * scale)))
    bottom = min(arr.shape[0], max(top + 1, round((box[1] + box[3]) * scale)))
    return _resize(cv2, arr[top:bottom, left:right], width, height)


def _resize(cv2: Any, arr: Any, width: int, height: int) -> Any:
    """OpenCV's bilinear resize (area averaging past 2x down, where bilinear would alias:
    after a reduced DCT scale the rest is under 2x unless the image is 8x the target)."""
    if arr.shape[1] == width and arr.shape[0] == height:
        return arr.copy()
    shrink = min(arr.shape[1] / width, arr.shape[0] / height)
    method = cv2.INTER_AREA if shrink >= 2 else cv2.INTER_LINEAR
    return cv2.resize(arr, (width, height), interpolation=method)


def _decode_jpeg_scaled(
    data: bytes, mode: _Mode, size: int, cover_short: bool
) -> tuple[Any, int, int, float] | None:
    """A JPEG decoded by simplejpeg at the smallest libjpeg-turbo scale (an M/8) that keeps
    the short side (``cover_short``) or the long side at least ``size``: the pixels, the
    image's width and height, and M/8; None to use Pillow."""
    sj = _simplejpeg()
    if sj is None:
        return None
    import PIL.Image

    try:
        height, width, colorspace, _ = sj.decode_jpeg_header(data)
    except ValueError:
        return None
    allow("image_pixels", width * height, what=f"a {width}x{height} JPEG", error=DecodeLimitError)
    limit = PIL.Image.MAX_IMAGE_PIXELS
    if colorspace not in ("YCbCr", "Gray") or (limit is not None and height * width > limit):
        return None
    m = _eighths(width, height, size, cover_short)
    try:
        arr = sj.decode_jpeg(
            data,
            colorspace=mode,
            fastdct=False,
            fastupsample=False,
            min_height=math.ceil(height * m / 8),
            min_width=math.ceil(width * m / 8),
        )
    except ValueError:
        return None
    return arr, width, height, _scale_of(arr, width, height, (m / 8,))
