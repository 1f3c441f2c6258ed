"""webdataset's ``.ten`` format (tenbin): a list of arrays in 64-byte aligned chunks.

The byte layout, as ``webdataset/tenbin.py`` writes it on a little-endian host:

* a *chunk* is the 8 magic bytes ``~TenBin~``, its payload length as int64, then the
  payload, zero-padded to a multiple of 64 bytes;
* each array is two chunks: a *header* -- int64 words ``dtype code`` (ASCII such as
  ``f4``, NUL-padded to 8 bytes), ``info`` (ASCII, NUL-padded; we write it empty),
  ``ndim``, then one word per dimension -- and the raw C-order *data*.

webdataset packs integers in native byte order; we always write little-endian, which is
the same bytes on every machine it runs on in practice.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["decode_tenbin", "encode_tenbin"]

_MAGIC = b"~TenBin~"
_ALIGN = 64
_INT64 = struct.Struct("<q")

# dtype name -> tenbin code. uint32 is missing on purpose: webdataset misspells it
# ("unit32") and cannot read it back, so we refuse to write it.
_CODES = {
    "float16": "f2",
    "float32": "f4",
    "float64": "f8",
    "int8": "i1",
    "int16": "i2",
    "int32": "i4",
    "int64": "i8",
    "uint8": "u1",
    "uint16": "u2",
    "uint64": "u8",
}
_READABLE = {code: f"<{code}" for code in (*_CODES.values(), "u4")}


def _pad(n: int) -> int:
    return -n % _ALIGN


def _chunk(payload: bytes) -> bytes:
    return _MAGIC + _INT64.pack(len(payload)) + payload + b"\0" * _pad(len(payload))


def _array_chunks(value: Any) -> bytes:
    import numpy as np

    arr = np.asarray(value)
    code = _CODES.get(arr.dtype.name)
    if code is None:
        raise TypeError(
            f"tenbin cannot hold dtype {arr.dtype}; use one of {', '.join(_CODES)} "
            "(or the npy extension)"
        )
    if arr.ndim >= 10:
        raise ValueError(f"tenbin holds arrays of at most 9 dimensions, not {arr.ndim}")
    arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    words = [_INT64.unpack(code.encode("ascii").ljust(8, b"\0"))[0], 0, arr.ndim, *arr.shape]
    header = struct.pack(f"<{len(words)}q", *words)
    return _chunk(header) + _chunk(arr.tobytes(order="C"))


def encode_tenbin(value: Any) -> bytes:
    """Encode a list (or tuple) of arrays, or a single array, as tenbin bytes."""
    arrays = value if isinstance(value, (list, tuple)) else [value]
    return b"".join(_array_chunks(a) for a in arrays)


def _split_chunks(data: bytes) -> list[memoryview]:
    view = memoryview(data)
    chunks: list[memoryview] = []
    offset = 0
    while offset < len(view):
        if view[offset : offset + 8] != _MAGIC:
            raise ValueError(f"tenbin: no magic bytes at offset {offset}")
        if offset + 16 > len(view):
            raise ValueError(f"tenbin: truncated chunk header at offset {offset}")
        (size,) = _INT64.unpack_from(view, offset + 8)
        start = offset + 16
        if size < 0 or start + size > len(view):
            raise ValueError(f"tenbin: chunk at offset {offset} claims {size} bytes")
        chunks.append(view[start : start + size])
        offset = start + size + _pad(size)
    if len(chunks) % 2:
        raise ValueError("tenbin: an array header has no data chunk")
    return chunks


def _parse_header(header: memoryview) -> tuple[str, tuple[int, ...]]:
    if len(header) < 24 or len(header) % 8:
        raise ValueError(f"tenbin: bad header of {len(header)} bytes")
    code = bytes(header[:8]).rstrip(b"\0").decode("ascii", "replace")
    if code not in _READABLE:
        raise ValueError(f"tenbin: unsupported dtype code {code!r}")
    (ndim,) = _INT64.unpack_from(header, 16)
    if not 0 <= ndim <= (len(header) - 24) // 8:
        raise ValueError(f"tenbin: bad rank {ndim}")
    shape = struct.unpack_from(f"<{ndim}q", header, 24)
    if any(n < 0 for n in shape):
        raise ValueError(f"tenbin: negative dimension in shape {shape}")
    return _READABLE[code], shape


def decode_tenbin(data: bytes) -> list[npt.NDArray[Any]]:
    """Decode tenbin bytes into a list of (writable) arrays."""
    import numpy as np

    chunks = _split_chunks(data)
    arrays: list[np.ndarray[Any, Any]] = []
    for header, payload in zip(chunks[::2], chunks[1::2], strict=True):
        dtype, shape = _parse_header(header)
        count = 1
        for n in shape:
            count *= n
        if count * np.dtype(dtype).itemsize != len(payload):
            raise ValueError(f"tenbin: {len(payload)} data bytes do not fit shape {shape}")
        arr = np.frombuffer(payload, dtype=dtype, count=count).reshape(shape)
        arrays.append(arr.astype(arr.dtype.newbyteorder("="), copy=True))
    return arrays
