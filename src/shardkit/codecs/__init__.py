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

Untrusted fields: a :class:`Decoder` never unpickles without ``allow_pickle=True``
(``torch.load`` runs with ``weights_only``); any field that does not decode raises
:class:`~shardkit.errors.DecodeError`; what a field may expand to is bounded (``.gz``
fields by ``max_gunzip_size``, npz and ``torch.save`` archives by
:data:`MAX_EXPANDED_SIZE`, npy headers by the data that follows them, images by Pillow's
``MAX_IMAGE_PIXELS``: a warning past it, a DecodeError past twice it).

Importing this package loads none of numpy, PIL, torch, msgpack or cbor2; each is
imported when a field first needs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._builtin import MAX_EXPANDED_SIZE
from ._decoder import Decoder, Handler, decode_sample
from ._failures import NPY_FAILURES, image_failures
from ._images import (
    IMAGE_EXTENSIONS,
    IMAGE_FEATURE,
    encode_image,
    image_extension,
    image_size,
    normalize_image_extension,
)
from ._imagespecs import IMAGE_SPECS
from ._registry import Codecs, FieldDecoder, FieldEncoder, default_codecs, register

__all__ = [
    "Codecs",
    "Decoder",
    "FieldDecoder",
    "FieldEncoder",
    "Handler",
    "IMAGE_EXTENSIONS",
    "IMAGE_FEATURE",
    "IMAGE_SPECS",
    "MAX_EXPANDED_SIZE",
    "NPY_FAILURES",
    "decode_sample",
    "default_codecs",
    "encode_image",
    "encode_sample",
    "image_extension",
    "image_failures",
    "image_size",
    "normalize_image_extension",
    "register",
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
