"""The one gzip framing of shard files: every ``.tar.gz`` / ``.tfrecord.gz`` shardkit writes.

A fixed header (mtime 0, no file name, XFL 0, OS 255), raw deflate at level 6, each sample
ended by a sync flush, then the trailer (a tar's end-of-archive blocks), the final block and
the gzip footer (CRC-32 and size of the uncompressed stream). The sync flush after each
sample puts every sample on a byte boundary of the compressed file, which is what lets a
writer project the closed file's size exactly before it adds a sample (the size cut) and
makes the bytes depend on the samples alone, never on which entry point wrote them or on
the Python version (``gzip.GzipFile`` has written other header bytes across versions).
"""

from __future__ import annotations

import zlib
from typing import Any

__all__ = ["HEADER", "LEVEL", "Deflate"]

HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
LEVEL = 6


class Deflate:
    """The compressed stream of one shard after :data:`HEADER`: :meth:`sample` per sample,
    :meth:`finish` once. :meth:`project` tries a sample without taking it."""

    def __init__(self) -> None:
        self._comp: Any = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._crc = 0
        self._size = 0

    def sample(self, data: bytes | memoryview) -> bytes:
        """The compressed bytes of one sample (ending on a sync flush)."""
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        out: bytes = self._comp.compress(data) + self._comp.flush(zlib.Z_SYNC_FLUSH)
        return out

    def project(self, data: bytes, trailer: bytes) -> tuple[bytes, int, Any]:
        """(compressed bytes of ``data``, bytes :meth:`finish` would add after them, the
        compressor state after ``data``): nothing is taken until :meth:`take`."""
        comp = self._comp.copy()
        out = comp.compress(data) + comp.flush(zlib.Z_SYNC_FLUSH)
        end = comp.copy()
        final = end.compress(trailer) + end.flush(zlib.Z_FINISH)
        return out, len(final) + 8, comp

    def take(self, data: bytes, comp: Any) -> None:
        """Take ``data`` as :meth:`project` compressed it (into ``comp``)."""
        self._comp = comp
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)

    def finish(self, trailer: bytes) -> bytes:
        """The trailer's compressed bytes, the final block and the gzip footer."""
        self._crc = zlib.crc32(trailer, self._crc)
        self._size += len(trailer)
        end: bytes = self._comp.compress(trailer) + self._comp.flush(zlib.Z_FINISH)
        size = self._size & 0xFFFFFFFF
        return end + self._crc.to_bytes(4, "little") + size.to_bytes(4, "little")
