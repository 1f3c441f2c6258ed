"""``tsv``: sample fields as a tab-separated table; and the field specs other tools share.

A field spec names what to print for each sample:

* ``__key__``, ``__url__``, ``__offset__``: the sample's key, shard URL, byte offset;
* a field name (``cls``, ``txt``, ``seg.png``): its value, as UTF-8 text;
* a field name followed by a path into its JSON value: ``json.label``, ``json.boxes.0.x``
  (list items by index). The longest prefix that names a field wins.

Cells are escaped as in PostgreSQL's text format (``\\t``, ``\\n``, ``\\r``, ``\\\\``) so
a row is always one line, and every other control character (ESC, NUL, DEL, the C1 set,
bidirectional overrides) as ``\\xHH`` or ``\\uHHHH``, so that printing a table never sends
a terminal an escape sequence; a field that is not UTF-8 shows as ``<N bytes>``; a missing
field or path is an empty cell.

``cls``, the default label spec of ``show --grid`` and ``stats``, also finds the label
of the shardkit TFRecord schema (``image/class/label``); :func:`label_text` turns a label
into its class name when a manifest gives one (``class_to_idx``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO

from ..errors import ConfigError, escape_controls
from ..formats.jsondoc import load_json
from ..storage import Access, StorageOptions
from ._inputs import Inputs, as_refs, iter_samples

__all__ = [
    "cell",
    "check_spec",
    "field_value",
    "label_text",
    "parse_fields",
    "tsv_rows",
    "write_tsv",
]

_MISSING = object()
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
DEFAULT_LABEL = "cls"
"""The default label spec: ``cls``, or the TFRecord schema's ``image/class/label``."""


def parse_fields(text: str | Sequence[str]) -> list[str]:
    """Field specs from ``"cls,json.label"`` (or a list of such strings)."""
    items = [text] if isinstance(text, str) else list(text)
    fields = [part.strip() for item in items for part in item.split(",") if part.strip()]
    if not fields:
        raise ConfigError("give at least one field, e.g. -f __key__,cls,json.label")
    return fields


def _walk(value: Any, path: Sequence[str]) -> Any:
    for step in path:
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif (
            isinstance(value, list)
            and step.lstrip("-").isdigit()
            and -len(value) <= int(step) < len(value)
        ):
            value = value[int(step)]
        else:
            return _MISSING
    return value


def field_value(sample: Mapping[str, Any], spec: str) -> Any:
    """The value ``spec`` names in ``sample`` (see the module docs), or None if missing."""
    if spec in sample:
        return sample[spec]
    lower = spec.lower()
    if lower in sample:
        return sample[lower]
    dot = len(spec)
    while (dot := spec.rfind(".", 0, dot)) > 0:
        name = spec[:dot].lower()
        if name in sample:
            raw = sample[name]
            try:
                doc = load_json(raw) if isinstance(raw, (bytes, str)) else raw
            except ValueError:
                return None
            value = _walk(doc, spec[dot + 1 :].split("."))
            return None if value is _MISSING else value
    return None


def cell(value: Any) -> str:
    """One value as a TSV cell (escaped; see the module docs)."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return f"<{len(value)} bytes>"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    else:
        text = str(value)
    return escape_controls(text.translate(_ESCAPES))


def check_spec(sample: Mapping[str, Any], spec: str, option: str) -> None:
    """Raise ConfigError unless ``spec`` names a field of ``sample`` (its first sample).

    The default label spec is lenient: samples may have no label at all.
    """
    if spec.startswith("__") or (option.endswith("label") and spec == DEFAULT_LABEL):
        return
    names = [n for n in sample if not n.startswith("__")]
    lower = spec.lower()
    if any(lower == n.lower() or lower.startswith(n.lower() + ".") for n in names):
        return
    shown = ", ".join(escape_controls(n) for n in names[:20]) or "none"
    raise ConfigError(f"{option} {spec!r}: no such field (the first sample has: {shown})")


def label_text(sample: Mapping[str, Any], spec: str, names: Mapping[str, str]) -> str:
    """The label ``spec`` names in ``sample`` as a cell; a class name where ``names``
    (label -> class name, from a manifest's ``class_to_idx``) has one."""
    value = field_value(sample, spec)
    if value is None and spec == DEFAULT_LABEL:
        from ..formats.tfschema import LABEL

        value = sample.get(LABEL)
    text = cell(value)
    return names.get(text, text)


def tsv_rows(samples: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> Iterator[list[str]]:
    """One row of cells per sample."""
    for sample in samples:
        yield [cell(field_value(sample, spec)) for spec in fields]


def write_tsv(
    inputs: Inputs,
    fields: str | Sequence[str],
    out: TextIO,
    *,
    header: bool = True,
    count: int | None = None,
    storage_options: Access | StorageOptions | None = None,
) -> int:
    """Write the table for ``inputs`` to ``out``; returns the number of rows."""
    specs = parse_fields(fields)
    refs = as_refs(inputs, Access.of(storage_options))
    if header:
        out.write("\t".join(cell(spec) for spec in specs) + "\n")
    rows = 0
    for row in tsv_rows(iter_samples(refs), specs):
        if count is not None and rows >= count:
            break
        out.write("\t".join(row) + "\n")
        rows += 1
    return rows
