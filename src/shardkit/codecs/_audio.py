"""Audio fields: cheap validation and decoding with soundfile (libsndfile).

:func:`check_audio` opens the header with soundfile and checks that the stream is all
there without decoding it: a WAV's ``data`` chunk fits in the file, an Ogg stream (Vorbis,
Opus) ends with a complete end-of-stream page, an MP3's frames (walked header to header)
end inside the file and are as many as its Xing/Info tag declares, and the last frames
of any file read back (a cut FLAC fails there).
:class:`AudioSpec` (``shardkit.audio()``) decodes to float32 ``[channels, frames]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from .._optional import require
from ..budget import allow, empty
from ..errors import DataError, DecodeError, DecodeLimitError
from ._images import last_component
from ._viewfile import Field, ViewFile

__all__ = ["AUDIO_EXTENSIONS", "Audio", "AudioSpec", "check_audio", "decode_audio"]

#: Extensions :func:`check_audio` and :class:`AudioSpec` take.
AUDIO_EXTENSIONS = frozenset({"wav", "flac", "mp3", "ogg", "oga", "opus"})

# How many frames at the end of a file are read back to see that the stream is there.
_TAIL_FRAMES = 1024

# Frames decode_audio() decodes at a time (of several channels): a clip of a few seconds
# in one read, at most 2 MB of stereo float32 beside the result of a long one.
_BLOCK_FRAMES = 1 << 18


class Audio(NamedTuple):
    """Decoded audio: ``samples`` float32 ``[channels, frames]`` (a torch tensor when the
    spec asks), and the sample ``rate`` in Hz."""

    samples: Any
    rate: int


def _soundfile() -> Any:
    return require("soundfile", "audio fields")


def _failures(sf: Any) -> tuple[type[Exception], ...]:
    """What soundfile raises for bytes it cannot read."""
    return (sf.SoundFileError, ValueError, EOFError, OSError, struct.error)


def check_audio(data: bytes, ext: str) -> None:
    """DataError (its message the reason) unless ``data`` is a complete audio file."""
    if not data:
        raise DataError("empty file")
    _check_structure(data)
    sf = _soundfile()
    try:
        with sf.SoundFile(ViewFile(data)) as f:
            frames = f.frames
            if frames <= 0:
                raise DataError(f"no audio frames ({f.format} header)")
            what = f"{f.format} audio of {frames:,} frames x {f.channels} channels"
            allow("audio", frames * f.channels * 4, what=what)  # what audio() would decode
            tail = min(frames, _TAIL_FRAMES)
            f.seek(frames - tail)
            got = len(f.read(tail, dtype="float32", always_2d=True))
    except DataError:
        raise
    except _failures(sf) as exc:
        reason = getattr(exc, "error_string", None) or exc  # not soundfile's "Error opening <file>"
        raise DataError(f"unreadable or truncated {ext.upper()} audio: {reason}") from exc
    if got < tail:
        raise DataError(f"truncated audio (the last {tail} of {frames} frames read {got})")


def _check_structure(data: bytes) -> None:
    """The container-level checks that libsndfile does not make (it reads a cut WAV or
    Ogg as a shorter one)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        _check_wav(data)
    elif data[:4] == b"OggS":
        _check_ogg(data)
    elif data[:3] == b"ID3" or _mpeg_frame(data, 0) is not None:
        _check_mp3(data)


def _check_wav(data: bytes) -> None:
    pos = 12
    while pos + 8 <= len(data):
        chunk, size = struct.unpack_from("<4sI", data, pos)
        if chunk == b"data":
            if size in (0, 0xFFFFFFFF):
                return  # written as a stream: no length to check
            if pos + 8 + size > len(data):
                raise DataError(f"truncated WAV ({len(data)} of {pos + 8 + size} bytes)")
            return
        pos += 8 + size + (size & 1)
    raise DataError("truncated WAV (no data chunk)")


def _check_ogg(data: bytes) -> None:
    """The last page is complete and marks the end of the stream."""
    pos = data.rfind(b"OggS")
    if pos + 27 > len(data):
        raise DataError("truncated Ogg (last page header cut)")
    flags, segments = data[pos + 5], data[pos + 26]
    lacing = data[pos + 27 : pos + 27 + segments]
    end = pos + 27 + segments + sum(lacing)
    if len(lacing) < segments or end > len(data):
        raise DataError(f"truncated Ogg ({len(data)} of {end} bytes)")
    if not flags & 4:
        raise DataError("truncated Ogg (the last page does not end the stream)")


