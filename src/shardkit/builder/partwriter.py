"""The task writer: appends encoded samples to part files with one ``writev`` each.

A worker's hot loop is read file -> check -> write. This writer keeps that loop lean: a
sample is a list of byte chunks (tar headers, data, padding) written by a single
``os.writev`` call straight from the buffers, hashed as it goes, with no join and no
userspace write buffer. Tar headers for short names come from a fixed template (same
bytes as :func:`shardkit.formats.tar.encode_sample`, which remains the reference and the
fallback for long names). A part is an atomic file of the output's store (a local file
renamed when complete, or one upload straight from the worker); the writer starts a new
part where the cut rule says, decided before each sample is written, so a part streams
out and is never rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..formats import tar
from ..formats.cut import Cut
from .store import Pending, Store

__all__ = ["PartWriter", "tar_chunks"]

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
    """Write one task's samples into parts ``pattern % n`` (n = 0, 1, ...) of ``store``,
    starting a new part where ``cut`` says (:class:`~shardkit.formats.cut.Cut`); each part
    ends with ``trailer`` (``cut.trailer`` bytes long)."""

    def __init__(
        self,
        store: Store,
        pattern: str,
        *,
        cut: Cut,
        trailer: bytes = b"",
        keep_sizes: bool = False,
    ) -> None:
        if len(trailer) != cut.trailer:
            raise ValueError(f"a {len(trailer)}-byte trailer, but the cut counts {cut.trailer}")
        self.store = store
        self.pattern = pattern
        self.cut = cut
        self.trailer = trailer
        self.sizes: list[int] = []  # of every sample, when ``keep_sizes``
        self._keep_sizes = keep_sizes
        self.parts: list[tuple[str, int, int, str]] = []  # name, samples, bytes, digest
        self._file: Pending | None = None
        self._count = 0
        self._last_key: str | None = None

    def add(self, key: str, chunks: list[bytes], size: int) -> None:
        """Append one encoded sample (``chunks`` totalling ``size`` bytes)."""
        tar.check_key_order(self._last_key, key)
        file = self._file
        if file is not None and self.cut.full(self._count, file.size, size):
            self._finish(file)
            file = None
        if file is None:
            file = self._file = self.store.create(self.pattern % len(self.parts))
            self._count = 0
        file.writev(chunks)
        self._count += 1
        self._last_key = key
        if self._keep_sizes:
            self.sizes.append(size)

    def _finish(self, file: Pending) -> None:
        self._file = None
        if self.trailer:
            file.write(self.trailer)
        file.commit()
        name = self.pattern % len(self.parts)
        self.parts.append((name, self._count, file.size, file.digest))

    def close(self) -> list[tuple[str, int, int, str]]:
        """Commit the last part; returns (name, samples, bytes, digest) of every part."""
        if self._file is not None:
            self._finish(self._file)
        return self.parts

    def abort(self) -> None:
        """Discard the part in progress."""
        file, self._file = self._file, None
        if file is not None:
            file.discard()
