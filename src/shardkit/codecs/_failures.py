"""What the decoding libraries raise for bytes they cannot decode, and nothing else.

Each decoder catches its own library's error types around that library's call only and
raises :class:`~shardkit.errors.DecodeError`, the data error that ``handler=`` policies
see. Anything else (a ``NameError`` in a user's callable, a missing module) is not bad
data and propagates as it is.
"""

from __future__ import annotations

import functools
import pickle
import struct
import tokenize
import zipfile
import zlib

from .._optional import optional
from ..errors import DecodeError

__all__ = [
    "DECODE_FAILURES",
    "ENCODE_FAILURES",
    "GUNZIP_FAILURES",
    "NPY_FAILURES",
    "TEXT_FAILURES",
    "image_failures",
    "undecodable",
]

#: What a decoder a user registers (and any library that follows Python's conventions)
#: raises for bytes it cannot decode.
DECODE_FAILURES: tuple[type[Exception], ...] = (ValueError, EOFError, OSError)

#: What an encoder raises for a value it cannot encode: TypeError (json's "not JSON
#: serializable", a bool as a class index, an unpicklable object), ValueError (a float
#: image outside [0, 1], a circular structure), OverflowError (an int too big for msgpack),
#: OSError (Pillow cannot save that mode in that format).
ENCODE_FAILURES: tuple[type[Exception], ...] = (TypeError, ValueError, OverflowError, OSError)

#: ``int()``, ``bytes.decode`` and ``json.loads``: ValueError (UnicodeDecodeError and
#: JSONDecodeError are ValueErrors); json recurses on nesting.
TEXT_FAILURES: tuple[type[Exception], ...] = (ValueError, RecursionError)

#: zlib through :func:`~shardkit.codecs._decoder.gunzip`.
GUNZIP_FAILURES: tuple[type[Exception], ...] = (ValueError, EOFError, zlib.error)

#: numpy's npy/npz readers: the header is a Python literal (ast + tokenize), the npz a zip.
NPY_FAILURES: tuple[type[Exception], ...] = (
    ValueError,
    EOFError,
    OSError,
    SyntaxError,
    TypeError,
    OverflowError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    NotImplementedError,  # zipfile: "zip file version ..."
    zlib.error,
    pickle.UnpicklingError,
)


@functools.cache
def image_failures() -> tuple[type[Exception], ...]:
    """What Pillow and simplejpeg raise on a broken image: OSError (UnidentifiedImageError),
    ValueError, EOFError, struct.error, zlib.error, SyntaxError from a format plugin's
    parser, and Pillow's ``DecompressionBombError`` (when Pillow is installed); also
    Pillow's warnings about the data (``Truncated File Read``) where warnings are errors."""
    failures = (OSError, ValueError, EOFError, SyntaxError, struct.error, zlib.error, Warning)
    pil = optional("PIL.Image")
    if pil is None:
        return failures
    bomb: type[Exception] = pil.DecompressionBombError
    return (*failures, bomb)


def undecodable(exc: BaseException) -> DecodeError:
    """The DecodeError for a library error (chain it: ``raise undecodable(exc) from exc``)."""
    return DecodeError(f"{type(exc).__name__}: {exc}")
