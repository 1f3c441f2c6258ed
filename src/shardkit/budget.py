"""The budget: the one checker between a size read from outside and an allocation.

Every length, count or dimension that comes from a file header, an index or a list cell
(a tar header chain, a tf.train.Example's lists, audio frames, video and image pixels, a
JSON document) is handed to :func:`allow` with its kind before anything is allocated, read
or decoded; :func:`empty` is the one way a decoder makes an array whose shape the data
declares. A size over its limit is refused with a :class:`~shardkit.errors.LimitError`
(a data error: ``handler=`` policies see it, the CLI prints one ``Error:`` line) naming
what was refused, the size declared, the limit and the variable that raises it.

The ``member`` default (1 GiB) is ``file_cell``'s: a member is one file of a sample, what
a build packs from a list's bytes cell, so what a build accepts a reader reads back; it
is half the 2 GiB that was allowed before it was a budget (a ``.tar.gz`` of 2 MB then made
each reader hold 2 GiB), and over the few hundred MB of a video clip. A TFRecord record
holds a whole sample and is read at once from a stream, hence its lower 256 MiB.

Each limit is here once, in :data:`LIMITS`; ``SHARDKIT_MAX_<KIND>`` (read by
:func:`shardkit.config.limit_setting`) raises or lowers it for a process, where a
legitimate file can be over it (a 4-hour recording, an 8K clip of 256 frames). Each
variable is read once, at the first check of its kind, so that a check costs a dict lookup
and a compare (it runs per sample); a process that changes them later calls :func:`reset`:

=================  =============  ======================================================
kind               default        what it bounds
=================  =============  ======================================================
``tar_chain``      8 MiB          the extended headers (PAX, GNU long name and link)
                                  before one tar member, all together
``list_items``     16 Mi items    the values of one tf.train.Example, all lists together
``audio``          1 GiB          decoded audio: frames x channels x 4 bytes (float32)
``image_pixels``   178,956,970    an image's or a video frame's width x height (Pillow's
                                  decompression-bomb limit)
``video_clip``     1 GB           a decoded clip: frames x width x height x 3 bytes
``cell``           64 KiB         a list cell of any type (text, list, struct), as its
                                  values' bytes, before it is made into Python values
``file_cell``      1 GiB          a bytes cell of a list (a sample's file in a parquet)
``row``            16 MiB         a line of a JSONL list, read and parsed whole
``record``         256 MiB        a TFRecord record, read whole (a gzip stream inflates
                                  one from a few hundred KB) and written (so what a
                                  writer writes, a reader reads back)
``member``         1 GiB          a tar member, read whole (a ``.tar.gz`` or a remote
                                  stream inflates or sends it; a mapped local shard
                                  copies it with ``copy=True``) and written; refused
                                  from its header, before a byte of it is read
``expanded``       1 GiB          a field once inflated: a ``.gz`` field gunzipped (counted
                                  as it inflates), the members an npz or ``torch.save``
                                  zip declares (numpy and torch allocate them)
``document``       512 MiB        a JSON document read whole
``json_depth``     128            the nesting of containers in such a document
=================  =============  ======================================================
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from .config import limit_setting
from .errors import ConfigError, LimitError, ShardkitError
from .units import parse_int, parse_size

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LIMITS", "Limit", "allow", "empty", "limit", "refuse", "reset", "variable"]


class Limit(NamedTuple):
    """One row of :data:`LIMITS`: the default, its unit and what it bounds."""

    default: int
    unit: str  # "bytes", "items", "pixels" or "levels"
    bounds: str


#: kind -> its limit. The one table: a decoder names a kind from here, never a number.
LIMITS: dict[str, Limit] = {
    "tar_chain": Limit(8 << 20, "bytes", "the extended headers before one tar member"),
    "list_items": Limit(1 << 24, "items", "the values of one tf.train.Example's lists"),
    "audio": Limit(1 << 30, "bytes", "decoded audio (frames x channels x 4)"),
    "image_pixels": Limit(178_956_970, "pixels", "an image's or a video frame's pixels"),
    "video_clip": Limit(10**9, "bytes", "a decoded video clip (frames x pixels x 3)"),
    "cell": Limit(1 << 16, "bytes", "a list cell's values"),
    "row": Limit(16 << 20, "bytes", "a row of a JSONL list (a line)"),
    "record": Limit(256 << 20, "bytes", "a TFRecord record held whole"),
    "member": Limit(1 << 30, "bytes", "a tar member held whole"),
    "expanded": Limit(1 << 30, "bytes", "a field's bytes once inflated (.gz, npz, .pth)"),
    "file_cell": Limit(1 << 30, "bytes", "a bytes cell of a list (a sample's file)"),
    "document": Limit(512 << 20, "bytes", "a JSON document read whole"),
    "json_depth": Limit(128, "levels", "the nesting of a JSON document"),
}


#: kind -> the limit in force, read from the environment at the first check of that kind.
_bounds: dict[str, int] = {}


def reset() -> None:
    """Forget the limits read from ``SHARDKIT_MAX_<KIND>``: the next check of each kind
    reads its variable again (for a process that sets them after a check: tests)."""
    _bounds.clear()


def _row(kind: str) -> Limit:
    try:
        return LIMITS[kind]
    except KeyError:
        raise ValueError(f"no budget kind {kind!r}; the kinds are {sorted(LIMITS)}") from None


def variable(kind: str) -> str:
    """The environment variable that sets ``kind``'s limit."""
    return f"SHARDKIT_MAX_{kind.upper()}"


