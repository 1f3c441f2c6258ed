"""The JSON document loader: every JSON document shardkit reads goes through
:func:`load_json`, over the one parse :func:`shardkit.codecs.parse_json` (manifests,
``.idx`` files, the build journal, list rows, ``json`` fields shown or converted).

A document is untrusted: its size is bounded (the budget's ``document`` limit,
:data:`~shardkit.formats.limits.MAX_DOCUMENT_SIZE` by default) before it is parsed, and its
nesting (``json_depth``, :data:`~shardkit.formats.limits.MAX_JSON_DEPTH`) after:
a document nested 200,000 deep is one clear error line, never a ``RecursionError``, and
whatever walks a document afterwards (re-encoding names, comparing options) stays far from
the interpreter's recursion limit.
"""

from __future__ import annotations

from typing import Any

from ..budget import allow, limit
from ..codecs import parse_json
from ..errors import FormatError, ShardkitError

__all__ = ["load_json"]


def load_json(
    data: bytes | bytearray | memoryview | str,
    *,
    url: str | None = None,
    what: str = "JSON document",
    error: type[ShardkitError] = FormatError,
    max_size: int | None = None,
    max_depth: int | None = None,
) -> Any:
    """``data`` parsed as JSON, bounded in size and depth (``max_size`` and ``max_depth``,
    by default the budget's ``document`` and ``json_depth`` limits); ``error`` (a
    FormatError by default, always a ValueError for the standard ones) naming ``url`` and
    ``what`` when it is not valid JSON or is over a bound."""
    if max_size is None:
        allow("document", len(data), what=what, error=error, url=url)
    elif len(data) > max_size:
        raise error(f"{what} is {len(data)} bytes, over the {max_size}-byte limit", url=url)
    if max_depth is None:
        max_depth = limit("json_depth")
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        document = parse_json(data, max_depth)
    except RecursionError:
        raise error(f"{what} is nested more than {max_depth} levels deep", url=url) from None
    except ValueError as exc:  # UnicodeDecodeError too
        raise error(f"{what} is not valid JSON: {_short(exc)}", url=url) from None
    return document


def _short(exc: ValueError) -> str:
    """The parser's message, bounded (one line)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