# MPEG audio frame headers: bitrates (kbps) by (MPEG-1?, layer), sample rates by version.
_BITRATES = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def _mpeg_frame(data: bytes, pos: int) -> int | None:
    """The length of the MPEG audio frame whose header is at ``pos``, or None."""
    if pos + 4 > len(data):
        return None
    word: int = struct.unpack_from(">I", data, pos)[0]
    version, layer = (word >> 19) & 3, 4 - ((word >> 17) & 3)
    bitrate, rate, padding = (word >> 12) & 15, (word >> 10) & 3, (word >> 9) & 1
    if word >> 21 != 0x7FF or version == 1 or layer == 4 or bitrate in (0, 15) or rate == 3:
        return None
    mpeg1 = version == 3
    bps = _BITRATES[mpeg1, layer][bitrate] * 1000
    hz = _RATES[version][rate]
    if layer == 1:
        return (12 * bps // hz + padding) * 4
    per = 144 if mpeg1 or layer == 2 else 72
    return per * bps // hz + padding


def _check_mp3(data: bytes) -> None:
    """Walk the frames from the first to the last: the last must end inside the file."""
    pos = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        size = data[6:10]
        pos = 10 + (size[0] << 21 | size[1] << 14 | size[2] << 7 | size[3])
    frames, declared = 0, None
    while True:
        length = _mpeg_frame(data, pos)
        if length is None:
            break
        if frames == 0:
            declared = _xing_frames(data[pos : pos + length])
        if pos + length > len(data):
            raise DataError(
                f"truncated MP3 (frame {frames} ends at byte {pos + length} of {len(data)})"
            )
        pos += length
        frames += 1
    if frames == 0:
        raise DataError("not an MP3 (no MPEG audio frame after the ID3 tag)")
    if declared is not None and frames - 1 < declared:  # the tag's own frame is not counted
        raise DataError(
            f"truncated MP3 ({frames - 1} of the {declared} frames its header declares)"
        )


def _xing_frames(frame: bytes) -> int | None:
    """The frame count a Xing/Info tag (in an MP3's first frame) declares, or None."""
    for tag in (b"Xing", b"Info"):
        at = frame.find(tag)
        if at >= 0 and at + 12 <= len(frame):
            flags, count = struct.unpack_from(">II", frame, at + 4)
            return int(count) if flags & 1 else None
    return None


def decode_audio(data: Field, *, mono: bool = False, to_torch: bool = False) -> Audio:
    """``data`` decoded to float32 ``[channels, frames]`` (``[1, frames]`` if ``mono``).

    One channel is read straight into the result; more go in by blocks of
    :data:`_BLOCK_FRAMES`, so decoding holds the result and one block, not the field
    copied or the samples twice (libsndfile's ``[frames, channels]`` and its transpose)."""
    import numpy as np

    sf = _soundfile()
    try:
        with sf.SoundFile(ViewFile(data)) as f:
            rate = f.samplerate
            shape = (1 if mono else f.channels, f.frames)
            what = f"{f.format} audio of {f.frames:,} frames x {f.channels} channels"
            out = empty("audio", shape, np.float32, what=what, error=DecodeLimitError)
            done = 0
            if f.channels == 1:  # [frames, 1] is [1, frames]: libsndfile writes the result
                done = len(f.read(out.shape[1], dtype="float32", always_2d=True, out=out.T))
            while done < out.shape[1]:
                want = min(_BLOCK_FRAMES, out.shape[1] - done)
                block = f.read(want, dtype="float32", always_2d=True)
                if not len(block):
                    break
                part = block.mean(axis=1, dtype=np.float32) if mono else block.T
                out[:, done : done + len(block)] = part
                done += len(block)
    except DecodeLimitError:
        raise
    except _failures(sf) as exc:
        raise DecodeError(f"{type(exc).__name__}: {exc}") from exc
    if done < out.shape[1]:  # the header declared more frames than the stream holds
        out = np.ascontiguousarray(out[:, :done])
    if not to_torch:
        return Audio(out, int(rate))
    require("torch", "audio(torch=True)")
    import torch

    return Audio(torch.from_numpy(out), int(rate))


@dataclass(frozen=True)
class AudioSpec:
    """A decoder for ``.decode()``: audio fields (:data:`AUDIO_EXTENSIONS`) to
    :class:`Audio` ``(samples, rate)``; other fields pass on to the next decoder.
    Made by :func:`shardkit.audio`."""

    reads_views: ClassVar[bool] = True  # a Decoder hands it copy=False fields uncopied

    mono: bool = False
    torch: bool = False

    def __call__(self, ext: str, data: Field) -> Audio | None:
        if last_component(ext) not in AUDIO_EXTENSIONS:
            return None
        return decode_audio(data, mono=self.mono, to_torch=self.torch)
