"""The formats' own size rules, for what shardkit reads and writes.

What a reader may hold of a size a file declares is the budget's (:mod:`shardkit.budget`:
a tar member held whole is its ``member`` limit, a TFRecord record its ``record`` limit,
checked from the header before anything is read). What is here is not a budget but a
rule of the formats as shardkit writes them: the writers refuse to write past it, and the
readers refuse what no shardkit writer makes; a member table stores member sizes in 32
bits, a protobuf message is at most 2 GiB.

=====================  =======  ==========================================================
limit                  default  what it bounds
=====================  =======  ==========================================================
``MAX_MEMBER_SIZE``    2 GiB    a tar member a writer writes or a member table holds (the
                                budget's ``member`` limit, 1 GiB, is what readers hold)
``MAX_RECORD_LENGTH``  2 GiB    a TFRecord record (protobuf's own limit on a message)
``MAX_TAR_META_SIZE``  1 MiB    a PAX extended header or GNU long name/link payload
``MAX_NAME_BYTES``     1 MiB-1  a member name (``key.ext``), UTF-8: a GNU long-name payload
                                holds it and a NUL
``MAX_SKIPPED_SIZE``   1 TiB    a non-regular member, streamed past, never held
``MAX_DOCUMENT_SIZE``  512 MiB  a JSON document read whole (manifest, ``.idx``, a state, a
                                ``json`` field, a journal line) (:mod:`.jsondoc`)
``MAX_JSON_DEPTH``     128      the nesting of containers in such a document
=====================  =======  ==========================================================

The last two, the member and record limits of readers, and the limits on what a member or
record declares inside it (a chain of
tar headers, an Example's lists, audio frames, video and image pixels, list cells), are
rows of :data:`shardkit.budget.LIMITS`, the one checker every decoder allocates through.
"""

from __future__ import annotations

from ..budget import LIMITS
from ..errors import ConfigError

__all__ = [
    "MAX_DOCUMENT_SIZE",
    "MAX_JSON_DEPTH",
    "MAX_MEMBER_SIZE",
    "MAX_NAME_BYTES",
    "MAX_RECORD_LENGTH",
    "MAX_SKIPPED_SIZE",
    "MAX_TAR_META_SIZE",
    "check_limit",
]

MAX_MEMBER_SIZE = 2 << 30
"""The largest tar member a writer writes or a member table holds (2 GiB). A reader holds
a member up to the budget's ``member`` limit (``SHARDKIT_MAX_MEMBER``), whatever this is."""

MAX_RECORD_LENGTH = 2 << 30
"""Default ``max_record_length``: the largest TFRecord record read into memory (2 GiB)."""

MAX_TAR_META_SIZE = 1 << 20
"""The largest PAX extended header or GNU long name/link payload (1 MiB)."""

MAX_NAME_BYTES = MAX_TAR_META_SIZE - 1
"""The longest member name a writer may use: its GNU long-name payload (name + NUL) is
within :data:`MAX_TAR_META_SIZE`."""

MAX_SKIPPED_SIZE = 1 << 40
"""The largest non-regular member streamed past (1 TiB): only an absurd size is an error."""

MAX_DOCUMENT_SIZE = LIMITS["document"].default
"""The largest JSON document parsed whole (512 MiB): an index of ten million samples fits.
The budget's ``document`` limit (``SHARDKIT_MAX_DOCUMENT`` changes it)."""

MAX_JSON_DEPTH = LIMITS["json_depth"].default
"""The deepest nesting of lists and objects in a JSON document read (far past any manifest,
index or state; the interpreter's own limit is a RecursionError near 1000). The budget's
``json_depth`` limit (``SHARDKIT_MAX_JSON_DEPTH`` changes it)."""


def check_limit(name: str, value: object) -> int:
    """``value`` as a size limit: an int >= 0 (TypeError / ConfigError otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, not {value}")
    return value
