"""A contact sheet: the first N pictures of a sample stream in a PNG grid, with key and label.

The sheet is ``columns x rows`` square tiles of ``tile`` pixels; ``columns`` is reduced to
the number of images when there are fewer, and ``rows = ceil(images / columns)``, so the
PNG is exactly ``columns * tile`` by ``rows * tile`` pixels. Each tile holds the sample's
first image, video or audio field (or ``image_field``) drawn by
:func:`shardkit.tools._media.field_picture` (an image scaled, a video's first frame, an
audio waveform) to fit above two text lines: the key and the label (``cls`` by default, or the
TFRecord schema's ``image/class/label``; any field spec of :mod:`shardkit.tools.tsv`),
shown as its class name when ``class_names`` (a manifest's ``class_to_idx``) has one. An
field that does not decode gets a tile that says so. ``image_field`` or ``label`` naming
no field of the first sample is a ConfigError. Text is drawn with DejaVu Sans (shipped
with matplotlib) when it is installed, so non-ASCII names render; else Pillow's font.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import storage
from .._optional import require
from ..errors import ConfigError, DataError
from ..storage import Access, StorageOptions
from ._media import field_picture, thumbnail_kind
from .tsv import check_spec, label_text

__all__ = ["ContactSheet", "contact_sheet"]

_BACKGROUND = (24, 24, 24)
_TEXT = (235, 235, 235)
_ERROR = (255, 90, 90)


@dataclass(frozen=True)
class ContactSheet:
    """What :func:`contact_sheet` drew."""

    url: str
    images: int
    columns: int
    rows: int
    tile: int

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the PNG in pixels."""
        return self.columns * self.tile, self.rows * self.tile


def _pick(
    sample: Mapping[str, Any], image_field: str | None, label: str | None, names: dict[str, str]
) -> tuple[str, str, str, bytes] | None:
    if image_field is not None:
        name: str | None = image_field.lower()
    else:
        name = next((k for k in sample if not k.startswith("__") and thumbnail_kind(k)), None)
    value = sample.get(name) if name is not None else None
    if name is None or not isinstance(value, bytes):
        return None
    text = label_text(sample, label, names) if label else ""
    return str(sample.get("__key__", "")), text, name, value


def _font(size: int) -> Any:
    """DejaVu Sans from matplotlib's data when it is there (it covers Latin, Greek,
    Cyrillic...), else Pillow's default font (ASCII only)."""
    import importlib.util
    import os

    from PIL import ImageFont

    spec = importlib.util.find_spec("matplotlib")
    if spec is not None and spec.origin is not None:
        path = os.path.join(os.path.dirname(spec.origin), "mpl-data", "fonts", "ttf")
        try:
            return ImageFont.truetype(os.path.join(path, "DejaVuSans.ttf"), size)
        except OSError:
            pass  # an install without its fonts: fall back
    return ImageFont.load_default(size=size)


def _fit(draw: Any, font: Any, text: str, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def _draw_tile(canvas: Any, font: Any, index: int, columns: int, tile: int, item: Any) -> None:
    from PIL import ImageDraw

    key, label, name, data = item
    x, y = (index % columns) * tile, (index // columns) * tile
    line = font.getbbox("Hg")[3] + 2
    box = (tile - 4, tile - 4 - 2 * line)
    draw = ImageDraw.Draw(canvas)
    try:
        thumb = field_picture(name, data, box)
        canvas.paste(thumb, (x + (tile - thumb.width) // 2, y + 2 + (box[1] - thumb.height) // 2))
    except DataError as exc:  # a field that does not decode gets a tile that says so
        draw.text((x + 4, y + 4), _fit(draw, font, exc.message, tile - 8), _ERROR, font)
    for row, text in enumerate((key, label)):
        ty = y + tile - 2 - (2 - row) * line
        draw.text((x + 2, ty), _fit(draw, font, text, tile - 4), _TEXT, font)


def contact_sheet(
    samples: Iterable[Mapping[str, Any]],
    output: str,
    *,
    count: int = 64,
    columns: int = 8,
    tile: int = 160,
    image_field: str | None = None,
    label: str | None = "cls",
    class_names: dict[str, str] | None = None,
    storage_options: Access | StorageOptions | None = None,
) -> ContactSheet:
    """Draw the first ``count`` pictures (images, video first frames, audio waveforms) of
    ``samples`` into a PNG at ``output``."""
    if count < 1 or columns < 1:
        raise ConfigError("count and columns must be at least 1")
    if tile < 48:
        raise ConfigError(f"tile must be at least 48 pixels, not {tile}")
    require("PIL.Image", "show --grid")
    items = []
    for index, sample in enumerate(samples):
        if index == 0:
            for spec, option in ((image_field, "--image"), (label, "--label")):
                if spec:
                    check_spec(sample, spec, option)
        item = _pick(sample, image_field, label, class_names or {})
        if item is not None:
            items.append(item)
            if len(items) >= count:
                break
    if not items:
        raise ConfigError("no image, video or audio fields in the samples: nothing to draw")
    from PIL import Image

    columns = min(columns, len(items))
    rows = math.ceil(len(items) / columns)
    sheet = ContactSheet(output, len(items), columns, rows, tile)
    canvas = Image.new("RGB", sheet.size, _BACKGROUND)
    font = _font(max(10, tile // 14))
    for index, item in enumerate(items):
        _draw_tile(canvas, font, index, columns, tile, item)
    png = io.BytesIO()  # encoded first: an error while writing names the file, and
    canvas.save(png, format="PNG")  # PIL writes to a descriptor past any wrapper
    with storage.open_atomic(output, access=Access.of(storage_options)) as file:
        file.write(png.getbuffer())
    return sheet
