"""Codecs: turn sample values into field bytes and back, by extension.

A sample is a dict with ``__key__``, an optional ``__url__`` and other dunder keys (kept
as they are), and one value per extension: ``{"__key__": "a/1", "jpg": ..., "cls": 3}``.
Fields dispatch on the lower-cased last dot-component of their extension (``seg.png``
-> ``png``). The built-in set is webdataset's:

==========================================  ==============================================
extension                                   value
==========================================  ==============================================
cls cls2 class count index inx id           int (ASCII decimal)
txt text transcript                         str (UTF-8)
json jsn                                    anything JSON holds (compact, key order kept)
pyd pickle pkl                              any picklable (protocol 4; decoding needs
                                            ``allow_pickle=True``)
pth                                         ``torch.save`` (decodes ``weights_only``
                                            unless ``allow_pickle=True``)
npy / npz                                   numpy array / dict of arrays (npz stored, no
                                            compression, fixed timestamps)
ten tb tenbin                               list of arrays, webdataset's tenbin format
mp msg msgpack / cbor                       msgpack / CBOR objects
jpg jpeg png ppm pgm pbm webp tif tiff bmp  PIL image or numpy array (encode only; decode
                                            with an image spec such as ``"rgb8"``)
==========================================  ==============================================

Encoding: bytes pass through, str becomes UTF-8, anything else goes through the
extension's encoder (:func:`encode_sample`); a field ending in ``.gz`` (``txt.gz``,
``json.gz``) is encoded by the rest of its extension, then gzipped (no timestamp, so the
bytes are reproducible), unless its bytes are gzip data already. Decoding:
:class:`Decoder`, whose image specs (:data:`IMAGE_SPECS`) are webdataset's; they apply to
the image extensions and to ``image/encoded`` (:data:`IMAGE_FEATURE`, the image of the
shardkit TFRecord schema). :func:`register` adds extensions to the process-wide registry;
a :class:`Codecs` object is a separate registry.

Decoders for other media, passed to ``.decode()`` like the image specs: :func:`audio`
(float32 ``[channels, frames]`` and the sample rate), :func:`video` (a clip of ``frames``
uint8 ``[N, H, W, 3]`` and their timestamps) and :func:`image` (images at training size).
:func:`check_field` validates text, JSON, npy, audio and video fields cheaply
(:data:`FIELD_CHECKS`, by extension).

Untrusted fields: a :class:`Decoder` never unpickles without ``allow_pickle=True``
(``torch.load`` runs with ``weights_only``); any field that does not decode raises
:class:`~shardkit.errors.DecodeError`; what a field may expand to is bounded (``.gz``
fields and npz and ``torch.save`` archives by the budget's ``expanded`` limit,
:data:`MAX_EXPANDED_SIZE` by default, ``SHARDKIT_MAX_EXPANDED`` to change it, or a
Decoder's ``max_gunzip_size``; npy headers by the data that follows them, images by Pillow's
``MAX_IMAGE_PIXELS``: a warning past it, a DecodeError past twice it).

Importing this package loads none of numpy, PIL, torch, msgpack or cbor2; each is
imported when a field first needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._audio import AUDIO_EXTENSIONS, Audio, AudioSpec
from ._builtin import MAX_EXPANDED_SIZE
from ._checks import FIELD_CHECKS, check_field
from ._checks import field_check as field_check
from ._decoder import Decoder, Handler, decode_sample
from ._failures import NPY_FAILURES as NPY_FAILURES
from ._failures import image_failures as image_failures
from ._images import IMAGE_EXTENSIONS, IMAGE_FEATURE
from ._images import encode_image as encode_image
from ._images import image_extension as image_extension
from ._images import image_size as image_size
from ._images import normalize_image_extension as normalize_image_extension
from ._imagespecs import IMAGE_SPECS
from ._imagespecs import RESIZE_MODES as RESIZE_MODES
from ._imagespecs import SizedImageSpec as SizedImageSpec
from ._pixels import check_pixels as check_pixels
from ._pixels import header_size as header_size
from ._registry import Codecs, FieldDecoder, FieldEncoder, default_codecs, register
from ._text import nests_within as nests_within
from ._text import parse_json as parse_json
from ._text import plain_bytes as plain_bytes
from ._video import VIDEO_EXTENSIONS, Clip, VideoSpec
from ._viewfile import ViewFile as ViewFile

# Names above imported ``as`` themselves are shared with shardkit's other packages (the
# builder, the tools, the pipeline), not the supported API: not in __all__.
__all__ = [
    "AUDIO_EXTENSIONS",
    "Audio",
    "AudioSpec",
    "Clip",
    "Codecs",
    "Decoder",
    "FIELD_CHECKS",
    "FieldDecoder",
    "FieldEncoder",
    "Handler",
    "IMAGE_EXTENSIONS",
    "IMAGE_FEATURE",
    "IMAGE_SPECS",
    "MAX_EXPANDED_SIZE",
    "VIDEO_EXTENSIONS",
    "VideoSpec",
    "audio",
    "check_field",
    "decode_sample",
    "default_codecs",
    "encode_sample",
    "image",
    "register",
    "video",
]


def encode_sample(sample: Mapping[str, Any], *, codecs: Codecs | None = None) -> dict[str, Any]:
    """A new sample whose non-dunder values are all bytes.

    Dunder keys are copied as they are; bytes pass through (bytearray and memoryview
    become bytes); str becomes UTF-8; any other value goes through the encoder of its
    extension's last component in ``codecs`` (default: :data:`default_codecs`). A value
    with no encoder, or one the encoder rejects, raises :class:`~shardkit.errors.EncodeError`
    carrying the sample key.
    """
    return (default_codecs if codecs is None else codecs).encode_sample(sample)


def audio(*, mono: bool = False, torch: bool = False) -> AudioSpec:
    """A decoder for ``.decode()``: audio fields (wav, flac, mp3, ogg, opus) to
    :class:`Audio` ``(samples, rate)``, ``samples`` float32 ``[channels, frames]``
    (``[1, frames]`` with ``mono=True``; a torch tensor with ``torch=True``). Needs the
    ``audio`` extra (soundfile)."""
    return AudioSpec(mono=bool(mono), torch=bool(torch))


def video(
    frames: int = 16, *, start: float | None = None, seed: int = 0, torch: bool = False
) -> VideoSpec:
    """A decoder for ``.decode()``: video fields (mp4, m4v, mov, webm, mkv) to a
    :class:`Clip` ``(frames, times)``: ``frames`` consecutive frames as uint8
    ``[N, H, W, 3]`` RGB and their timestamps in seconds (torch tensors with ``torch=True``).

    The clip starts ``start`` seconds into the video, or (``start=None``) at a position
    drawn from the stream's (seed, epoch, rank, worker) and the field, so each epoch sees
    other clips and a rerun the same ones (``seed`` stands in for the pipeline's seed when
    the spec is used outside one). Decoding seeks to the keyframe at or before the clip.
    A video with fewer frames than the clip needs is a DecodeError. Needs the ``video``
    extra (PyAV)."""
    return VideoSpec(frames=frames, start=start, seed=seed, torch=bool(torch))


def image(size: int = 224, mode: str = "center-crop", *, spec: str = "rgb8") -> SizedImageSpec:
    """A decoder for ``.decode()``: image fields at training size (see
    :class:`SizedImageSpec`): ``mode`` is ``"center-crop"`` (``size x size``),
    ``"keep-ratio"`` (the long side ``size``) or ``"pad"`` (``size x size``, black
    borders); ``spec`` the output as the image specs name it (``"rgb8"``, ``"torchrgb"``,
    ``"pil"``...). JPEGs decode at a reduced DCT scale first."""
    return SizedImageSpec(size=size, mode=mode, spec=spec)
