"""The protobuf wire format of ``tf.train.Example``, without protobuf or TensorFlow.

Encoding writes features sorted by name with packed numbers; decoding walks one
immutable buffer and accepts whatever protobuf accepts for the schema (see
:mod:`shardkit.formats.example` for the schema and the rules). Private: the public
functions are in :mod:`shardkit.formats.example`.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Mapping
from typing import Any

from shardkit.errors import EncodeError

__all__ = ["FeatureValues", "Malformed", "TooMany", "encode_features", "parse_example"]

FeatureValues = list[bytes] | list[int] | list[float]
"""The decoded values of one feature."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1
_MAX_TAG = (1 << 32) - 1  # field numbers go up to 2**29 - 1
_MAX_GROUP_DEPTH = 100  # protobuf's default recursion limit
_BIG_ENDIAN = sys.byteorder != "little"
_F32 = struct.Struct("<f")

# Feature.kind field tags (field number << 3 | wire type 2).
_TAG_BYTES = 0x0A
_TAG_FLOAT = 0x12
_TAG_INT64 = 0x1A

# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------

_ONE_BYTE = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    """Encode a non-negative int as a protobuf varint."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_size(value: int) -> int:
    return 1 if value < 0x80 else (value.bit_length() + 6) // 7


class _Payload:
    """The encoded value list of one Feature: its kind tag, parts and total length."""

    __slots__ = ("parts", "size", "tag")

    def __init__(self, tag: int, parts: list[bytes], size: int) -> None:
        self.tag = tag
        self.parts = parts
        self.size = size


def _bytes_payload(values: list[bytes]) -> _Payload:
    parts: list[bytes] = []
    size = 0
    for v in values:
        n = len(v)
        head = b"\x0a" + _varint(n)
        parts.append(head)
        parts.append(v)
        size += len(head) + n
    return _Payload(_TAG_BYTES, parts, size)


def _packed(tag: int, packed: bytes) -> _Payload:
    if not packed:
        return _Payload(tag, [], 0)
    head = b"\x0a" + _varint(len(packed))
    return _Payload(tag, [head, packed], len(head) + len(packed))


def _pack_floats(name: str, values: list[Any]) -> bytes:
    try:
        packed = array("f", values)
    except (TypeError, OverflowError) as exc:
        raise EncodeError(f"feature {name!r}: a value does not fit in float32") from exc
    if math.inf in packed or -math.inf in packed:
        for v in values:  # array() turns overflow into inf silently; struct does not.
            try:
                _F32.pack(v)
            except OverflowError as exc:
                raise EncodeError(f"feature {name!r}: {v!r} does not fit in float32") from exc
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def _pack_ints(name: str, values: list[int]) -> bytes:
    if not values:
        return b""
    lo, hi = min(values), max(values)
    if lo >= 0 and hi < 0x80:
        return bytes(values)
    if lo < _INT64_MIN or hi > _INT64_MAX:
        bad = lo if lo < _INT64_MIN else hi
        raise EncodeError(f"feature {name!r}: {bad} does not fit in int64")
    out = bytearray()
    append = out.append
    for v in values:
        if v < 0:
            v += 1 << 64
        while v > 0x7F:
            append((v & 0x7F) | 0x80)
            v >>= 7
        append(v)
    return bytes(out)


def _kind_of(value: Any) -> str:
    """Classify one scalar: 'b' bytes-like, 'i' integer, 'f' float, '' unsupported."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return "b"
    if isinstance(value, float):
        return "f"
    if isinstance(value, int):
        return "i"
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, (np.integer, np.bool_)):
            return "i"
        if isinstance(value, np.floating):
            return "f"
    return ""


def _as_bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _list_payload(name: str, values: list[Any]) -> _Payload:
    types = {type(v) for v in values}
    if types <= {int, bool}:
        if not values:
            return _Payload(_TAG_BYTES, [], 0)
        return _packed(_TAG_INT64, _pack_ints(name, values))
    elif types <= {float}:
        kind = "f"
    elif types <= {bytes}:
        return _bytes_payload(values)
    else:
        kinds = {_kind_of(v) for v in values}
        if "" in kinds or ("b" in kinds and len(kinds) > 1):
            raise EncodeError(
                f"feature {name!r}: a list must hold only bytes/str or only numbers, "
                f"not {sorted(t.__name__ for t in types)}"
            )
        kind = "f" if "f" in kinds else kinds.pop()
    if kind == "i":
        return _packed(_TAG_INT64, _pack_ints(name, [int(v) for v in values]))
    if kind == "f":
        return _packed(_TAG_FLOAT, _pack_floats(name, values))
    try:
        return _bytes_payload([_as_bytes(v) for v in values])
    except UnicodeEncodeError as exc:
        raise EncodeError(f"feature {name!r}: a str value is not valid UTF-8") from exc


