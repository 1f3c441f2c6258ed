"""Megatron-LM's indexed datasets: the ``MMIDIDX`` ``.idx`` file beside its ``.bin``.

The ``.bin`` holds every sequence's token ids back to back; the ``.idx`` says where:
``b"MMIDIDX\\x00\\x00"``, a version (``<Q``, 1), a dtype code (``<B``), the sequence count
and the document count (``<Q`` each), then each sequence's size (``int32``), each
sequence's byte offset in the ``.bin`` (``int64``) and the document boundaries
(``int64``: the first sequence of each document, then the sequence count). Everything in
it is checked before it is used: the counts against the file's size before any array is
made, the offsets against the sizes (sequences back to back, as Megatron writes them),
the boundaries in order, the ``.bin`` long enough (:func:`check_bin_size`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FormatError

__all__ = ["MAGIC", "DTYPES", "MegatronIndex", "check_bin_size", "parse_index"]

MAGIC = b"MMIDIDX\x00\x00"
#: Megatron's dtype codes for integer token ids
DTYPES: dict[int, str] = {1: "<u1", 2: "<i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}
_HEAD = struct.Struct("<QBQQ")


@dataclass(frozen=True)
class MegatronIndex:
    """A checked ``.idx``: the tokens' dtype, and each document's first token (an index
    into the ``.bin`` as an array of that dtype) and token count."""

    dtype: str
    starts: np.ndarray[Any, Any]
    lengths: np.ndarray[Any, Any]

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))

    @property
    def end(self) -> int:
        """The ``.bin`` size, in bytes, that its sequences need."""
        if not len(self.starts):
            return 0
        return int(self.starts[-1] + self.lengths[-1]) * np.dtype(self.dtype).itemsize


def parse_index(buffer: Any, *, url: str | None = None) -> MegatronIndex:
    """Check the ``.idx`` bytes in ``buffer`` (an mmap, bytes) whole; FormatError naming
    ``url`` for anything it does not hold as Megatron writes it."""
    view = memoryview(buffer).cast("B")
    if len(view) < len(MAGIC) + _HEAD.size or bytes(view[: len(MAGIC)]) != MAGIC:
        raise FormatError("not a Megatron .idx file (no MMIDIDX header)", url=url)
    version, code, sequences, documents = _HEAD.unpack_from(view, len(MAGIC))
    if version != 1:
        raise FormatError(f"Megatron .idx version {version}; version 1 is read", url=url)
    if code not in DTYPES:
        raise FormatError(f"Megatron dtype code {code} is not an integer token type", url=url)
    start = len(MAGIC) + _HEAD.size
    need = start + 12 * sequences + 8 * documents  # ints: no overflow, no allocation yet
    if documents < 1 or need > len(view):
        raise FormatError(
            f"its header counts {sequences} sequences and {documents} document boundaries: "
            f"{need} bytes, the file holds {len(view)}",
            url=url,
        )
    sizes = np.frombuffer(view, "<i4", sequences, start)
    pointers = np.frombuffer(view, "<i8", sequences, start + 4 * sequences)
    bounds = np.frombuffer(view, "<i8", documents, start + 12 * sequences)
    itemsize = np.dtype(DTYPES[code]).itemsize
    _check_sequences(sizes, pointers, itemsize, url)
    if bounds[0] != 0 or bounds[-1] != sequences or np.any(np.diff(bounds) < 0):
        raise FormatError(
            "its document boundaries do not run in order from 0 to the sequence count", url=url
        )
    tokens = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    starts = tokens[bounds[:-1]]
    return MegatronIndex(DTYPES[code], starts, tokens[bounds[1:]] - starts)


def _check_sequences(
    sizes: np.ndarray[Any, Any], pointers: np.ndarray[Any, Any], itemsize: int, url: str | None
) -> None:
    if np.any(sizes < 0):
        raise FormatError("a sequence size is negative", url=url)
    expected = np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64) * itemsize))
    if len(sizes) and not np.array_equal(pointers, expected):
        raise FormatError(
            "its sequence offsets are not the sizes back to back from 0 (as Megatron writes them)",
            url=url,
        )


def check_bin_size(index: MegatronIndex, size: int, *, url: str | None = None) -> None:
    """The ``.bin`` of ``size`` bytes holds every sequence ``index`` names."""
    if size < index.end:
        raise FormatError(
            f"the .idx needs {index.end} bytes of tokens, the .bin holds {size}", url=url
        )
