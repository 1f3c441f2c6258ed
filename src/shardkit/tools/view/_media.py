"""What a field is (by its extension), and the content type it is served with.

Only a fixed table of types is ever sent: images a browser draws, audio and video it
plays, plain text and JSON. Everything else, SVG and HTML included (they can hold
scripts), is sent as ``application/octet-stream`` for download.
"""

from __future__ import annotations

from ...codecs import image_extension

__all__ = ["content_type", "media_kind"]

_NATIVE_IMAGES = {
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
}
_AUDIO = {
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "ogg": "audio/ogg",
    "oga": "audio/ogg",
    "opus": "audio/ogg",
    "m4a": "audio/mp4",
}
_VIDEO = {
    "mp4": "video/mp4",
    "m4v": "video/mp4",
    "webm": "video/webm",
    "ogv": "video/ogg",
    "mov": "video/quicktime",
    "mkv": "video/x-matroska",
}
_TEXT = {"txt", "text", "transcript", "cls", "cls2", "class", "count", "index", "inx", "id"}
_JSON = {"json", "jsn"}
PLAIN = "text/plain; charset=utf-8"
DOWNLOAD = "application/octet-stream"


def _ext(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def media_kind(name: str, *, native: bool = False) -> str:
    """``image``, ``audio``, ``video``, ``json``, ``text`` or ``other`` for a field name.
    With ``native``, an image only when browsers draw its format as it is."""
    ext = _ext(name)
    if ext in _NATIVE_IMAGES or (not native and image_extension(name)):
        return "image"
    if ext in _AUDIO:
        return "audio"
    if ext in _VIDEO:
        return "video"
    if ext in _JSON:
        return "json"
    return "text" if ext in _TEXT else "other"


def content_type(name: str) -> str:
    """The type a field is served with (see the module docs)."""
    ext = _ext(name)
    for table in (_NATIVE_IMAGES, _AUDIO, _VIDEO):
        if ext in table:
            return table[ext]
    if ext in _JSON:
        return "application/json"
    return PLAIN if ext in _TEXT else DOWNLOAD