def limit(kind: str) -> int:
    """The limit in force for ``kind``: ``SHARDKIT_MAX_<KIND>`` where it is set (a size
    such as ``2GiB`` for bytes, an integer otherwise), else the default of :data:`LIMITS`;
    read once (see :func:`reset`)."""
    bound = _bounds.get(kind)
    if bound is None:
        bound = _bounds[kind] = _read(kind)
    return bound


def _read(kind: str) -> int:
    row = _row(kind)
    text = limit_setting(kind)
    if text is None:
        return row.default
    name = variable(kind)
    if row.unit == "bytes":
        return parse_size(text, name=name)
    try:
        return parse_int(text, name)
    except ConfigError:
        raise ConfigError(f"{name}={text!r}: not a count of {row.unit} >= 1") from None


def allow(
    kind: str,
    n: int,
    *,
    what: str,
    error: type[ShardkitError] = LimitError,
    url: str | None = None,
    key: str | None = None,
    offset: int | None = None,
) -> int:
    """``n`` (a size, count or dimension product the data declares for ``what``) if it
    is within ``kind``'s limit; else ``error`` naming ``what``, ``n`` and the limit: a
    :class:`~shardkit.errors.LimitError` (or one of its subclasses) for data, another
    ShardkitError where the whole input is refused (a build's list: a BuildError)."""
    bound = _bounds.get(kind) or limit(kind)
    if 0 <= n <= bound:
        return n
    refuse(kind, n, what=what, error=error, url=url, key=key, offset=offset)


def refuse(
    kind: str,
    n: int,
    *,
    what: str,
    error: type[ShardkitError] = LimitError,
    url: str | None = None,
    key: str | None = None,
    offset: int | None = None,
) -> NoReturn:
    """Raise ``error``: ``what`` declares ``n``, over ``kind``'s limit (for a decoder that
    counts as it goes and stops at the limit, as the tf.train.Example parser does)."""
    row, bound = _row(kind), limit(kind)
    raise error(
        f"{what}: {n:,} {row.unit} declared, over the limit of {bound:,} {row.unit} for "
        f"{row.bounds} ({variable(kind)} raises it)",
        url=url,
        key=key,
        offset=offset,
    )


def empty(
    kind: str,
    shape: tuple[int, ...],
    dtype: Any,
    *,
    what: str,
    error: type[ShardkitError] = LimitError,
) -> np.ndarray[Any, Any]:
    """``numpy.empty(shape, dtype)`` once its bytes are within ``kind``'s limit: the one
    way a decoder makes an array whose shape the data declares."""
    import numpy as np

    itemsize = np.dtype(dtype).itemsize
    allow(kind, math.prod(shape) * itemsize, what=what, error=error)
    return np.empty(shape, dtype)
