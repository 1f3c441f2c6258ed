"""Token shards: many tokenized documents per tar sample (docs/tokens.md).

A token shard is an ordinary tar shard. Each sample holds a group of documents in two
members: ``KEY.tokens.u16`` (or ``KEY.tokens.u32`` when the vocabulary does not fit in 16
bits), the documents' token ids back to back as a raw little-endian array, and
``KEY.lengths.u32``, each document's token count. So a shard costs its tokens' bytes plus
two tar headers per group: webdataset and every shardkit tool read it as they read any
shard, and :func:`decode_group` turns a sample back into arrays, checked whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import FormatError

__all__ = [
    "LENGTHS",
    "TOKEN_FIELDS",
    "decode_group",
    "encode_group",
    "token_dtype",
]

LENGTHS = "lengths.u32"
#: the tokens member's extension -> its numpy dtype (little-endian)
TOKEN_FIELDS: dict[str, str] = {"tokens.u16": "<u2", "tokens.u32": "<u4"}


def token_dtype(vocab_size: int) -> str:
    """The tokens member's extension for a vocabulary of ``vocab_size`` ids."""
    return "tokens.u16" if vocab_size <= 1 << 16 else "tokens.u32"


def encode_group(documents: Sequence[Sequence[int]], field: str) -> list[tuple[str, bytes]]:
    """The members of one group of ``documents`` (token ids), tokens as ``field``."""
    dtype = np.dtype(TOKEN_FIELDS[field])
    lengths = np.fromiter((len(d) for d in documents), dtype="<u4", count=len(documents))
    tokens = np.fromiter(
        (t for d in documents for t in d), dtype=dtype, count=int(lengths.sum(dtype=np.int64))
    )
    return [(field, tokens.tobytes()), (LENGTHS, lengths.tobytes())]


def decode_group(
    sample: Mapping[str, Any], *, url: str | None = None
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(tokens, lengths) of a token sample, views of its member bytes (no copy).

    FormatError naming ``url`` and the key when it is not a token group: no tokens or no
    lengths member, a member whose size is not whole items, lengths that do not add up
    to the tokens it holds."""
    key = sample.get("__key__")
    fields = [name for name in TOKEN_FIELDS if name in sample]
    if len(fields) != 1 or LENGTHS not in sample:
        raise FormatError(
            f"not a token sample: it needs one of {sorted(TOKEN_FIELDS)} and {LENGTHS}",
            url=url,
            key=key,
        )
    tokens = _array(sample[fields[0]], TOKEN_FIELDS[fields[0]], fields[0], url, key)
    lengths = _array(sample[LENGTHS], "<u4", LENGTHS, url, key)
    total = int(lengths.sum(dtype=np.int64))
    if total != len(tokens):
        raise FormatError(
            f"its lengths add up to {total} tokens, its tokens member holds {len(tokens)}",
            url=url,
            key=key,
        )
    return tokens, lengths


def _array(data: Any, dtype: str, name: str, url: str | None, key: Any) -> np.ndarray[Any, Any]:
    view = memoryview(data).cast("B")
    size = np.dtype(dtype).itemsize
    if len(view) % size:
        raise FormatError(
            f"member {name} holds {len(view)} bytes, not whole {size}-byte items",
            url=url,
            key=key,
        )
    return np.frombuffer(view, dtype=dtype)
