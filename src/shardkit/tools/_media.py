"""Media fields in the tools: the one place that makes a field's thumbnail, and what
``stats`` says about an audio or video field.

:func:`thumbnail_kind` names the fields a thumbnail can be made of (images, video, audio,
by extension); :func:`field_picture` draws one as a Pillow RGB image of at most ``box``:
an image scaled down (decoded at a reduced DCT scale first), a video's first frame
(through :func:`shardkit.video`), an audio waveform (:func:`audio_envelope`: per pixel
column the lowest and highest sample, decoded by soundfile a block at a time so a long
recording is never held decoded; drawn with numpy). ``show --grid``
and ``shardkit view`` both draw their tiles with it. An image's size is read from its
header first: past the readers' pixel limit (:func:`check_pixels`) it is refused before
anything is decoded, and a caller that bounds memory (the viewer) passes ``reserve``, which
is given the bytes the decode will hold (:func:`decode_cost`) before it starts.
:func:`media_info` reads an audio or video field's duration and rate from its header
(soundfile / PyAV), decoding nothing.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, NamedTuple

from .._optional import require
from ..codecs import (
    AUDIO_EXTENSIONS,
    VIDEO_EXTENSIONS,
    ViewFile,
    check_field,
    image_extension,
    image_failures,
    video,
)
from ..errors import DataError

__all__ = [
    "MediaInfo",
    "PixelLimitError",
    "audio_envelope",
    "check_pixels",
    "decode_cost",
    "field_picture",
    "media_info",
    "media_kind",
    "thumbnail_kind",
]

#: ``reserve(nbytes)``: a context that holds ``nbytes`` of a memory budget while it is open.
Reserve = Callable[[int], AbstractContextManager[object]]
Field = bytes | bytearray | memoryview

_MEDIA_COST = 64 << 20  # what a video frame or a waveform decode is reckoned to hold
_WAVE_BACKGROUND = (16, 28, 40)
_WAVE_LINE = (90, 200, 255)
_WAVE_AXIS = (60, 80, 100)


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def media_kind(name: str) -> str | None:
    """``audio`` or ``video`` for a field the codecs decode as such (by its last
    extension component), else None."""
    last = _last(name)
    if last in AUDIO_EXTENSIONS:
        return "audio"
    return "video" if last in VIDEO_EXTENSIONS else None


def thumbnail_kind(name: str) -> str | None:
    """``image``, ``video`` or ``audio`` when :func:`field_picture` draws the field."""
    return "image" if image_extension(name) else media_kind(name)


class PixelLimitError(DataError):
    """A picture whose header declares more pixels than the readers decode."""


def check_pixels(width: int, height: int) -> None:
    """Refuse (:class:`PixelLimitError`) a picture of ``width`` x ``height`` pixels past
    the limit the image readers apply (twice Pillow's ``MAX_IMAGE_PIXELS``, where
    :func:`shardkit.codecs.decode_image` raises): the one check of a thumbnail's size,
    made on the header's numbers before any pixel is decoded."""
    from PIL import Image

    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > 2 * limit:
        raise PixelLimitError(
            f"a picture of {width}x{height} pixels is over the limit of {2 * limit:,} pixels"
        )


def decode_cost(image: Any) -> int:
    """The bytes an opened (not yet loaded) Pillow ``image`` holds while
    :func:`field_picture` draws it: its pixels as Pillow stores them (1, 2 or 4 bytes
    each), plus an RGB copy for a mode that is converted before it is scaled."""
    width, height = image.size
    mode = image.mode
    stored = 1 if mode in ("1", "L", "P") else 2 if mode.startswith("I;16") else 4
    return int(width * height * (stored + (0 if _scaled_in_place(image) else 4)))


def _scaled_in_place(image: Any) -> bool:
    """Whether ``image`` is scaled before it is converted to RGB (the same pixels as the
    other way round for RGB and grayscale; a JPEG keeps Pillow's draft-then-convert)."""
    return image.mode in ("RGB", "L") and image.format != "JPEG"


def field_picture(
    name: str, data: Field, box: tuple[int, int], *, reserve: Reserve | None = None
) -> Any:
    """The field drawn as a Pillow RGB image fitting ``box`` (width, height).

    A field that does not decode raises :class:`~shardkit.errors.DataError` whose message
    is the reason (:class:`PixelLimitError` for a picture over the pixel limit); a missing
    extra (Pillow, soundfile, PyAV) is a :class:`~shardkit.errors.MissingDependencyError`;
    a field of no kind above is a DataError too. ``reserve`` (see the module docs) is
    entered around the decode; ``data`` may be a memoryview (of a memory-mapped shard):
    an image is read from it without a copy.
    """
    kind = thumbnail_kind(name)
    require("PIL.Image", "thumbnails")
    hold = reserve or _no_budget
    if kind == "image":
        return _image(data, box, hold)
    if kind not in ("video", "audio"):
        raise DataError(f"no thumbnail for a {name!r} field")
    with hold(2 * len(data) + _MEDIA_COST):
        if kind == "video":
            return _first_frame(name, bytes(data), box)
        return _draw(*audio_envelope(name, bytes(data), box[0]), box)


def _no_budget(nbytes: int) -> AbstractContextManager[object]:
    return nullcontext()


