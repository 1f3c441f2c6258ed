"""``tf.train.Example`` encoding and decoding without TensorFlow or protobuf.

The wire format is the protobuf schema TensorFlow uses::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                             Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

:func:`encode_example` writes features sorted by name (UTF-8 byte order, as C++ protobuf's
deterministic serialization orders map keys), floats packed as little-endian float32 and
int64 values as packed varints. The same features always give the same bytes, those of
``tf.train.Example.SerializeToString(deterministic=True)``, except that TensorFlow's Python
protobuf runtime (upb) writes a name before its prefixes (``"ab"`` before ``"a"``).

:func:`decode_example` accepts what protobuf accepts for this schema: packed or unpacked
numbers, unknown fields (groups included), fields in any order, non-minimal varints.
Repeated fields follow protobuf's merge rules: the last entry for a feature name wins;
within a ``Feature`` the last kind set wins, and repeats of the same kind concatenate.

Mapping between shardkit samples and Examples
---------------------------------------------

Writing (:func:`sample_to_example`):

- ``__key__`` becomes a bytes feature named ``__key__`` (UTF-8); other fields whose names
  start and end with ``__`` (``__url__``, ...) are not written.
- Every other field becomes a feature of the same name, by the type of its value:

  ===================================================  ==============
  value                                                feature
  ===================================================  ==============
  ``bytes``, ``bytearray``, ``memoryview``             bytes_list [v]
  ``str``                                              bytes_list [UTF-8 of v]
  ``int``, ``bool``, numpy integer or bool scalar      int64_list [v]
  ``float``, numpy floating scalar                     float_list [v]
  list/tuple of ints and bools                         int64_list
  list/tuple of numbers with at least one float        float_list
  list/tuple of bytes-like and ``str``                 bytes_list
  empty list/tuple                                     bytes_list []
  numpy array, integer or bool dtype (flattened)       int64_list
  numpy array, floating dtype (flattened)              float_list
  numpy array, ``S``/``U``/object dtype (flattened)    as its list
  ===================================================  ==============

  Integers must fit in int64 and floats in float32 (values round to the nearest float32).
  Anything else (a ``dict``, ``None``, a mixed list, ...) raises :class:`EncodeError`:
  encode such fields to bytes first (for example with the codecs registry).

Reading (:func:`example_to_sample`):

- A feature holding exactly one value becomes that value (``bytes``, ``int`` or
  ``float``); a feature holding zero or several values stays a list.
- ``__key__`` is the ``__key__`` feature decoded as UTF-8 when present (anything but one
  UTF-8 bytes value there is a :class:`FormatError`), else the key the reader supplies (for
  example derived from the shard URL and record index); ``__url__`` is the shard URL when
  known (a feature named ``__url__`` is dropped: it cannot pose as the source).

The round trip is lossy in the obvious places: ``str`` comes back as ``bytes``, float64 as
float32, a one-element list as a scalar, arrays as flat lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shardkit.budget import limit, refuse
from shardkit.errors import EncodeError, FormatError, FormatLimitError

from ._protobuf import FeatureValues, Malformed, TooMany, encode_features, parse_example

__all__ = [
    "FeatureValues",
    "decode_example",
    "encode_example",
    "encode_other_values",
    "example_to_sample",
    "sample_to_example",
]

#: Values :func:`sample_to_example` writes as they are (see the mapping above).
_NATIVE = (bytes, bytearray, memoryview, str, int, float, list, tuple)


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serialize ``features`` as a ``tf.train.Example`` (see the module docs for types).

    Features are written in sorted key order, so the output is deterministic. Raises
    :class:`EncodeError` (a ``TypeError``) naming the feature whose value cannot be encoded.
    """
    for name in features:
        if not isinstance(name, str):
            raise EncodeError(f"feature names must be str, not {type(name).__name__}: {name!r}")
    return encode_features(features)


def decode_example(
    data: bytes | bytearray | memoryview, *, url: str | None = None, offset: int | None = None
) -> dict[str, FeatureValues]:
    """Parse a serialized ``tf.train.Example`` into ``{name: [values]}``.

    Each list holds ``bytes``, ``int`` or ``float`` values (floats are float32 values); a
    feature with no kind set decodes as an empty list. Malformed input raises
    :class:`FormatError` carrying ``url`` and ``offset`` (the record's offset in its shard);
    the message gives the position inside the Example.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    try:
        return parse_example(buf, limit("list_items"))
    except TooMany as exc:
        what = "a tf.train.Example's lists (counted up to past the limit)"
        refuse("list_items", exc.count, what=what, error=FormatLimitError, url=url, offset=offset)
    except Malformed as exc:
        message, pos = exc.message, exc.pos
    except IndexError:
        message, pos = "message ends in the middle of a field", len(buf)
    raise FormatError(
        f"malformed tf.train.Example: {message} (byte {pos} of {len(buf)})",
        url=url,
        offset=offset,
    )


# --------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def sample_to_example(sample: Mapping[str, Any]) -> bytes:
    """Serialize a shardkit sample dict as a ``tf.train.Example`` (see the module docs)."""
    features: dict[str, Any] = {
        name: value for name, value in sample.items() if not _is_dunder(name)
    }
    key = sample.get("__key__")
    if key is not None:
        if not isinstance(key, (str, bytes)):
            raise EncodeError(f"__key__ must be str or bytes, not {type(key).__name__}")
        features["__key__"] = key
    try:
        return encode_example(features)
    except EncodeError as exc:
        if isinstance(key, str) and exc.key is None:
            raise EncodeError(exc.message, key=key) from exc
        raise


def encode_other_values(
    sample: Mapping[str, Any], encode: Callable[[Mapping[str, Any]], Mapping[str, Any]]
) -> dict[str, Any]:
    """``sample`` ready for :func:`sample_to_example`: bytes, str, numbers and lists stay
    as they are (an int becomes an int64 feature), every other value (a dict, an array,
    an image) and every field ending in ``.gz`` is replaced by what ``encode`` (a codecs
    ``encode_sample``) makes of it."""
    other = {
        name: value
        for name, value in sample.items()
        if not _is_dunder(name) and (not isinstance(value, _NATIVE) or name.lower().endswith(".gz"))
    }
    if not other:
        return dict(sample)
    encoded = encode({"__key__": sample.get("__key__"), **other})
    return {**sample, **{name: encoded[name] for name in other}}


def example_to_sample(
    features: Mapping[str, FeatureValues], *, key: str, url: str | None
) -> dict[str, Any]:
    """Turn decoded Example features into a shardkit sample dict (see the module docs)."""
    sample: dict[str, Any] = {"__key__": key}
    for name, values in features.items():
        if name == "__key__":
            sample["__key__"] = _decode_key(values, url=url, key=key)
        elif name == "__url__":
            continue  # the reader says where a sample comes from, not the data
        elif len(values) == 1:
            sample[name] = values[0]
        else:
            sample[name] = values
    if url is not None:
        sample["__url__"] = url
    return sample


def _decode_key(values: FeatureValues, *, url: str | None, key: str) -> str:
    if len(values) == 1 and isinstance(values[0], bytes):
        try:
            return values[0].decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise FormatError("the __key__ feature must hold one UTF-8 bytes value", url=url, key=key)