def _array_payload(name: str, value: Any) -> _Payload:
    import numpy as np

    arr = np.asarray(value).reshape(-1)
    if arr.dtype.kind in "iub":
        if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
            raise EncodeError(f"feature {name!r}: {int(arr.max())} does not fit in int64")
        return _packed(_TAG_INT64, _pack_ints(name, arr.astype(np.int64).tolist()))
    if arr.dtype.kind == "f":
        with np.errstate(over="ignore"):
            packed = arr.astype("<f4")
        if np.isinf(packed).any() and not np.array_equal(np.isinf(packed), np.isinf(arr)):
            raise EncodeError(f"feature {name!r}: a value does not fit in float32")
        return _packed(_TAG_FLOAT, packed.tobytes())
    if arr.dtype.kind in "SUO":
        return _list_payload(name, arr.tolist())
    raise EncodeError(f"feature {name!r}: cannot encode a numpy array of dtype {arr.dtype}")


def _feature_payload(name: str, value: Any) -> _Payload:
    kind = type(value)
    if kind is bytes:
        return _bytes_payload([value])
    if kind is int:  # the common scalars first (not bool, which is an int subclass)
        return _packed(_TAG_INT64, _pack_ints(name, [value]))
    if kind is str:
        try:
            return _bytes_payload([value.encode("utf-8")])
        except UnicodeEncodeError as exc:
            raise EncodeError(f"feature {name!r}: a str value is not valid UTF-8") from exc
    if isinstance(value, bytes):
        return _bytes_payload([value])
    if isinstance(value, (list, tuple)):
        return _list_payload(name, list(value))
    if type(value).__module__.partition(".")[0] == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            return _array_payload(name, value)
    if _kind_of(value):
        return _list_payload(name, [value])
    raise EncodeError(f"feature {name!r}: cannot encode a value of type {type(value).__name__}")


def encode_features(features: Mapping[str, Any]) -> bytes:
    """The Example message of ``features`` (str names, already checked), sorted by name."""
    parts: list[bytes] = []
    total = 0
    for name in sorted(features):
        try:
            key = name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EncodeError(f"feature name {name!r} is not valid UTF-8") from exc
        payload = _feature_payload(name, features[name])
        feature_size = 1 + _varint_size(payload.size) + payload.size
        entry_size = 2 + _varint_size(len(key)) + len(key) + _varint_size(feature_size)
        entry_size += feature_size
        head = b"".join(
            (
                b"\x0a",
                _varint(entry_size),
                b"\x0a",
                _varint(len(key)),
                key,
                b"\x12",
                _varint(feature_size),
                _ONE_BYTE[payload.tag],
                _varint(payload.size),
            )
        )
        parts.append(head)
        parts.extend(payload.parts)
        total += len(head) + payload.size
    return b"".join([b"\x0a", _varint(total), *parts])


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------
#
# The decoder walks one immutable ``bytes`` buffer with (pos, end) indices, never slicing
# nested messages. Bounds are checked where a length is read; a varint or fixed-width value
# that runs past the end of its message leaves ``pos > end``, which every loop checks on
# exit, and one that runs past the whole buffer raises IndexError, turned into FormatError.


class Malformed(Exception):
    """Internal: the bytes are not a valid Example; carries the position in the buffer."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


class TooMany(Exception):
    """Internal: the Example's lists hold more values than their budget; ``count`` of them
    are declared so far."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


#: The bytes of a varint that another byte follows (a packed list of N values has N others).
_CONTINUED = bytes(range(0x80, 0x100))
_WINDOW = 1 << 20


def _count_varints(buf: bytes, pos: int, stop: int, most: int) -> int:
    """The varints in ``buf[pos:stop]`` (the bytes that no other byte of one follows),
    counted a window at a time: stops once past ``most``, having copied a window."""
    count = 0
    while pos < stop and count <= most:
        window = buf[pos : min(stop, pos + _WINDOW)]
        count += len(window.translate(None, _CONTINUED))
        pos += len(window)
    return count


