"""Video fields: cheap validation and clip decoding with PyAV (FFmpeg).

:func:`check_video` never decodes a frame: the container's structure must fit in the
file (an MP4's top-level boxes, with a ``moov``; a Matroska/WebM segment of known size),
and PyAV must open it and find a video stream. :class:`VideoSpec` (``shardkit.video()``)
decodes a clip of ``frames`` consecutive frames: it seeks to the keyframe at or before
the clip's start, so a clip from the middle of a long video decodes a GOP or less before
its first frame instead of everything before it.
"""

from __future__ import annotations

import hashlib
import random
import struct
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

from .._optional import require
from ..budget import allow, empty
from ..errors import ConfigError, DataError, DecodeError, DecodeLimitError
from ._images import last_component
from ._viewfile import Field, ViewFile

__all__ = ["VIDEO_EXTENSIONS", "Clip", "VideoSpec", "check_video", "read_clip"]

#: Extensions :func:`check_video` and :class:`VideoSpec` take.
VIDEO_EXTENSIONS = frozenset({"mp4", "m4v", "mov", "webm", "mkv"})

_EBML = b"\x1a\x45\xdf\xa3"
_SEGMENT = 0x18538067


class Clip(NamedTuple):
    """A decoded clip: ``frames`` uint8 ``[N, H, W, 3]`` (RGB; a torch tensor when the spec
    asks) and ``times``, each frame's timestamp in seconds (float64 ``[N]``)."""

    frames: Any
    times: Any


def _av() -> Any:
    return require("av", "video fields")


def _failures(av: Any) -> tuple[type[Exception], ...]:
    """What PyAV raises for bytes it cannot read."""
    return (av.FFmpegError, ValueError, EOFError, OSError, IndexError)


def check_video(data: bytes, ext: str) -> None:
    """DataError (its message the reason) unless ``data`` is a complete video file."""
    if not data:
        raise DataError("empty file")
    if data[:4] == _EBML:
        _check_ebml(data)
    elif data[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
        _check_mp4(data)
    av = _av()
    try:
        with av.open(ViewFile(data), mode="r") as container:
            if not container.streams.video:
                raise DataError(f"no video stream in {ext.upper()} file")
            _frame_size(container.streams.video[0])  # what video() would refuse
    except DataError:
        raise
    except _failures(av) as exc:
        raise DataError(f"not a readable {ext.upper()} video: {exc}") from exc


def _frame_size(stream: Any) -> tuple[int, int]:
    """(width, height) of a video stream's frames as its header declares them: each
    within the image pixel limit, or a DecodeLimitError naming the video."""
    width, height = int(stream.width or 0), int(stream.height or 0)
    what = f"a video of {width}x{height} frames"
    allow("image_pixels", width * height, what=what, error=DecodeLimitError)
    return width, height


def _clip(frames: int, width: int, height: int) -> str:
    return f"a clip of {frames} frames of {width}x{height}"


def _check_mp4(data: bytes) -> None:
    """Every top-level box ends inside the file, and one of them is ``moov``."""
    pos, boxes = 0, set()
    while pos + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, pos)
        if size == 1:
            if pos + 16 > len(data):
                break
            (size,) = struct.unpack_from(">Q", data, pos + 8)
        elif size == 0:
            size = len(data) - pos  # "to the end of the file"
        if size < 8:
            raise DataError(f"corrupt MP4 (box {kind!r} at byte {pos} has size {size})")
        if pos + size > len(data):
            name = kind.decode("latin-1")
            raise DataError(
                f"truncated MP4 (box {name!r} ends at byte {pos + size} of {len(data)})"
            )
        boxes.add(kind)
        pos += size
    if pos < len(data):
        raise DataError(f"truncated MP4 (a box header is cut at byte {pos})")
    if b"moov" not in boxes:
        raise DataError("truncated MP4 (no moov box)")


def _vint(data: bytes, pos: int) -> tuple[int, int, bool]:
    """An EBML variable-length integer at ``pos``: (value, length, all value bits set)."""
    if pos >= len(data) or data[pos] == 0:
        raise DataError("corrupt Matroska/WebM (bad element header)")
    first = data[pos]
    length = 9 - first.bit_length()
    if pos + length > len(data):
        raise DataError("truncated Matroska/WebM (element header cut)")
    value = first & ((1 << (8 - length)) - 1)
    for byte in data[pos + 1 : pos + length]:
        value = value << 8 | byte
    return value, length, value == (1 << (7 * length)) - 1


def _check_ebml(data: bytes) -> None:
    """The EBML header and the Segment (when its size is known) end inside the file."""
    pos = 0
    while pos < len(data):
        _, id_len, _ = _vint(data, pos)
        ident = int.from_bytes(data[pos : pos + id_len], "big")  # IDs keep their marker bit
        size, size_len, unknown = _vint(data, pos + id_len)
        start = pos + id_len + size_len
        if unknown:
            return  # a live stream's segment: its length is not written
        if start + size > len(data):
            raise DataError(f"truncated Matroska/WebM ({len(data)} of {start + size} bytes)")
        if ident == _SEGMENT:
            return
        pos = start + size
    raise DataError("truncated Matroska/WebM (no segment)")


