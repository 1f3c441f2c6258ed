"""``manifest.json``: the one reader (every shape any entry point accepts) and the one writer.

A manifest is JSON: an object with a ``shards`` list (webdataset's ``shardlist`` is read
too), or the list itself. An entry is a shard URL, or an object naming the shard (``url``,
``name`` or ``path``) with optional ``samples`` (or ``nsamples``, ``count``,
``num_samples``), ``bytes`` and ``digest`` (``ALGO:HEX``, :mod:`shardkit.digest`; an
older manifest's ``sha256`` hex is read as ``sha256:HEX``). The object may state the dataset's
``format`` (``tar`` / ``tfrecord``) and total ``samples``; other fields (a shardkit
build's classes, options, skipped files, ...) are kept in :attr:`ManifestContents.document`.
This module parses bytes; opening a manifest URL and resolving its shard names is
:func:`shardkit.reader.load_manifest`'s job.

The writer keeps the manifest strict UTF-8 JSON whatever the names are: every string goes
through :func:`shardkit.formats.names.encode_name` (names that are not valid UTF-8 are
written reversibly; :func:`decode_name` maps them back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..digest import entry_digest
from ..errors import ManifestError
from .jsondoc import load_json
from .names import FORMATS, Format, decode_name, encode_name

__all__ = [
    "MANIFEST_VERSION",
    "ManifestContents",
    "ManifestShard",
    "encode_manifest",
    "encode_names",
    "parse_manifest",
]

MANIFEST_VERSION = 1

_URL_KEYS = ("url", "name", "path")
_COUNT_KEYS = ("samples", "nsamples", "count", "num_samples")


@dataclass(frozen=True)
class ManifestShard:
    """One shard entry: its name (relative or a URL; :func:`decode_name` applied) and what
    it states."""

    name: str
    samples: int | None = None
    bytes: int | None = None
    digest: str | None = None  # ALGO:HEX


@dataclass(frozen=True)
class ManifestContents:
    """A parsed manifest: its shards, the format and total it states, the whole document."""

    shards: tuple[ManifestShard, ...]
    format: Format | None
    samples: int | None
    document: Any

    @property
    def counts(self) -> tuple[int, ...] | None:
        """Every shard's sample count, or None unless every shard states one."""
        counts = tuple(s.samples for s in self.shards if s.samples is not None)
        return counts if len(counts) == len(self.shards) else None


def parse_manifest(data: bytes | str | Any, *, url: str | None = None) -> ManifestContents:
    """Parse a manifest from its bytes (or an already-decoded JSON document).

    Raises :class:`~shardkit.errors.ManifestError` (a ConfigError and a FormatError)
    naming ``url`` when it is not one."""
    document = data
    if isinstance(data, (bytes, bytearray, str)):
        document = load_json(data, url=url, what="manifest", error=ManifestError)
    entries = document
    if isinstance(document, Mapping):
        entries = document.get("shards", document.get("shardlist"))
    if not isinstance(entries, list) or not entries:
        raise ManifestError("a manifest needs a non-empty 'shards' list", url=url)
    shards = tuple(_entry(entry, index, url) for index, entry in enumerate(entries))
    fmt: Format | None = None
    total: int | None = None
    if isinstance(document, Mapping):
        stated = document.get("format")
        fmt = next((f for f in FORMATS if f == stated), None)
        stated_total = document.get("samples")
        if isinstance(stated_total, int) and not isinstance(stated_total, bool):
            total = stated_total
    return ManifestContents(shards, fmt, total, document)


def _entry(entry: Any, index: int, url: str | None) -> ManifestShard:
    if isinstance(entry, str):
        return ManifestShard(decode_name(entry))
    if not isinstance(entry, Mapping):
        raise ManifestError(f"manifest shard {index} is neither a URL nor an object", url=url)
    name = next((entry[k] for k in _URL_KEYS if isinstance(entry.get(k), str)), None)
    if name is None:
        raise ManifestError(f"manifest shard {index} has no 'url', 'name' or 'path'", url=url)
    count = next((entry[k] for k in _COUNT_KEYS if k in entry), None)
    try:
        digest = entry_digest(entry)
    except ValueError as exc:
        raise ManifestError(f"manifest shard {index} ({name}): {exc}", url=url) from None
    return ManifestShard(
        decode_name(name),
        _count(count, f"shard {index} ({name}): bad sample count", url),
        _count(entry.get("bytes"), f"shard {index} ({name}): bad byte count", url),
        digest or None,
    )


def _count(value: Any, what: str, url: str | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"manifest {what} {value!r}", url=url)
    return value


# --------------------------------------------------------------------------- writing


def encode_names(value: Any) -> Any:
    """``value`` (JSON-like) with every string through :func:`encode_name`, as the manifest
    stores it: compare what is read back with this, not with the original."""
    if isinstance(value, str):
        return encode_name(value)
    if isinstance(value, Mapping):
        return {encode_names(k): encode_names(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_names(v) for v in value]
    return value


def encode_manifest(document: Mapping[str, Any]) -> bytes:
    """The bytes of ``manifest.json``: indented UTF-8 JSON, names made safe, one newline."""
    text = json.dumps(encode_names(document), indent=2, ensure_ascii=False) + "\n"
    return text.encode("utf-8")
