"""Reading n bytes from a stream that may return short reads, or lie about what follows.

``read(n)`` allocates ``n`` bytes up front on many streams (``BufferedReader``,
``GzipFile``), so a size taken from a header (a tar member, a TFRecord length) is never
passed to it whole: :func:`read_bounded` reads at most 16 MiB in its first call and
1 MiB in later ones, into a BytesIO whose getvalue() returns its own buffer (no second
copy). A size that lies then allocates nothing the stream does not fill.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["read_bounded", "read_exact"]

FIRST_READ = 1 << 24
PIECE = 1 << 20


def read_exact(stream: BinaryIO, n: int) -> bytes:
    """Read ``n`` bytes, looping over short reads; fewer only at the end of the stream."""
    data = stream.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_bounded(read: Callable[[int], bytes], size: int, first: bytes = b"") -> bytes:
    """Read until ``size`` bytes (counting ``first``, already read) or end of stream, in
    bounded pieces (see the module docs)."""
    if not first:
        first = read(min(size, FIRST_READ))
        if len(first) == size or not first:
            return first
    buffer = io.BytesIO()
    buffer.write(first)
    got = len(first)
    while got < size:
        chunk = read(min(size - got, PIECE))
        if not chunk:
            break
        buffer.write(chunk)
        got += len(chunk)
    return buffer.getvalue()