def _image(data: Field, box: tuple[int, int], hold: Reserve) -> Any:
    from PIL import Image

    try:
        with Image.open(io.BufferedReader(ViewFile(data))) as img:
            check_pixels(*img.size)
            img.draft("RGB", (box[0] * 2, box[1] * 2))
            with hold(decode_cost(img)):
                if _scaled_in_place(img):
                    img.thumbnail(box)  # in place: the decoded pixels are not copied
                    return img.convert("RGB")
                picture = img.convert("RGB")
                picture.thumbnail(box)
                return picture
    except Image.DecompressionBombError as exc:
        raise PixelLimitError(f"a picture over the pixel limit: {exc}") from exc
    except image_failures() as exc:
        raise DataError(f"not a readable image ({type(exc).__name__})") from exc


def _first_frame(name: str, data: bytes, box: tuple[int, int]) -> Any:
    from PIL import Image

    clip = video(1, start=0.0)(_last(name), data)
    if clip is None:  # pragma: no cover - thumbnail_kind chose a video extension
        raise DataError(f"no thumbnail for a {name!r} field")
    picture = Image.fromarray(clip.frames[0], "RGB")
    picture.thumbnail(box)
    return picture


def audio_envelope(name: str, data: bytes, width: int, *, block: int = 1 << 16) -> tuple[Any, Any]:
    """Per pixel column of ``width``, the lowest and highest sample (mono: the mean of the
    channels) of the column's span of audio field ``name``: float32 ``(lows, highs)``,
    after the field's check (:func:`shardkit.codecs.check_field`).

    Decoded ``block`` frames at a time (soundfile), so a long recording costs one block of
    memory, not its decoded length; a stream that does not read to the end is a DataError
    (a cut file is not drawn as a shorter one)."""
    import numpy as np

    sf = require("soundfile", "audio fields")
    check_field(data, _last(name))
    lows = np.full(width, np.inf, np.float32)
    highs = np.full(width, -np.inf, np.float32)
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            frames = f.frames
            if frames <= 0:
                raise DataError(f"no audio frames ({f.format} header)")
            edges = (np.arange(width + 1, dtype=np.int64) * frames) // width
            start = 0
            for chunk in f.blocks(block, dtype="float32", always_2d=True):
                values = chunk.mean(axis=1, dtype=np.float32)
                end = start + len(values)
                inside = edges[(edges > start) & (edges < end)] - start
                cuts = np.concatenate(([0], inside))
                columns = np.searchsorted(edges, start + cuts, side="right") - 1
                np.minimum.at(lows, columns, np.minimum.reduceat(values, cuts))
                np.maximum.at(highs, columns, np.maximum.reduceat(values, cuts))
                start = end
    except DataError:
        raise
    except (sf.SoundFileError, ValueError, EOFError, OSError, RuntimeError) as exc:
        raise DataError(f"audio does not decode: {exc}") from exc
    if start < frames:
        raise DataError(f"truncated audio ({start} of {frames} frames decode)")
    empty = lows > highs  # a column of no frame (fewer frames than columns)
    lows[empty] = highs[empty] = 0.0
    return lows, highs


def _draw(lows: Any, highs: Any, box: tuple[int, int]) -> Any:
    import numpy as np
    from PIL import Image

    width, height = box
    pixels = np.empty((height, width, 3), np.uint8)
    pixels[:] = _WAVE_BACKGROUND
    pixels[height // 2, :] = _WAVE_AXIS
    lows = np.nan_to_num(lows, nan=0.0, posinf=1.0, neginf=-1.0)
    highs = np.nan_to_num(highs, nan=0.0, posinf=1.0, neginf=-1.0)
    half = (height - 1) / 2
    top = np.clip(np.round(half - highs * half), 0, height - 1).astype(np.int64)
    bottom = np.clip(np.round(half - lows * half), 0, height - 1).astype(np.int64)
    rows = np.arange(height)[:, None]
    pixels[(rows >= top) & (rows <= bottom)] = _WAVE_LINE
    return Image.fromarray(pixels, "RGB")


class MediaInfo(NamedTuple):
    """An audio or video field's ``duration`` in seconds (None when its header does not
    say) and ``rate``: samples per second for audio, frames per second for video."""

    kind: str
    duration: float | None
    rate: float | None


def media_info(name: str, data: bytes) -> MediaInfo | None:
    """The duration and rate of an audio or video field from its header; None for a
    field of another kind. A field whose header does not read is a DataError."""
    kind = media_kind(name)
    if kind == "audio":
        return _audio_info(data)
    if kind == "video":
        return _video_info(name, data)
    return None


def _audio_info(data: bytes) -> MediaInfo:
    sf = require("soundfile", "audio fields")
    try:
        info = sf.info(io.BytesIO(data))
    except (sf.SoundFileError, ValueError, EOFError, OSError, RuntimeError) as exc:
        raise DataError(f"unreadable audio header: {exc}") from exc
    rate = float(info.samplerate)
    return MediaInfo("audio", info.frames / rate if rate else None, rate)


def _video_info(name: str, data: bytes) -> MediaInfo:
    av = require("av", "video fields")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise DataError(f"no video stream in the {_last(name)} field")
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate
            if stream.duration is not None and stream.time_base is not None:
                duration: float | None = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / av.time_base
            else:
                duration = None
    except DataError:
        raise
    except (av.FFmpegError, ValueError, EOFError, OSError, IndexError) as exc:
        raise DataError(f"unreadable video header: {exc}") from exc
    return MediaInfo("video", duration, float(rate) if rate else None)
