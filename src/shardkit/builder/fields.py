"""A sample of several fields: what ``fields`` (``--field EXT=COLUMN``) and a parquet's bytes
columns give a list's items.

An item (:class:`~.sources.Item`) of such a list carries its fields in member order, each
``(ext, kind, value, size)``:

* ``"main"``: the file the item's ``ref`` names, loaded (or downloaded) as an image list's;
* ``"file"``: another path or URL of the row (``value``; ``size`` its listed bytes, 0 when
  unknown), read the same way;
* ``"cell"``: a bytes column of the source's parquet row (``value``: the column), from
  what the source loads, a mapping column -> bytes;
* ``"text"``: the cell itself (``value``), stored as UTF-8.

A media field (image, audio, video: :func:`is_media`) is checked as its kind is (images by
:func:`~.validate.check_image`, the others by :func:`shardkit.codecs.check_field`); an
extension of ``""`` is learnt from the bytes (:func:`sniff_media`). A bad field is a
:class:`~shardkit.errors.DataError` naming it: the row is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..codecs import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, check_field
from ..errors import DataError
from .validate import check_image, sniff

__all__ = ["MEDIA_EXTENSIONS", "check_media", "encode_fields", "is_media", "sniff_media"]

#: Extensions whose column names a file or URL (or holds the bytes, in parquet).
MEDIA_EXTENSIONS = frozenset(
    IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS | {"jpeg", "tif"}
)

Field = tuple[str, str, str, int]


def is_media(ext: str) -> bool:
    """Whether a field named ``*.ext`` holds a media file (image, audio, video)."""
    return ext.rpartition(".")[2].lower() in MEDIA_EXTENSIONS


def sniff_media(data: bytes) -> str | None:
    """The media format ``data`` starts with, as an extension, or None."""
    head = data[:64]
    if image := sniff(head):
        return image
    if head.startswith(b"fLaC"):
        return "flac"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "wav"
    if head.startswith(b"OggS"):
        return "opus" if b"OpusHead" in head else "ogg"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm" if b"webm" in head else "mkv"
    return None


def check_media(data: bytes, ext: str, validate: str) -> str:
    """Check a media field (``ext`` '': any kind its bytes show); returns the extension to
    store it under (an image's, by its content: :func:`~.validate.check_image`)."""
    if not ext:
        ext = sniff_media(data) or ""
    head, dot, last = ext.rpartition(".")
    if not ext or last.lower() in IMAGE_EXTENSIONS | {"jpeg", "tif"}:
        return head + dot + check_image(data, last.lower(), validate)
    if validate != "none":
        if not data:
            raise DataError("empty file")
        check_field(data, ext)
    return ext


def encode_fields(
    source: Any, item: Any, loaded: bytes | Mapping[str, bytes], validate: str
) -> list[tuple[str, bytes]]:
    """The (ext, bytes) of each field of ``item``, checked; ``loaded``: what ``source``
    loaded for it (the main file's bytes, or a parquet row's bytes cells)."""
    out: list[tuple[str, bytes]] = []
    for ext, kind, value, size in item.fields:
        try:
            if kind == "text":
                data = value.encode("utf-8", "surrogateescape")
                if validate != "none":
                    check_field(data, ext)
            else:
                data = _bytes(source, item, loaded, kind, value, size)
                ext = check_media(data, ext, validate)
        except DataError as exc:
            raise DataError(f"field {ext or value!r}: {exc.message}") from exc
        if any(ext == seen for seen, _ in out):
            raise DataError(f"two fields are {ext!r} files: name them with --field")
        out.append((ext, data))
    return out


def _bytes(
    source: Any, item: Any, loaded: bytes | Mapping[str, bytes], kind: str, value: str, size: int
) -> bytes:
    if kind == "main" and isinstance(loaded, bytes):
        return loaded
    if kind == "cell" and isinstance(loaded, Mapping):
        return loaded[value]
    files = getattr(source, "files", source)  # a parquet source reads files through its own
    data: bytes = files.load(item._replace(ref=value, size=size))
    return data
