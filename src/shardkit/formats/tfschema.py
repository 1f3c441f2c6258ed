"""The shardkit TFRecord schema: how a sample with an image and a label becomes an Example.

Every TFRecord shardkit makes from image samples has this layout: ``shardkit build
--format tfrecord`` (from an image folder, a list or tar shards), ``shardkit convert --to
tfrecord``. Decoding, ``show``, ``stats``, ``verify --decode`` and the way back to tar
(``convert``, re-sharding into tar) read it without flags.

=====================  ========  =========================================================
feature                type      holds (from a tar sample: the field it comes from)
=====================  ========  =========================================================
``__key__``            bytes     the sample key, UTF-8
``image/encoded``      bytes     the image file as it is (the first field named by an image
                                 extension alone: ``jpg``, ``png``, ``webp``, ``tif``...)
``image/format``       bytes     its format: ``jpeg``, ``png``, ``webp``, ``tiff``, ...
``image/height``       int64     pixels, from the image header (left out if it is unreadable)
``image/width``        int64     pixels
``image/class/label``  int64     the class index (``cls``, when it is a decimal integer)
``image/class/text``   bytes     the class name (``"class"`` in ``json``)
``image/filename``     bytes     the source file (``"path"`` in ``json``)
any other name         by value  every other field: a tar field as its bytes (``json`` too);
                                 a list column by its value (int -> int64, float -> float,
                                 text -> bytes, a list of numbers -> a list)
=====================  ========  =========================================================

The fixed part parses in ``tf.data`` with one feature spec, whoever wrote the shard::

    spec = {
        "__key__": tf.io.FixedLenFeature([], tf.string),
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }

Back to tar (:func:`to_tar_sample`): ``image/encoded`` becomes the field its format names
(``jpeg`` -> ``jpg``, ``tiff`` -> ``tif``), ``image/class/label`` becomes ``cls`` (ASCII
decimal), ``image/height`` and ``image/width`` are dropped (the image holds them). A
``json`` feature is kept as it is, and then ``image/filename`` and ``image/class/text``
are taken to come from it and dropped; without one they become a ``json`` field
``{"path": ..., "class": ..., "label": ...}`` like the one a tar build writes. Any other
feature maps as :func:`field_bytes` says.

So tar -> TFRecord -> tar returns every field exactly (the order of fields in a sample
aside). To keep that promise, fields that would not come back the same stay bytes features
under their own names: an image under a second spelling (``jpeg``, ``tiff``), a second
image, a ``cls`` that is not the canonical decimal of an int64 (``b" 3"``, ``b"03"``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from ..codecs import IMAGE_EXTENSIONS, IMAGE_FEATURE, image_size, plain_bytes
from ..errors import DataError, EncodeError
from .jsondoc import load_json

__all__ = [
    "FILENAME",
    "FORMAT",
    "HEIGHT",
    "IMAGE",
    "LABEL",
    "LABEL_FIELDS",
    "RESERVED",
    "TEXT",
    "WIDTH",
    "column_feature",
    "field_bytes",
    "image_format",
    "to_example_fields",
    "to_tar_sample",
]

IMAGE = IMAGE_FEATURE
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
LABEL = "image/class/label"
TEXT = "image/class/text"
FILENAME = "image/filename"

#: Feature names the schema owns (a list column may not take one).
RESERVED = frozenset({"__key__", IMAGE, FORMAT, HEIGHT, WIDTH, LABEL, TEXT, FILENAME})

#: Where a sample keeps its integer class label: a tar field, or the schema's feature.
LABEL_FIELDS = ("cls", LABEL)

_TF_FORMAT = {"jpg": "jpeg", "tif": "tiff"}
_FROM_TF_FORMAT = {value: key for key, value in _TF_FORMAT.items()}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def image_format(ext: str) -> str:
    """The ``image/format`` value of an image extension: ``jpg`` -> ``jpeg``, ``png`` -> ``png``."""
    return _TF_FORMAT.get(ext, ext)


def _format_extension(value: Any) -> str | None:
    """The tar extension an ``image/format`` value names, or None if it names none."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        return None
    ext = _FROM_TF_FORMAT.get(value.lower(), value.lower())
    return ext if ext in IMAGE_EXTENSIONS else None


