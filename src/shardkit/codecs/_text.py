"""Cheap validation of value fields: text is UTF-8, JSON parses (to a bounded depth),
an npy header parses and the data it describes is all there."""

from __future__ import annotations

import io
import json
import math
from typing import Any

from ..budget import LIMITS, limit, variable
from ..errors import DataError
from ._failures import NPY_FAILURES, TEXT_FAILURES

__all__ = [
    "MAX_JSON_DEPTH",
    "check_json",
    "check_npy",
    "check_text",
    "nests_within",
    "parse_json",
    "plain_bytes",
]

#: How deeply a ``json`` field may nest arrays and objects by default: the budget's
#: ``json_depth`` limit (``SHARDKIT_MAX_JSON_DEPTH`` changes it), as for a document.
MAX_JSON_DEPTH = LIMITS["json_depth"].default


def plain_bytes(value: Any) -> bytes | None:
    """A field's ``value`` as its bytes where it needs no encoder: bytes as they are,
    bytearray and memoryview copied, str as UTF-8; None for any other value."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return None


def check_text(data: bytes) -> None:
    """DataError unless ``data`` is UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from exc


def parse_json(data: bytes | bytearray | str, max_depth: int | None) -> Any:
    """The one JSON parse: every JSON value shardkit reads (a ``json`` field checked,
    decoded or shown; a document through :func:`shardkit.formats.jsondoc.load_json`, which
    bounds its size and names it) is parsed here. RecursionError when it nests more than
    ``max_depth`` deep (the parser's own stack, or the walk after it; ``None``: the
    parser's stack alone), ValueError (UnicodeDecodeError too) when it is not JSON."""
    value = json.loads(data)
    if max_depth is not None and not nests_within(value, max_depth):
        raise RecursionError(f"nested more than {max_depth} levels deep")
    return value


def check_json(data: bytes) -> None:
    """DataError unless ``data`` is UTF-8 JSON nesting at most the budget's ``json_depth``
    deep (:data:`MAX_JSON_DEPTH` by default)."""
    check_text(data)
    depth = limit("json_depth")
    try:
        parse_json(data, depth)
    except RecursionError:
        raise DataError(
            f"JSON nests deeper than {depth} levels ({variable('json_depth')} raises it)"
        ) from None
    except TEXT_FAILURES as exc:
        raise DataError(f"not JSON: {exc}") from exc


def nests_within(value: Any, limit: int) -> bool:
    """Whether the lists and objects of ``value`` nest at most ``limit`` deep (walked
    without recursion): the one depth rule of parsed JSON, for fields and documents alike."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return True


def check_npy(data: bytes) -> None:
    """DataError unless ``data`` starts with an npy header whose array's bytes all follow."""
    import numpy as np

    fmt = np.lib.format
    stream = io.BytesIO(data)
    try:
        version = fmt.read_magic(stream)
        # 3.0 differs from 2.0 only in allowing UTF-8 field names: its layout reads alike.
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(stream)
    except NPY_FAILURES as exc:
        raise DataError(f"not an npy array: {exc}") from exc
    if dtype.hasobject:
        return  # pickled objects: their size is not in the header
    need = math.prod(shape) * dtype.itemsize
    have = len(data) - stream.tell()
    if need > have:
        raise DataError(f"truncated npy ({have} of {need} data bytes after its header)")
