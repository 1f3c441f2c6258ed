"""The task writer: appends encoded samples to part files with one ``writev`` each.

A worker's hot loop is read file -> check -> write. This writer keeps that loop lean: a
sample is a list of byte chunks (tar headers, data, padding) written by a single
``os.writev`` call straight from the buffers, hashed as it goes, with no join and no
userspace write buffer. Tar headers for short names come from a fixed template (same
bytes as :func:`shardkit.formats.tar.encode_sample`, which remains the reference and the
fallback for long names). A part is written under a temporary name and renamed when
complete; the writer rotates to a new part before ``max_size`` would be passed.

:class:`StreamPartWriter` writes the same parts into an object store instead (one atomic
upload per part, straight from the worker): rotation is decided before each sample is
written, so a part streams out and is never rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence

from ..errors import StorageError
from ..formats import tar
from .store import Pending, Store

__all__ = ["PartWriter", "StreamPartWriter", "tar_chunks"]

_BLOCK = 512
_BIG = 4096  # data larger than this is written from its own buffer, not copied
_ZEROS = bytes(_BLOCK)
# The fixed fields of a ustar header around name (0:100) and size (124:136); the checksum
# field (148:156) counts as eight spaces while summing.
_MID = b"0000444\x000000000\x000000000\x00"
_TAIL = b"00000000000\x00" + b" " * 8 + b"0" + bytes(100) + b"ustar\x0000" + bytes(64)
_TAIL += b"0000000\x000000000\x00" + bytes(155 + 12)
_FIXED_SUM = sum(_MID) + sum(_TAIL)


# One header: name (NUL-padded to 100), size field, checksum field; the rest is fixed.
_TEMPLATE = b"%s" + _MID + b"%s" + _TAIL[:12] + b"%06o\x00 " + _TAIL[20:]


def tar_chunks(key: str, fields: Sequence[tuple[str, bytes]]) -> tuple[list[bytes], int]:
    """The tar members of one sample as chunks to write, and their total size.

    Large data goes out as it is (no copy); headers, padding and small fields are joined
    into as few chunks as possible, to keep ``writev`` and hash calls few.
    """
    chunks: list[bytes] = []
    small: list[bytes] = []
    total = 0
    stem = key.encode("utf-8", "surrogateescape") + b"."
    stem_sum = _FIXED_SUM + sum(stem)
    for ext, data in fields:
        suffix = ext.encode("utf-8", "surrogateescape")
        name = stem + suffix
        size = len(data)
        if len(name) > 100 or size > tar.MAX_MEMBER_SIZE:  # the reference checks limits
            small.append(tar.encode_sample({"__key__": key, ext: data}))
            total += len(small[-1])
            continue
        size_field = b"%011o\x00" % size
        checksum = stem_sum + sum(suffix) + sum(size_field)
        small.append(_TEMPLATE % (name.ljust(100, b"\x00"), size_field, checksum))
        if size > _BIG:
            chunks.append(b"".join(small))
            chunks.append(data)
            small = []
        else:
            small.append(data)
        pad = -size % _BLOCK
        if pad:
            small.append(_ZEROS[:pad])
        total += _BLOCK + size + pad
    if small:
        chunks.append(b"".join(small))
    return chunks, total


class PartWriter:
    """Write one task's samples into part files ``pattern % n`` (n = 0, 1, ...)."""

    def __init__(
        self, pattern: str, *, max_size: int, trailer: bytes = b"", keep_sizes: bool = False
    ) -> None:
        self.pattern = pattern
        self.sizes: list[int] = []  # of every sample, when ``keep_sizes``
        self._keep_sizes = keep_sizes
        self.max_size = max_size
        self.trailer = trailer
        self.parts: list[tuple[str, int, int, str]] = []  # name, samples, bytes, sha256
        self._active = False  # a part is open
        self._fd = -1
        self._tmp = ""
        self._count = 0
        self._size = 0
        self._hash = hashlib.sha256()
        self._last_key: str | None = None

    def add(self, key: str, chunks: list[bytes], size: int) -> None:
        """Append one encoded sample (``chunks`` totalling ``size`` bytes)."""
        tar.check_key_order(self._last_key, key)
        if self._active and self._size + size + len(self.trailer) > self.max_size:
            self._finish()
        if not self._active:
            self._open()
        self._write(chunks)
        self._count += 1
        self._size += size
        self._last_key = key
        if self._keep_sizes:
            self.sizes.append(size)

    def _open(self) -> None:
        final = self.pattern % len(self.parts)
        folder, name = os.path.split(final)
        self._tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}")
        try:
            self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot write: {exc.strerror}", url=self._tmp) from exc
        self._started()

    def _started(self) -> None:
        self._active = True
        self._count = self._size = 0
        self._hash = hashlib.sha256()

    def _write(self, chunks: list[bytes]) -> None:
        update = self._hash.update
        for chunk in chunks:
            update(chunk)
        total = sum(len(c) for c in chunks)
        try:
            written = os.writev(self._fd, chunks)
            if written != total:  # a short write (a signal, a nearly full disk)
                data = b"".join(chunks)[written:]
                while data:
                    data = data[os.write(self._fd, data) :]
        except OSError as exc:
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=self._tmp) from exc

    def _finish(self) -> None:
        if self.trailer:
            self._write([self.trailer])
            self._size += len(self.trailer)
        self._active = False
        name = self._commit()
        self.parts.append((name, self._count, self._size, self._hash.hexdigest()))

    def _commit(self) -> str:
        """Make the open part visible under its name; returns that name."""
        os.close(self._fd)
        self._fd = -1
        final = self.pattern % len(self.parts)
        os.replace(self._tmp, final)
        return os.path.basename(final)

    def close(self) -> list[tuple[str, int, int, str]]:
        """Commit the last part; returns (name, samples, bytes, sha256) of every part."""
        if self._active:
            self._finish()
        return self.parts

    def abort(self) -> None:
        """Discard the part in progress."""
        if self._active:
            self._active = False
            self._discard()

    def _discard(self) -> None:
        os.close(self._fd)
        self._fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)


class StreamPartWriter(PartWriter):
    """A :class:`PartWriter` whose parts are uploads to ``store`` (``pattern`` is a name)."""

    def __init__(
        self,
        store: Store,
        pattern: str,
        *,
        max_size: int,
        trailer: bytes = b"",
        keep_sizes: bool = False,
    ) -> None:
        super().__init__(pattern, max_size=max_size, trailer=trailer, keep_sizes=keep_sizes)
        self._store = store
        self._pending: Pending | None = None

    def _open(self) -> None:
        self._pending = self._store.create(self.pattern % len(self.parts))
        self._started()

    def _write(self, chunks: list[bytes]) -> None:
        pending = self._pending
        if pending is None:
            raise ValueError("no part is open")
        update = self._hash.update
        for chunk in chunks:
            update(chunk)
            pending.write(chunk)

    def _commit(self) -> str:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.commit()
        return self.pattern % len(self.parts)

    def _discard(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.discard()
