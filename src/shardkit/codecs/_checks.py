"""Cheap validation of fields other than images, found by extension through one table.

Each check reads what it must to say that a field is whole and of its kind, never decoding
it all: UTF-8 text, JSON, npy headers, audio (soundfile) and video (PyAV) containers. A bad
field raises :class:`~shardkit.errors.DataError` whose message is the reason; a missing
extra (``audio``, ``video``) is a :class:`~shardkit.errors.MissingDependencyError`. Images
have their own checks (:func:`shardkit.builder._validate.check_image`).
"""

from __future__ import annotations

from collections.abc import Callable

from ._audio import AUDIO_EXTENSIONS, check_audio
from ._images import last_component
from ._text import check_json, check_npy, check_text
from ._video import VIDEO_EXTENSIONS, check_video

__all__ = ["FIELD_CHECKS", "check_field", "field_check"]

FieldCheck = Callable[[bytes, str], None]


def _text(data: bytes, ext: str) -> None:
    check_text(data)


def _json(data: bytes, ext: str) -> None:
    check_json(data)


def _npy(data: bytes, ext: str) -> None:
    check_npy(data)


#: extension -> check(data, ext): raises DataError naming what is wrong.
FIELD_CHECKS: dict[str, FieldCheck] = {
    **dict.fromkeys(("txt", "text", "transcript"), _text),
    **dict.fromkeys(("json", "jsn"), _json),
    "npy": _npy,
    **dict.fromkeys(AUDIO_EXTENSIONS, check_audio),
    **dict.fromkeys(VIDEO_EXTENSIONS, check_video),
}


def field_check(ext: str) -> FieldCheck | None:
    """The check for a field named ``*.ext`` (by its last component), or None."""
    return FIELD_CHECKS.get(last_component(ext))


def check_field(data: bytes, ext: str) -> None:
    """Check ``data`` as a field of extension ``ext``; fields with no check pass."""
    check = field_check(ext)
    if check is not None:
        check(data, last_component(ext))
