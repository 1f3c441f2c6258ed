"""Built-in encoders and decoders for the non-image extensions webdataset knows.

Every encoder here is deterministic: the same value gives the same bytes, on any run.
numpy, torch, msgpack and cbor2 are imported inside the functions that use them.
"""

from __future__ import annotations

import io
import json
import math
import operator
import pickle
import zlib
from collections.abc import Mapping
from typing import IO, Any

from .._optional import require
from ..budget import LIMITS, allow
from ..errors import DecodeLimitError, ShardkitError
from ._failures import NPY_FAILURES, TEXT_FAILURES, undecodable
from ._text import parse_json

__all__ = [
    "MAX_EXPANDED_SIZE",
    "PICKLE_PROTOCOL",
    "check_zip_size",
    "decode_cbor",
    "decode_int",
    "decode_json",
    "decode_msgpack",
    "decode_npy",
    "decode_npy_trusted",
    "decode_npz",
    "decode_npz_trusted",
    "decode_text",
    "decode_torch",
    "decode_torch_trusted",
    "encode_cbor",
    "encode_int",
    "encode_json",
    "encode_msgpack",
    "encode_npy",
    "encode_npz",
    "encode_pickle",
    "encode_torch",
    "gzip_bytes",
    "unpickle",
]

#: Protocol 4 reads on every Python >= 3.4 and, unlike ``pickle.DEFAULT_PROTOCOL``, does
#: not change with the Python version, so the bytes stay the same.
PICKLE_PROTOCOL = 4

# Fixed zip member timestamp for npz (numpy's own savez stamps the current time).
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"

#: The default of the most bytes a compressed field may expand to when decoded: a ``.gz``
#: field (see :class:`~shardkit.codecs.Decoder`), or the members of an npz or
#: ``torch.save`` zip. The budget's ``expanded`` limit (``SHARDKIT_MAX_EXPANDED`` changes it).
MAX_EXPANDED_SIZE = LIMITS["expanded"].default


# -- int, text, json ---------------------------------------------------------------


def encode_int(value: Any) -> bytes:
    if isinstance(value, bool):
        raise TypeError("a bool is not a class index; pass an int")
    return str(operator.index(value)).encode("ascii")


def decode_int(data: bytes) -> int:
    try:
        return int(data)
    except TEXT_FAILURES as exc:
        raise undecodable(exc) from exc


def decode_text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except TEXT_FAILURES as exc:
        raise undecodable(exc) from exc


def encode_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_json(data: bytes) -> Any:
    try:
        return parse_json(data, None)  # as webdataset reads it: any depth the parser takes
    except TEXT_FAILURES as exc:
        raise undecodable(exc) from exc


# -- gzip ----------------------------------------------------------------------------

#: A fixed gzip header (no mtime, no name, OS "unknown"): the same data always gives the
#: same bytes, whatever the Python version (``gzip.compress`` has written other OS bytes).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