def _fits(count: int, room: int) -> None:
    if count > room:
        raise TooMany(count)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise Malformed("varint longer than 10 bytes", pos)


def _read_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a length prefix at ``pos``; return (start, stop) of the delimited bytes."""
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_varint(buf, pos)
    stop = pos + n
    if stop > end:
        raise Malformed(f"length {n} runs past the end of its message", pos)
    return pos, stop


def _skip_field(buf: bytes, pos: int, tag: int) -> int:
    """Skip the value of an unknown field whose tag has been read; return the new pos."""
    wire_type = tag & 7
    if tag >> 3 == 0:
        raise Malformed("field number 0", pos)
    if wire_type == 0:
        return _read_varint(buf, pos)[1]
    if wire_type == 2:
        return _read_length(buf, pos, len(buf))[1]
    if wire_type == 5:
        return pos + 4
    if wire_type == 1:
        return pos + 8
    if wire_type == 3:
        return _skip_group(buf, pos, tag >> 3)
    raise Malformed(f"unexpected wire type {wire_type}", pos)


def _skip_group(buf: bytes, pos: int, number: int) -> int:
    """Skip a (deprecated) group up to its matching end-group tag; return the new pos."""
    open_groups = [number]
    while open_groups:
        tag, pos = _read_tag(buf, pos)
        if tag & 7 == 4:
            if tag >> 3 != open_groups.pop():
                raise Malformed("end-group tag does not match its group", pos)
        elif tag & 7 == 3:
            open_groups.append(tag >> 3)
            if len(open_groups) > _MAX_GROUP_DEPTH or not tag >> 3:
                raise Malformed("bad group nesting", pos)
        else:
            pos = _skip_field(buf, pos, tag)
    return pos


def _read_tag(buf: bytes, pos: int) -> tuple[int, int]:
    tag = buf[pos]
    if tag < 0x80:
        return tag, pos + 1
    tag, end = _read_varint(buf, pos)
    if tag > _MAX_TAG:
        raise Malformed(f"field number {tag >> 3} is out of range", pos)
    return tag, end


# Every parser below handles its own fields with the common case inline: a one-byte tag
# and a one-byte length (values under 128 bytes) need no function call; longer varints go
# through _read_tag / _read_length.


def _past_end(end: int) -> Malformed:
    return Malformed("a field runs past the end of its message", end)


def _parse_bytes_list(buf: bytes, pos: int, end: int, room: int) -> list[bytes]:
    out: list[bytes] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag != 0x0A:
            pos = _skip_field(buf, pos, tag)
            continue
        n = buf[pos]
        if n < 0x80:
            pos += 1
            stop = pos + n
        else:
            pos, stop = _read_length(buf, pos, end)
        out.append(buf[pos:stop])
        pos = stop
        if len(out) > room:
            raise TooMany(len(out))
    if pos != end:
        raise _past_end(end)
    return out


def _unpack_floats(buf: bytes, pos: int, stop: int) -> list[float]:
    if (stop - pos) % 4:
        raise Malformed("packed float list length is not a multiple of 4", pos)
    values = array("f")
    values.frombytes(buf[pos:stop])
    if _BIG_ENDIAN:
        values.byteswap()
    return values.tolist()


def _parse_float_list(buf: bytes, pos: int, end: int, room: int) -> list[float]:
    out: list[float] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag == 0x0A:  # packed
            pos, stop = _read_length(buf, pos, end)
            _fits(len(out) + (stop - pos) // 4, room)
            out += _unpack_floats(buf, pos, stop)
            pos = stop
        elif tag == 0x0D:  # one fixed32 value
            if pos + 4 > end:
                raise _past_end(end)
            out.append(_F32.unpack_from(buf, pos)[0])
            pos += 4
            _fits(len(out), room)
        else:
            pos = _skip_field(buf, pos, tag)
    if pos != end:
        raise _past_end(end)
    return out


def _to_int64(value: int) -> int:
    value &= _UINT64_MASK
    return value - (1 << 64) if value >> 63 else value


def _unpack_ints(buf: bytes, pos: int, stop: int) -> list[int]:
    out: list[int] = []
    append = out.append
    while pos < stop:
        b = buf[pos]
        if b < 0x80:
            append(b)
            pos += 1
        else:
            value, pos = _read_varint(buf, pos)
            append(_to_int64(value))
    if pos != stop:
        raise _past_end(stop)
    return out


def _parse_int64_list(buf: bytes, pos: int, end: int, room: int) -> list[int]:
    out: list[int] = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag == 0x0A:  # packed
            n = buf[pos]
            if n < 0x80:
                pos += 1
                stop = pos + n
                if stop > end:
                    raise _past_end(end)
            else:
                pos, stop = _read_length(buf, pos, end)
            if stop - pos > room - len(out):  # more bytes than room: count the values
                _fits(len(out) + _count_varints(buf, pos, stop, room - len(out)), room)
            chunk = buf[pos:stop]
            if max(chunk, default=0) < 0x80:  # every value is a one-byte varint
                out += chunk
            else:
                out += _unpack_ints(buf, pos, stop)
            pos = stop
        elif tag == 0x08:  # one varint value
            value, pos = _read_varint(buf, pos)
            out.append(_to_int64(value))
            _fits(len(out), room)
        else:
            pos = _skip_field(buf, pos, tag)
    if pos != end:
        raise _past_end(end)
    return out


_LIST_PARSERS: dict[int, Any] = {
    _TAG_BYTES: _parse_bytes_list,
    _TAG_FLOAT: _parse_float_list,
    _TAG_INT64: _parse_int64_list,
}


def _parse_feature(buf: bytes, pos: int, end: int, room: int) -> FeatureValues:
    kind = 0
    values: Any = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        parser = _LIST_PARSERS.get(tag)
        if parser is None:
            pos = _skip_field(buf, pos, tag)
            continue
        n = buf[pos]
        if n < 0x80:
            pos += 1
            stop = pos + n
            if stop > end:
                raise _past_end(end)
        else:
            pos, stop = _read_length(buf, pos, end)
        parsed = parser(buf, pos, stop, room - len(values) if tag == kind else room)
        if tag == kind:  # a repeated message field merges: its lists concatenate
            values += parsed
        else:  # a different member of the oneof replaces the previous one
            kind, values = tag, parsed
        pos = stop
    if pos != end:
        raise _past_end(end)
    return values  # type: ignore[no-any-return]


def _parse_entry(buf: bytes, pos: int, end: int, room: int) -> tuple[str, FeatureValues]:
    name = ""
    values: FeatureValues = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag != 0x0A and tag != 0x12:
            pos = _skip_field(buf, pos, tag)
            continue
        n = buf[pos]
        if n < 0x80:
            pos += 1
            stop = pos + n
            if stop > end:
                raise _past_end(end)
        else:
            pos, stop = _read_length(buf, pos, end)
        if tag == 0x0A:
            try:
                name = buf[pos:stop].decode("utf-8")
            except UnicodeDecodeError:
                raise Malformed("feature name is not valid UTF-8", pos) from None
        else:
            values = _parse_feature(buf, pos, stop, room)
        pos = stop
    if pos != end:
        raise _past_end(end)
    return name, values


def _parse_features(
    buf: bytes, pos: int, end: int, out: dict[str, FeatureValues], room: int
) -> int:
    """Parse a Features message into ``out``; the values it holds (at most ``room``)."""
    held = 0
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _read_tag(buf, pos)
        if tag != 0x0A:
            pos = _skip_field(buf, pos, tag)
            continue
        n = buf[pos]
        if n < 0x80:
            pos += 1
            stop = pos + n
            if stop > end:
                raise _past_end(end)
        else:
            pos, stop = _read_length(buf, pos, end)
        try:
            name, values = _parse_entry(buf, pos, stop, room - held)
        except TooMany as exc:
            raise TooMany(held + exc.count) from None
        held += len(values) - len(out.get(name, ()))  # a repeated name replaces its values
        out[name] = values
        pos = stop
    if pos != end:
        raise _past_end(end)
    return held


def parse_example(buf: bytes, room: int) -> dict[str, FeatureValues]:
    """The features of an Example whose lists hold at most ``room`` values in all
    (:class:`TooMany` past it, before the list over it is made)."""
    out: dict[str, FeatureValues] = {}
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _read_tag(buf, pos)
        if tag == 0x0A:
            pos, stop = _read_length(buf, pos, end)
            held = sum(map(len, out.values()))
            try:
                _parse_features(buf, pos, stop, out, room - held)
            except TooMany as exc:
                raise TooMany(held + exc.count) from None
            pos = stop
        else:
            pos = _skip_field(buf, pos, tag)
    if pos != end:
        raise _past_end(end)
    return out
