"""``show``: print samples readably; and a PNG contact sheet of their pictures.

Each sample prints as its key and where it is, then one line per field: the field name,
its kind (image, audio, video, int, text, json, npy, gzip, bytes; or int/float/list for
TFRecord features), its size and a short preview (image format and size, an audio or
video field's rate and duration from its header, the text, the JSON, the first bytes in
hex), and a label's class name when a manifest names it. Keys, URLs, field names and
previews are printed with every control character escaped (``\\x1b``...), so a hostile
shard cannot drive the terminal. A field in ``fields`` that the first sample lacks is a
ConfigError.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._optional import missing, optional
from ..codecs import NPY_FAILURES, image_extension, image_failures
from ..errors import DataError, MissingDependencyError, escape_controls
from ..formats.jsondoc import load_json
from ..formats.tfschema import LABEL_FIELDS
from ..units import format_size
from ._media import media_info, media_kind
from .tsv import check_spec

__all__ = [
    "FieldInfo",
    "describe_field",
    "describe_sample",
    "format_sample",
    "format_samples",
]

_INT_EXTS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})
_TEXT_EXTS = frozenset({"txt", "text", "transcript"})
_JSON_EXTS = frozenset({"json", "jsn"})


@dataclass(frozen=True)
class FieldInfo:
    """What ``show`` says about one field."""

    name: str
    kind: str
    size: int | None  # bytes of a raw field; None for a decoded TFRecord value
    preview: str


def _clip(text: str, width: int) -> str:
    text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def _image_preview(data: bytes) -> str:
    image = optional("PIL.Image")
    if image is None:
        return f"{len(data)} bytes (to identify images: {missing('PIL', 'show').message})"
    try:
        with image.open(io.BytesIO(data)) as img:
            return f"{img.format} {img.width}x{img.height} {img.mode}"
    except image_failures() as exc:  # a broken image is worth showing, not raising
        return f"not a readable image ({type(exc).__name__})"


def _media_preview(ext: str, data: bytes) -> str:
    """Duration and rate from an audio or video field's header (nothing is decoded)."""
    try:
        info = media_info(ext, data)
    except MissingDependencyError as exc:
        return f"{len(data)} bytes (to read its header: {exc.message})"
    except DataError as exc:  # a broken field is worth showing, not raising
        return f"not readable ({exc.message})"
    if info is None:  # pragma: no cover - media_kind chose the extension
        return ""
    unit = "Hz" if info.kind == "audio" else "fps"
    rate = f"{info.rate:g} {unit}" if info.rate else f"? {unit}"
    return rate + (f", {info.duration:.2f} s" if info.duration is not None else "")


def _npy_preview(data: bytes) -> str:
    try:
        import numpy as np

        stream = io.BytesIO(data)
        fmt = np.lib.format
        version = fmt.read_magic(stream)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(stream)
        return f"array {dtype} {shape}"
    except NPY_FAILURES as exc:  # a malformed header is shown, not raised
        return f"not a .npy array ({type(exc).__name__})"


def _text_preview(data: bytes, width: int) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(ch.isprintable() or ch in "\n\t\r" for ch in text[:200])
    return repr(_clip(text, width)) if printable >= 0.9 * min(len(text), 200) else None


def _bytes_kind(ext: str, data: bytes, width: int) -> tuple[str, str]:
    last = ext.rsplit(".", 1)[-1]
    if last == "gz":
        return "gzip", data[:8].hex(" ")
    if image_extension(ext):
        return "image", _image_preview(data)
    kind = media_kind(ext)
    if kind is not None:
        return kind, _media_preview(ext, data)
    if last in _INT_EXTS:
        return "int", _clip(data.decode("utf-8", "replace").strip(), width)
    if last in _JSON_EXTS:
        try:
            doc = load_json(data)
        except ValueError:
            return "json", "not valid JSON"
        return "json", _clip(json.dumps(doc, separators=(",", ":"), ensure_ascii=False), width)
    if last == "npy":
        return "npy", _npy_preview(data)
    text = _text_preview(data, width)
    if text is not None:
        return "text", text
    return "bytes", data[: min(16, width // 3)].hex(" ") + (" ..." if len(data) > 16 else "")


def describe_field(name: str, value: Any, *, width: int = 60) -> FieldInfo:
    """Kind, size and preview of one field value (raw bytes, or a TFRecord value)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        kind, preview = _bytes_kind(name.lower(), data, width)
        return FieldInfo(name, kind, len(data), preview)
    if isinstance(value, bool | int):
        return FieldInfo(name, "int", None, str(int(value)))
    if isinstance(value, float):
        return FieldInfo(name, "float", None, repr(value))
    if isinstance(value, list):
        return FieldInfo(name, f"list[{len(value)}]", None, _clip(repr(value), width))
    return FieldInfo(name, type(value).__name__, None, _clip(repr(value), width))


def describe_sample(
    sample: Mapping[str, Any], *, fields: Sequence[str] | None = None, width: int = 60
) -> list[FieldInfo]:
    """:class:`FieldInfo` for each field (all, or those named in ``fields``, in that order)."""
    names = [n for n in sample if not (n.startswith("__") and n.endswith("__"))]
    if fields is not None:
        wanted = [f.lower() for f in fields]
        names = [n for n in wanted if n in sample]
    return [describe_field(name, sample[name], width=width) for name in names]


def format_sample(
    sample: Mapping[str, Any],
    *,
    fields: Sequence[str] | None = None,
    width: int = 60,
    class_names: Mapping[str, str] | None = None,
) -> str:
    """A few lines describing one sample (no trailing newline).

    ``class_names`` (label -> name, a manifest's ``class_to_idx``) adds the class name
    after the label (``cls``, or ``image/class/label``): ``3 (cat)``.
    """
    where = sample.get("__url__")
    offset = sample.get("__offset__")
    head = str(sample.get("__key__"))
    if where is not None:
        head += f"  ({where}" + (f" @ {offset})" if offset is not None else ")")
    infos = describe_sample(sample, fields=fields, width=width)
    names = [escape_controls(i.name) for i in infos]
    name_w = max((len(name) for name in names), default=0)
    kind_w = max((len(i.kind) for i in infos), default=0)
    lines = [escape_controls(head)]
    for name, info in zip(names, infos, strict=True):
        size = format_size(info.size) if info.size is not None else ""
        preview = escape_controls(info.preview)
        if class_names and info.name in LABEL_FIELDS and info.preview in class_names:
            preview += f" ({escape_controls(class_names[info.preview])})"
        lines.append(f"  {name:<{name_w}}  {info.kind:<{kind_w}}  {size:>9}  {preview}")
    return "\n".join(lines)


def format_samples(
    samples: Iterable[Mapping[str, Any]],
    *,
    fields: Sequence[str] | None = None,
    width: int = 60,
    class_names: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """:func:`format_sample` for each sample."""
    for index, sample in enumerate(samples):
        if index == 0:
            for name in fields or ():
                check_spec(sample, name, "--fields")
        yield format_sample(sample, fields=fields, width=width, class_names=class_names)