def gzip_bytes(data: bytes) -> bytes:
    """``data`` as one gzip member, deterministically (level 9, as webdataset's)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(data) + deflate.flush()
    trailer = zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    return _GZIP_HEADER + body + trailer


# -- pickle and torch ----------------------------------------------------------------


def encode_pickle(value: Any) -> bytes:
    return bytes(_pickled(pickle.dumps, value, protocol=PICKLE_PROTOCOL))


def _pickled(dump: Any, value: Any, *args: Any, **options: Any) -> Any:
    """``dump(value, ...)`` of a pickler; what it refuses (a lambda, a local class: a
    PicklingError or an AttributeError) is a TypeError: a value that cannot be encoded."""
    try:
        return dump(value, *args, **options)
    except (pickle.PicklingError, AttributeError) as exc:
        raise TypeError(f"cannot pickle it: {exc}") from exc


def unpickle(data: bytes) -> Any:
    return _unpickled(pickle.loads, data)


def _unpickled(load: Any, data: Any, **options: Any) -> Any:
    """``load(data)`` of an unpickler: a VM run on the data, so whatever it raises
    (IndexError, KeyError, OverflowError, MemoryError, ...) says the data is bad."""
    try:
        return load(data, **options)
    except Exception as exc:
        raise undecodable(exc) from exc


def encode_torch(value: Any) -> bytes:
    require("torch", "a .pth field")
    import torch

    buffer = io.BytesIO()
    _pickled(torch.save, value, buffer)
    return buffer.getvalue()


def decode_torch(data: bytes) -> Any:
    """``torch.load`` limited to tensors and plain containers (``weights_only=True``)."""
    require("torch", "a .pth field")
    import torch

    _checked_zip(data)
    return _unpickled(torch.load, io.BytesIO(data), map_location="cpu", weights_only=True)


def decode_torch_trusted(data: bytes) -> Any:
    require("torch", "a .pth field")
    import torch

    _checked_zip(data)
    return _unpickled(torch.load, io.BytesIO(data), map_location="cpu", weights_only=False)


def _checked_zip(data: bytes) -> None:
    try:
        check_zip_size(data)
    except ShardkitError:
        raise
    except ValueError as exc:
        raise undecodable(exc) from exc


# -- archives that expand ------------------------------------------------------------


def check_zip_size(data: bytes, limit: int | None = None) -> None:
    """Refuse a zip archive (npz, torch.save) whose members declare over ``limit`` bytes
    (a ValueError), or, without ``limit``, over the budget's ``expanded`` limit (a
    :class:`~shardkit.errors.DecodeLimitError`).

    Both numpy and torch allocate what a member declares, and a deflated member of zeros
    declares 1000 times its size. Readers never return more than the declared size, so
    checking the central directory bounds the memory. Data that is not a zip passes.
    """
    if not data.startswith(_ZIP_MAGIC):
        return
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError):
        return  # the decoder will say what is wrong with it
    if limit is None:
        what = "the members of a zip archive (npz, torch.save)"
        allow("expanded", total, what=what, error=DecodeLimitError)
    elif total > limit:
        raise ValueError(
            f"zip archive members declare {total} bytes, over the {limit}-byte limit "
            "(a decompression bomb?)"
        )


# -- numpy ---------------------------------------------------------------------------


def _array(value: Any) -> Any:
    import numpy as np

    arr = np.asarray(value)
    if arr.dtype.hasobject:
        raise TypeError("object arrays need pickle; convert to a numeric dtype or use 'pyd'")
    return arr


def encode_npy(value: Any) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, _array(value), allow_pickle=False)
    return buffer.getvalue()


def _read_npy(stream: IO[bytes], size: int, allow_pickle: bool) -> Any:
    """``read_array`` once the header's shape is known to fit in the ``size`` bytes.

    ``read_array`` allocates the array the header describes before reading its data;
    a few bytes claiming a shape of 10**12 must fail here, not there.
    """
    import numpy as np

    fmt = np.lib.format
    version = fmt.read_magic(stream)
    if version in ((1, 0), (2, 0)):
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read_header(stream)
        need = math.prod(shape) * dtype.itemsize
        have = size - stream.tell()
        if not dtype.hasobject and need > have:
            raise ValueError(f"npy header claims {need} bytes of data but {have} follow")
    stream.seek(0)
    return fmt.read_array(stream, allow_pickle=allow_pickle)


def _load_npy(data: bytes, allow_pickle: bool) -> Any:
    try:
        return _read_npy(io.BytesIO(data), len(data), allow_pickle)
    except NPY_FAILURES as exc:
        raise undecodable(exc) from exc


def decode_npy(data: bytes) -> Any:
    return _load_npy(data, allow_pickle=False)


def decode_npy_trusted(data: bytes) -> Any:
    return _load_npy(data, allow_pickle=True)


def encode_npz(value: Any) -> bytes:
    """A dict of arrays as an uncompressed npz (what ``np.savez`` writes), timestamps fixed."""
    import zipfile

    import numpy as np

    if not isinstance(value, Mapping):
        raise TypeError(f"npz takes a dict of arrays, not {type(value).__name__}")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, item in value.items():
            if not isinstance(name, str):
                raise TypeError(f"npz array names must be str, not {type(name).__name__}")
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_EPOCH)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, _array(item), allow_pickle=False)
    return buffer.getvalue()


def _load_npz(data: bytes, allow_pickle: bool) -> dict[str, Any]:
    try:
        return _read_npz(data, allow_pickle)
    except ShardkitError:
        raise
    except NPY_FAILURES as exc:
        raise undecodable(exc) from exc


def _read_npz(data: bytes, allow_pickle: bool) -> dict[str, Any]:
    """What ``np.load`` gives for an npz, each member checked as :func:`_read_npy` does."""
    import zipfile

    check_zip_size(data)
    out: dict[str, Any] = {}
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                name = info.filename.removesuffix(".npy")
                if member.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                    out[name] = archive.read(info)  # not an array: its bytes, as numpy does
                    continue
                member.seek(0)
                out[name] = _read_npy(member, info.file_size, allow_pickle)
    return out


def decode_npz(data: bytes) -> dict[str, Any]:
    return _load_npz(data, allow_pickle=False)


def decode_npz_trusted(data: bytes) -> dict[str, Any]:
    return _load_npz(data, allow_pickle=True)


# -- msgpack and cbor ----------------------------------------------------------------


def encode_msgpack(value: Any) -> bytes:
    require("msgpack", "a .msgpack field")
    import msgpack

    return bytes(msgpack.packb(value, use_bin_type=True))


def decode_msgpack(data: bytes) -> Any:
    require("msgpack", "a .msgpack field")
    import msgpack

    try:
        return msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError, msgpack.exceptions.UnpackException) as exc:  # TypeError: [] key
        raise undecodable(exc) from exc


def encode_cbor(value: Any) -> bytes:
    require("cbor2", "a .cbor field")
    import cbor2

    return bytes(cbor2.dumps(value))


def decode_cbor(data: bytes) -> Any:
    require("cbor2", "a .cbor field")
    import cbor2

    try:
        return cbor2.loads(data)
    except (ValueError, TypeError, cbor2.CBORError) as exc:
        raise undecodable(exc) from exc