def _canonical_int(value: Any) -> int | None:
    """The int whose ASCII decimal ``value`` is exactly (and that fits int64), else None."""
    if not isinstance(value, bytes) or not 0 < len(value) <= 20:
        return None
    try:
        number = int(value)
    except ValueError:
        return None
    fits = _INT64[0] <= number <= _INT64[1]
    return number if fits and str(number).encode("ascii") == value else None


def _json_object(value: Any) -> dict[str, Any]:
    try:
        doc = load_json(value) if isinstance(value, (bytes, str)) else None
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def to_example_fields(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A tar sample (bytes fields) laid out in the schema, ready for ``sample_to_example``."""
    out = dict(sample)
    image = next((name for name in sample if _moves_as_image(name, sample[name])), None)
    if image is not None:
        data = out.pop(image)
        out[IMAGE] = data
        out[FORMAT] = image_format(image)
        with contextlib.suppress(DataError):
            out[WIDTH], out[HEIGHT] = image_size(data)
    label = _canonical_int(sample.get("cls"))
    if label is not None:
        del out["cls"]
        out[LABEL] = label
    meta = _json_object(sample.get("json"))
    for name, feature in (("path", FILENAME), ("class", TEXT)):
        if isinstance(meta.get(name), str):
            out[feature] = meta[name]
    return out


def _moves_as_image(name: str, value: Any) -> bool:
    return (
        isinstance(value, bytes)
        and name in IMAGE_EXTENSIONS
        and _format_extension(image_format(name)) == name
    )


def to_tar_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A sample read from a TFRecord as tar fields, all bytes (see the module docs).

    Dunder keys other than ``__key__`` are dropped. Raises :class:`EncodeError` for a
    feature no tar field can hold (several binary values).
    """
    rest = dict(sample)
    key = rest.pop("__key__", None)
    out: dict[str, Any] = {"__key__": key}
    ext = _format_extension(rest.get(FORMAT))
    if IMAGE in rest and ext is not None and ext not in rest:
        out[ext] = field_bytes(IMAGE, rest.pop(IMAGE), key)
        for name in (FORMAT, HEIGHT, WIDTH):
            rest.pop(name, None)
    label = rest.pop(LABEL, None)
    if isinstance(label, int) and not isinstance(label, bool) and "cls" not in rest:
        out["cls"] = str(label).encode("ascii")
    elif label is not None:
        rest[LABEL], label = label, None
    path, name = rest.pop(FILENAME, None), rest.pop(TEXT, None)
    if "json" not in rest and (path is not None or name is not None):
        meta = {"path": _text(path), "class": _text(name), "label": label}
        out["json"] = json.dumps({k: v for k, v in meta.items() if v is not None}).encode()
    for field, value in rest.items():
        if not (field.startswith("__") and field.endswith("__")):
            out[field.replace("/", ".")] = field_bytes(field, value, key)
    return out


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def field_bytes(name: str, value: Any, key: object) -> bytes:
    """A feature value as a tar field's bytes.

    bytes stay as they are, str becomes UTF-8, an int (or bool) its ASCII decimal, a float
    its shortest ``repr``, a list a compact JSON array (bytes items as UTF-8 strings).
    """
    data = plain_bytes(value)
    if data is not None:
        return data
    if isinstance(value, (bool, int)):
        return str(int(value)).encode("ascii")
    if isinstance(value, float):
        return repr(value).encode("ascii")
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if isinstance(item, bytes):
                try:
                    item = item.decode("utf-8")
                except UnicodeDecodeError:
                    raise EncodeError(
                        f"field {name!r} holds several binary values: one tar field cannot "
                        "hold them",
                        key=str(key),
                    ) from None
            items.append(item)
        return json.dumps(items, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raise EncodeError(f"field {name!r} is {type(value).__name__}, not bytes", key=str(key))


def column_feature(value: Any) -> Any:
    """The feature value of one list column's value, or None to leave the feature out.

    int and bool -> int64, float -> float, str -> bytes, a list of numbers (or of
    strings) -> that list; None and empty strings are left out; anything else (an object,
    a mixed list) becomes its JSON text.
    """
    if value is None or value == "":
        return None
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, list) and value:
        if all(isinstance(v, (int, float)) for v in value):
            return value
        if all(isinstance(v, str) for v in value):
            return value
    return json.dumps(value, ensure_ascii=False)
