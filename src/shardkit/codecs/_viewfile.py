"""A read-only, seekable file over a field's bytes, for the media libraries.

PyAV and soundfile read a field through a file object. ``io.BytesIO`` copies what it is
given unless it is ``bytes``: a memoryview of a memory-mapped shard (``copy=False``)
would become a second copy of the whole field (hundreds of MB for a long video) before
the first frame is read. :class:`ViewFile` reads the field where it lies: each read
copies only the bytes it returns (PyAV asks for 32 KiB at a time; soundfile reads into
its own buffer).
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["ViewFile"]

Field = bytes | bytearray | memoryview


class ViewFile(io.RawIOBase):
    """A read-only binary file over ``data`` (bytes or any buffer), without copying it."""

    def __init__(self, data: Field) -> None:
        super().__init__()
        view = memoryview(data)
        self._view = view if view.format == "B" and view.ndim == 1 else view.cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            position = offset
        elif whence == io.SEEK_CUR:
            position = self._pos + offset
        elif whence == io.SEEK_END:
            position = len(self._view) + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._pos = position
        return position

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._view) if size is None or size < 0 else self._pos + size
        chunk = bytes(self._view[self._pos : end])
        self._pos += len(chunk)
        return chunk

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` (bytes-like, one byte per item: what soundfile and
        ``io.BufferedReader`` pass) from the current position."""
        position = self._pos
        chunk = self._view[position : position + len(buffer)]
        size = len(chunk)
        buffer[:size] = chunk
        self._pos = position + size
        return size

    def close(self) -> None:
        view = getattr(self, "_view", None)  # None: __init__ was given no buffer
        if view is not None:
            view.release()  # the mapping behind a copy=False field may close after it
        super().close()
