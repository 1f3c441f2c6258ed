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

:func:`sample_fields` reads them; :func:`~.validate.check_fields` checks them as it checks a
folder's sample of several files (images by :func:`~.validate.check_image`, re-encoded as
the options say; the others by :func:`shardkit.codecs.check_field`; an extension of ``""``
learnt from the bytes). A bad field is a :class:`~shardkit.errors.DataError` naming it
(``field 'flac': ...``): the row is skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..codecs import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from ..errors import DataError
from ._validate import Blame

__all__ = ["MEDIA_EXTENSIONS", "is_media", "sample_fields"]

#: Extensions whose column names a file or URL (or holds the bytes, in parquet).
MEDIA_EXTENSIONS = frozenset(
    IMAGE_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS | {"jpeg", "tif"}
)

Field = tuple[str, str, str, int]


def is_media(ext: str) -> bool:
    """Whether a field named ``*.ext`` holds a media file (image, audio, video)."""
    return ext.rpartition(".")[2].lower() in MEDIA_EXTENSIONS


def sample_fields(
    source: Any, item: Any, loaded: bytes | Mapping[str, bytes]
) -> Iterator[tuple[str, bytes, Blame]]:
    """The (ext, bytes, blame) of each field of ``item``, unchecked, for
    :func:`~.validate.check_fields`; ``loaded``: what ``source`` loaded for it (the main
    file's bytes, or a parquet row's bytes cells). A field that cannot be read raises
    :class:`~shardkit.errors.DataError` naming it."""
    for ext, kind, value, size in item.fields:
        blame = Blame(field=ext or value)
        if kind == "text":
            yield ext, value.encode("utf-8", "surrogateescape"), blame
            continue
        try:
            data = _bytes(source, item, loaded, kind, value, size)
        except DataError as exc:
            raise blame.error(exc) from exc
        yield ext, data, blame


def _bytes(
    source: Any, item: Any, loaded: bytes | Mapping[str, bytes], kind: str, value: str, size: int
) -> bytes:
    if kind == "main" and isinstance(loaded, bytes):
        return loaded
    if kind == "cell" and isinstance(loaded, Mapping):
        if value not in loaded:
            raise DataError(f"column {value!r}: no bytes in the cell")
        return loaded[value]
    files = getattr(source, "files", source)  # a parquet source reads files through its own
    data: bytes = files.load(item._replace(ref=value, size=size))
    return data
