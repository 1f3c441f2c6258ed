"""The viewer's HTML: every string that comes from a shard is escaped here.

Keys, URLs, field names, captions, JSON and labels pass through :func:`text` (HTML
escaping, quotes included, after control and bidirectional characters are written as
``\\x1b`` / ``\\u202e``), or :func:`block` for multi-line text. No page holds a script;
links and media address samples and fields by number, never by a name from the data.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from ...errors import escape_controls
from ...formats.jsondoc import load_json
from ...units import format_size
from .._media import thumbnail_kind
from ._catalog import Catalog, Entry, Page
from ._media import media_kind

__all__ = ["error_page", "grid_page", "sample_page", "stats_page"]

_TEXT_LIMIT = 100_000  # characters of a text or JSON field shown on a sample page
_HEX_BYTES = 256
_TITLE = "shardkit view"


def text(value: object) -> str:
    """One line of untrusted text, safe anywhere in HTML (attribute values included)."""
    return html.escape(escape_controls(str(value)), quote=True)


def block(value: str) -> str:
    """Untrusted multi-line text for a ``<pre>``: lines kept, everything else escaped."""
    clipped = value[:_TEXT_LIMIT] + ("\n..." if len(value) > _TEXT_LIMIT else "")
    return "\n".join(text(line.replace("\t", "    ")) for line in clipped.split("\n"))


def _page(title: str, body: str) -> bytes:
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f"<title>{_TITLE}</title>"
        '<meta name=viewport content="width=device-width">'
        '<link rel=stylesheet href="/style.css"></head><body>'
        f'<nav><a href="/">grid</a> <a href="/stats">stats</a> <span>{title}</span></nav>'
        f"{body}</body></html>\n"
    ).encode()


def _link(path: str, query: dict[str, Any]) -> str:
    kept = {k: v for k, v in query.items() if v not in ("", None)}
    return text(path + ("?" + urlencode(kept) if kept else ""))


def grid_page(catalog: Catalog, page: Page, number: int, size: int, key: str, label: str) -> bytes:
    """The paged grid of thumbnails, with the filter form and the page links."""
    query = {"q": key, "cls": label, "size": size}
    tiles = "".join(_tile(catalog, entry) for entry in page.entries)
    known = f" of {page.total}" if page.total is not None else ""
    first = number * size + 1
    shown = f"samples {first}-{first + len(page.entries) - 1}{known}" if page.entries else "none"
    links = []
    if number > 0:
        links.append(f'<a href="{_link("/", {**query, "page": number})}">previous</a>')
    if page.more:
        links.append(f'<a href="{_link("/", {**query, "page": number + 2})}">next</a>')
    pages = f" of {-(-page.total // size)}" if page.total is not None else ""
    note = f"<p class=note>{text(catalog.note)}</p>" if catalog.note else ""
    form = (
        "<form method=get action=/>"
        f'<label>key <input name=q value="{text(key)}"></label> '
        f'<label>class <input name=cls value="{text(label)}"></label> '
        f'<label>page <input name=page type=number min=1 value="{number + 1}"></label>{pages} '
        f'<input type=hidden name=size value="{size}"><button>show</button></form>'
    )
    source = catalog.source if isinstance(catalog.source, str) else f"{len(catalog.urls)} URLs"
    return _page(
        text(source),
        f"<h1>{text(source)}</h1>{note}{form}<p class=count>{shown} {' '.join(links)}</p>"
        f"<div class=grid>{tiles}</div>",
    )


def _tile(catalog: Catalog, entry: Entry) -> str:
    href = f"/sample/{entry.index}"
    label = catalog.label_of(entry)
    picture = next((name for name in entry.fields if thumbnail_kind(name)), None)
    if picture is not None:
        inner = f'<img src="/thumb/{entry.index}" alt="" loading=lazy>'
    else:
        kinds = sorted({media_kind(name) for name in entry.fields} - {"other"})
        inner = f"<span class=placeholder>{text(', '.join(kinds) or 'no picture')}</span>"
    caption = text(entry.key) + (f" <b>{text(label)}</b>" if label else "")
    return f'<a class=tile href="{href}">{inner}<span class=key>{caption}</span></a>'


def sample_page(catalog: Catalog, entry: Entry) -> bytes:
    """Every field of one sample, with the shard and byte offset it came from."""
    index = entry.index
    rows = "".join(
        _field_row(index, number, name, value)
        for number, (name, value) in enumerate(entry.fields.items())
    )
    label = catalog.label_of(entry)
    offset = "unknown" if entry.offset is None else f"{entry.offset:,}"
    where = (
        f"<dl><dt>sample</dt><dd>{index}</dd><dt>key</dt><dd>{text(entry.key)}</dd>"
        f"<dt>shard</dt><dd>{text(entry.url)}</dd><dt>byte offset</dt><dd>{offset}</dd>"
        + (f"<dt>label</dt><dd>{text(label)}</dd>" if label else "")
        + "</dl>"
    )
    nav = (f'<a href="/sample/{index - 1}">previous</a> ' if index > 0 else "") + (
        f'<a href="/sample/{index + 1}">next</a>'
    )
    return _page(
        f"sample {index}",
        f"<h1>{text(entry.key)}</h1><p>{nav}</p>{where}<table class=fields>"
        f"<tr><th>field</th><th>size</th><th>content</th></tr>{rows}</table>",
    )


def _field_row(index: int, number: int, name: str, value: Any) -> str:
    src = f"/sample/{index}/field/{number}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        size = format_size(len(data)) + (f" ({len(data):,} bytes)" if len(data) >= 1000 else "")
        content = _bytes_view(index, number, name, data, src)
    else:
        size = "feature"
        content = f"<pre>{block(repr(value))}</pre>"
    raw = f' <a class=raw href="{src}">raw</a>'
    return f"<tr><td>{text(name)}{raw}</td><td>{size}</td><td>{content}</td></tr>"


def _bytes_view(index: int, number: int, name: str, data: bytes, src: str) -> str:
    kind = media_kind(name)
    if kind == "image":
        shown = src if media_kind(name, native=True) == "image" else f"/thumb/{index}/{number}"
        return f'<img class=full src="{shown}" alt="">'
    if kind == "video" and thumbnail_kind(name):  # its first frame until it plays
        poster = f"/thumb/{index}/{number}"
        return f'<video controls preload=none poster="{poster}" src="{src}"></video>'
    if kind in ("audio", "video"):
        return f'<{kind} controls preload=metadata src="{src}"></{kind}>'
    if kind == "json":
        try:
            value = load_json(data, what="the json field")
            pretty = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
        except ValueError:  # shown as the text it is
            pretty = data.decode("utf-8", "replace")
        return f"<pre>{block(pretty)}</pre>"
    decoded = data.decode("utf-8", "replace")
    if kind == "text" or (data and "\ufffd" not in decoded and decoded.isprintable()):
        return f"<pre>{block(decoded)}</pre>"
    return f"<pre class=hex>{text(data[:_HEX_BYTES].hex(' '))}</pre>"


def stats_page(catalog: Catalog) -> bytes:
    """Totals, fields, the class histogram and the spread of sample sizes."""
    result = catalog.stats()
    totals = (
        f"<p>{len(result.shards)} shard{'s' * (len(result.shards) != 1)}, "
        f"{result.samples:,} samples, {format_size(result.bytes)}</p>"
    )
    fields = "".join(
        f"<tr><td>{text(name)}</td><td>{text(result.kinds.get(name, '?'))}</td>"
        f"<td>{n:,}</td><td>{format_size(result.field_bytes[name] / n)}</td></tr>"
        for name, n in sorted(result.fields.items())
    )
    classes = _bars([(name, n) for name, n in result.classes.most_common(200)], "class")
    return _page(
        "stats",
        f"<h1>stats</h1>{totals}<h2>fields</h2><table><tr><th>field</th><th>kind</th>"
        f"<th>samples</th><th>mean size</th></tr>{fields}</table>{_media_table(result)}"
        f"<h2>classes ({len(result.classes)})</h2>{classes}"
        f"<h2>sample sizes (bytes in the shard)</h2>{_bars(_size_bins(result.sizes), 'size')}",
    )


def _media_table(result: Any) -> str:
    """Durations and rates of the audio and video fields (from their headers)."""
    if not result.media:
        return ""
    rows = []
    for name, seen in sorted(result.media.items()):
        doc = seen.to_dict()
        unit = "Hz" if seen.kind == "audio" else "fps"
        rates = ", ".join(f"{rate} {unit} ({n:,})" for rate, n in doc["rates"].items())
        mean = doc["duration_mean"]
        rows.append(
            f"<tr><td>{text(name)}</td><td>{seen.kind}</td><td>{len(seen.durations):,}</td>"
            f"<td>{doc['duration_total']:,.1f} s</td>"
            f"<td>{'' if mean is None else f'{mean:.2f} s'}</td><td>{text(rates)}</td>"
            f"<td>{seen.unreadable:,}</td></tr>"
        )
    return (
        "<h2>audio and video</h2><table><tr><th>field</th><th>kind</th><th>timed</th>"
        "<th>total</th><th>mean</th><th>rates</th><th>unreadable</th></tr>"
        f"{''.join(rows)}</table>"
    )


def _bars(rows: Sequence[tuple[str, int]], what: str) -> str:
    if not rows:
        return "<p>none</p>"
    top = max(n for _, n in rows) or 1
    body = "".join(
        f"<tr><td>{text(name)}</td><td>{n:,}</td>"
        f'<td><progress max="{top}" value="{n}"></progress></td></tr>'
        for name, n in rows
    )
    return f"<table class=bars><tr><th>{what}</th><th>samples</th><th></th></tr>{body}</table>"


def _size_bins(sizes: Sequence[int], bins: int = 12) -> list[tuple[str, int]]:
    if not sizes:
        return []
    low, high = min(sizes), max(sizes)
    width = max(1, -(-(high - low + 1) // bins))
    counts = [0] * bins
    for size in sizes:
        counts[min(bins - 1, (size - low) // width)] += 1
    return [
        (f"{format_size(low + i * width)} - {format_size(low + (i + 1) * width)}", n)
        for i, n in enumerate(counts)
    ]


def error_page(status: int, message: str) -> bytes:
    """A page for a refused or failed request (the message escaped like all data)."""
    return _page(str(status), f"<h1>{status}</h1><p>{text(message)}</p>")