def _start_fraction(key: tuple[int, int, int, int], data: Field) -> float:
    """Where in [0, 1) of the clip's possible starts this field's clip begins, from the
    stream's (seed, epoch, rank, worker) and the field's bytes (its length and first
    64 KiB: a digest that does not read all of a large video)."""
    digest = hashlib.blake2b(data[:65536], digest_size=8)
    digest.update(len(data).to_bytes(8, "little"))
    seed, epoch, rank, worker = key
    return random.Random(
        f"shardkit-video:{seed}:{epoch}:{rank}:{worker}:{digest.hexdigest()}"
    ).random()


class _Read(NamedTuple):
    clip: Clip
    decoded: int  # frames decoded, the clip's and those before it since the seek


def read_clip(data: Field, frames: int, *, start: float | None, fraction: float) -> _Read:
    """``frames`` consecutive frames from ``start`` seconds into the stream (None: at
    ``fraction`` of the starts that leave room for the clip), seeking to the keyframe at or
    before it."""
    import numpy as np

    av = _av()
    try:
        with av.open(ViewFile(data), mode="r") as container:
            if not container.streams.video:
                raise DecodeError("no video stream")
            stream = container.streams.video[0]
            width, height = _frame_size(stream)
            what = _clip(frames, width, height)
            allow("video_clip", frames * width * height * 3, what=what, error=DecodeLimitError)
            base = stream.time_base
            first = stream.start_time or 0
            if start is None:
                rate = stream.average_rate or stream.guessed_rate or 30
                if stream.duration is not None:
                    duration = float(stream.duration * base)
                else:
                    duration = (container.duration or 0) / av.time_base
                start = fraction * max(0.0, duration - (frames + 1) / float(rate))
            target = first + int(start / base)
            if target > first:
                container.seek(target, stream=stream, backward=True, any_frame=False)
            out: Any = None
            times = np.empty(frames, np.float64)  # budget: frames is bounded with the clip
            got = decoded = 0
            for frame in container.decode(stream):
                decoded += 1
                if frame.pts is not None and frame.pts < target:
                    continue
                rgb = frame.to_ndarray(format="rgb24")
                if out is None:  # the frame's own size, which the header may not have given
                    what = _clip(frames, rgb.shape[1], rgb.shape[0])
                    shape = (frames, *rgb.shape)
                    out = empty("video_clip", shape, np.uint8, what=what, error=DecodeLimitError)
                out[got] = rgb
                times[got] = float(frame.pts * base) if frame.pts is not None else np.nan
                got += 1
                if got == frames:
                    return _Read(Clip(out, times), decoded)
    except (DataError, ConfigError):
        raise
    except _failures(av) as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}") from exc
    raise DecodeError(f"the video has {got} frames from {start:.3f}s; the clip needs {frames}")


@dataclass(frozen=True)
class VideoSpec:
    """A decoder for ``.decode()``: video fields (:data:`VIDEO_EXTENSIONS`) to a
    :class:`Clip` ``(frames, times)``; other fields pass on to the next decoder.
    Made by :func:`shardkit.video`."""

    reads_views: ClassVar[bool] = True  # a Decoder hands it copy=False fields uncopied

    frames: int = 16
    start: float | None = None
    seed: int = 0
    torch: bool = False
    # (seed, epoch, rank, worker) of the stream decoding, set by for_stream().
    stream: tuple[int, int, int, int] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.frames, bool) or not isinstance(self.frames, int) or self.frames < 1:
            raise ConfigError(f"video(frames=) takes an int >= 1, not {self.frames!r}")
        if self.start is not None and not (
            isinstance(self.start, (int, float)) and self.start >= 0
        ):
            raise ConfigError(f"video(start=) takes seconds >= 0 or None, not {self.start!r}")

    def for_stream(self, ctx: Any) -> VideoSpec:
        """This spec choosing clips from ``ctx``'s (seed, epoch, rank, worker)."""
        return replace(self, stream=(ctx.seed, ctx.epoch, ctx.rank, ctx.worker))

    def __call__(self, ext: str, data: Field) -> Clip | None:
        if last_component(ext) not in VIDEO_EXTENSIONS:
            return None
        key = self.stream if self.stream is not None else (self.seed, 0, 0, 0)
        fraction = 0.0 if self.start is not None else _start_fraction(key, data)
        clip = read_clip(data, self.frames, start=self.start, fraction=fraction).clip
        if self.torch:
            require("torch", "video(torch=True)")
            import torch

            return Clip(torch.from_numpy(clip.frames), torch.from_numpy(clip.times))
        return clip
