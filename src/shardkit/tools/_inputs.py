"""Turn command-line inputs into shards: ``-`` for a tar stream on stdin (gzip is
detected), or any source the one resolver takes (:mod:`shardkit.pipeline._urls`: a folder,
local or remote, by its ``manifest.json`` or its shard files; a manifest; a brace pattern
or URL), so a tool reads the same shards as ``Dataset`` and ``build`` for the same input.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

from .. import pipeline, storage
from ..errors import ConfigError, FormatError
from ..formats.manifest import ManifestContents, ManifestShard
from ..formats.names import MANIFEST_NAME, Format
from ..handlers import Handler, reraise
from ..reader import detect_format, iter_stream_samples, load_manifest, read_shard
from ..storage import LOCAL, Access, StorageOptions

__all__ = [
    "MANIFEST",
    "Inputs",
    "Manifest",
    "ShardRef",
    "as_refs",
    "class_names",
    "gzip_errors",
    "has_manifest",
    "iter_samples",
    "list_folder",
    "magic",
    "open_shard",
    "read_manifest",
    "resolve_inputs",
]

MANIFEST = MANIFEST_NAME


@dataclass(frozen=True)
class ShardRef:
    """One shard to read: where it is, its format, and the manifest it came from (if any)
    with what that manifest states of it (``stated``; ``samples``, ``bytes`` and
    ``digest``, ``ALGO:HEX``, read from it, ``None`` where it states nothing). It carries
    how it is reached (``access``: the ``storage_options`` it was resolved with), as an
    fsspec ``OpenFile`` carries its filesystem: what reads it needs nothing else. None:
    as the tool run that reads it says (:func:`as_refs` fills it in)."""

    url: str
    format: Format
    gzip: bool
    stated: ManifestShard | None = None
    manifest: str | None = None
    access: Access | None = field(default=None, compare=False, repr=False)

    @property
    def stdin(self) -> bool:
        return self.url == "-"

    @property
    def samples(self) -> int | None:
        return None if self.stated is None else self.stated.samples

    @property
    def bytes(self) -> int | None:
        return None if self.stated is None else self.stated.bytes

    @property
    def digest(self) -> str | None:
        return None if self.stated is None else self.stated.digest


@dataclass(frozen=True)
class Manifest:
    """A parsed ``manifest.json``: its URL, its shards, and the totals it states."""

    url: str
    shards: tuple[ShardRef, ...]
    samples: int | None
    format: str | None
    classes: dict[str, str] = field(default_factory=dict)  # "0" -> "cat": class_to_idx


def read_manifest(url: str, *, storage_options: Access | StorageOptions | None = None) -> Manifest:
    """Parse a manifest; shard names are resolved next to it. Unknown fields are ignored.
    Its shards carry ``storage_options`` (:meth:`~shardkit.storage.Access.given`)."""
    contents, urls = load_manifest(url, access=Access.of(storage_options))
    return _manifest(url, contents, urls, Access.given(storage_options))


def _manifest(
    url: str, contents: ManifestContents, urls: Sequence[str], access: Access | None
) -> Manifest:
    refs = []
    for shard, shard_url in zip(contents.shards, urls, strict=True):
        kind, gz = detect_format(shard_url, contents.format)
        refs.append(ShardRef(shard_url, kind, gz, stated=shard, manifest=url, access=access))
    document = contents.document
    mapping = document.get("class_to_idx") if isinstance(document, dict) else None
    classes = {
        str(index): name
        for name, index in (mapping.items() if isinstance(mapping, dict) else ())
        if isinstance(index, int) and not isinstance(index, bool)
    }
    return Manifest(url, tuple(refs), contents.samples, contents.format, classes)


def class_names(refs: Sequence[ShardRef]) -> dict[str, str]:
    """Label -> class name (``"0"`` -> ``"cat"``) from the manifests ``refs`` came from
    (each read as its shards are reached)."""
    names: dict[str, str] = {}
    manifests = {ref.manifest: ref.access for ref in refs if ref.manifest is not None}
    for url, access in manifests.items():
        names.update(read_manifest(url, storage_options=access).classes)
    return names


def list_folder(folder: str) -> list[str]:
    """Shard files in a local folder, sorted by name (no manifest involved)."""
    return [os.path.join(folder, name) for name in pipeline.list_folder(folder).shards]


def has_manifest(spec: str | ShardRef) -> bool:
    """Whether an input is a local folder that the resolver reads by its manifest."""
    if isinstance(spec, ShardRef) or not storage.is_local(spec):
        return False
    return os.path.isdir(storage.local_path(spec)) and pipeline.list_folder(spec).has_manifest


def resolve_inputs(
    specs: Sequence[str], *, storage_options: Access | StorageOptions | None = None
) -> list[ShardRef]:
    """The shards named by command-line inputs, in order (see the module docs): ``-``, or
    what the one resolver (:func:`shardkit.pipeline._urls.resolve_parts`) says a source
    names, each shard with what its manifest says of it."""
    if isinstance(specs, str):
        specs = [specs]
    access, carried = Access.of(storage_options), Access.given(storage_options)
    refs: list[ShardRef] = []
    for spec in specs:
        if spec == "-":
            refs.append(ShardRef("-", "tar", False))
            continue
        for part in pipeline.resolve_parts(spec, access=access, counts=False):
            if part.manifest is not None and part.contents is not None:
                refs.extend(_manifest(part.manifest, part.contents, part.urls, carried).shards)
            else:
                refs.extend(ShardRef(url, *detect_format(url), access=carried) for url in part.urls)
    if not refs:
        raise ConfigError("no input shards given")
    if sum(ref.stdin for ref in refs) > 1:
        raise ConfigError("'-' (stdin) can be given only once")
    return refs


Inputs = str | ShardRef | Sequence[str | ShardRef]
"""What the tools accept as input: input strings (see the module docs) and/or ShardRefs."""


def as_refs(inputs: Inputs, access: Access = LOCAL) -> list[ShardRef]:
    """ShardRefs for ``inputs``: ShardRefs pass through, strings are resolved (reached
    through ``access``)."""
    items = [inputs] if isinstance(inputs, (str, ShardRef)) else list(inputs)
    refs: list[ShardRef] = []
    for item in items:
        if isinstance(item, ShardRef):
            refs.append(item if item.access is not None else replace(item, access=access))
        else:
            refs.extend(resolve_inputs([item], storage_options=access))
    if not refs:
        raise ConfigError("no input shards given")
    if sum(ref.stdin for ref in refs) > 1:
        raise ConfigError("'-' (stdin) can be given only once")
    return refs


def open_shard(ref: ShardRef, *, buffer_size: int = 1 << 20) -> tuple[BinaryIO, BinaryIO]:
    """(raw stream, decompressed stream) of a shard; the caller closes the raw one.

    ``buffer_size=0`` opens a local file unbuffered (for readers that seek over data)."""
    raw = storage.open_read(ref.url, access=Access.of(ref.access), buffer_size=buffer_size)
    if ref.gzip or magic(raw) == b"\x1f\x8b":
        return raw, gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw, raw


def magic(raw: BinaryIO) -> bytes:
    """The first two bytes, without consuming them."""
    peek = getattr(raw, "peek", None)
    if peek is not None:
        return bytes(peek(2)[:2])
    try:
        return os.pread(raw.fileno(), 2, raw.tell())
    except (AttributeError, OSError, ValueError):
        return b""


def iter_samples(
    refs: Iterable[ShardRef], *, handler: Handler = reraise
) -> Iterator[dict[str, Any]]:
    """Raw samples (bytes fields) of every shard, in order (each reached as it says)."""
    for ref in refs:
        if ref.stdin:
            _, stream = open_shard(ref)
            yield from iter_stream_samples(stream, url="-", format="tar", handler=handler)
        else:
            yield from read_shard(
                ref.url, format=ref.format, handler=handler, storage_options=ref.access
            )


@contextlib.contextmanager
def gzip_errors(url: str) -> Iterator[None]:
    """Turn the errors of a corrupt gzip stream into a :class:`FormatError`."""
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise FormatError(f"corrupt gzip stream: {exc}", url=url) from exc
