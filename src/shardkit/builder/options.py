"""Build options: one frozen dataclass, validated eagerly."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

from ..digest import DEFAULT_HASH, HashName, check_hash
from ..engines import Engine, check_engine
from ..errors import ConfigError
from ..formats.cut import BUILD_MAX_COUNT, BUILD_MAX_SIZE, Cut
from ..formats.names import FORMATS, Format
from ..formats.tar import END_OF_ARCHIVE
from ..handlers import OnError, check_on_error
from ..units import MAX_SEED, Size, check_int, check_seconds

__all__ = [
    "BuildOptions",
    "EncodeFormat",
    "FolderLayout",
    "OutputFormat",
    "ResizeMode",
    "ValidateMode",
]

OutputFormat = Format
ValidateMode = Literal["none", "header", "full"]
ResizeMode = Literal["keep-ratio", "center-crop", "pad"]
EncodeFormat = Literal["keep", "jpg", "png", "webp"]
FolderLayout = Literal["classes", "samples"]
LAYOUTS: tuple[FolderLayout, ...] = ("classes", "samples")
RESIZE_MODES: tuple[ResizeMode, ...] = ("keep-ratio", "center-crop", "pad")
ENCODE_FORMATS: tuple[EncodeFormat, ...] = ("keep", "jpg", "png", "webp")

# Options that do not change the output bytes: they are left out of the stored fingerprint.
_RUN_ONLY = frozenset(
    {"workers", "overwrite", "engine", "address", "fetch_concurrency", "fetch_timeout", "index"}
)
# Options added after the first release: left out of the fingerprint at their default, so
# a dataset or an interrupted build from before them is still recognised as the same.
# ``hash``: builds from before it hashed with sha256, so that value is the one left out.
_LATER_DEFAULTS: dict[str, Any] = {
    "resize_mode": "keep-ratio",
    "encode": "keep",
    "root": None,
    "hash": "sha256",
    "layout": "classes",
    "fields": (),
    "tokenizer": None,
    "text_column": "text",
}
_PREFIX_FORBIDDEN = frozenset("/\\\0")


@dataclass(frozen=True)
class BuildOptions:
    """How :func:`shardkit.build` packs a dataset (the CLI's options, same names).

    ``max_size`` accepts an int, a float (``1e9``) or a size string (``"100MB"``,
    ``"1GiB"``); shards are cut by :class:`~shardkit.formats.cut.Cut`. ``workers``
    ``None`` means every usable core. ``resize`` scales the shorter side to that many
    pixels (``resize_mode="keep-ratio"``), or gives exactly ``resize`` x ``resize``
    pixels: ``"center-crop"`` scales the shorter side and crops the middle,
    ``"pad"`` scales the longer side and pads with zeros; ``max_side`` shrinks images
    whose longer side is larger; ``encode`` stores every image as ``jpg``, ``png`` or
    ``webp`` (``keep``: JPEG and WebP stay, other resized images become PNG). These
    decode and re-encode in the workers (``quality`` applies to JPEG and WebP).
    ``path_column`` and ``label_column`` name the columns of a CSV/JSONL list (shorthands
    of ``fields``, ``{EXT: COLUMN}``: each column a field of the sample); ``root``
    is the folder its relative paths are read from and its keys are relative to (default:
    the list's folder). ``fetch_concurrency`` is how many http(s) downloads each worker
    keeps in flight (over one connection pool); ``fetch_timeout`` bounds each download
    in seconds (connecting included). Neither changes the output bytes. ``hash`` is the
    algorithm of each shard's digest in the manifest (:mod:`shardkit.digest`: ``blake3``,
    ``sha256``, ``xxh3-128`` or ``none``); it never changes the shards' bytes. ``layout``
    is a folder's: ``classes`` (``SRC/<class>/...``) or ``samples`` (no classes; keys are
    the paths without extensions); either way files sharing a path without their
    extension form one sample (docs/build.md). ``index`` (the default) writes each tar
    shard's ``.idx`` file beside it (what ``shardkit index`` writes), so ``IndexedDataset``,
    ``len()`` and the reading core use it at once; it never changes a shard's bytes.
    """

    format: OutputFormat = "tar"
    max_count: int = BUILD_MAX_COUNT
    max_size: Size = BUILD_MAX_SIZE
    workers: int | None = None
    shuffle: bool = True
    seed: int = 0
    prefix: str = "shard"
    validate: ValidateMode = "header"
    resize: int | None = None
    max_side: int | None = None
    resize_mode: ResizeMode = "keep-ratio"
    encode: EncodeFormat = "keep"
    quality: int = 90
    on_error: OnError = "skip"
    overwrite: bool = False
    path_column: str = "path"
    label_column: str | None = "label"
    root: str | None = None
    engine: Engine = "local"  # where tasks run (docs/scaling.md)
    address: str | None = None  # the Ray/Dask cluster (None: start a local one)
    fetch_concurrency: int = 32
    fetch_timeout: float = 10.0
    hash: HashName = DEFAULT_HASH
    layout: FolderLayout = "classes"
    # A list's fields, (ext, column) pairs in member order (docs/build.md, "Fields"):
    # a dict or pairs; () keeps path_column and label_column.
    fields: tuple[tuple[str, str], ...] = ()
    # Token shards (docs/tokens.md): a Hugging Face tokenizers file (or a folder holding
    # tokenizer.json) tokenizes each row's text_column into token shards.
    tokenizer: str | None = None
    text_column: str = "text"
    # Each shard's .idx file beside it (random access, exact counts); never changes a shard.
    index: bool = True

    def __post_init__(self) -> None:
        if self.tokenizer is not None and not isinstance(self.tokenizer, (str, os.PathLike)):
            raise ConfigError(f"tokenizer must be a path, not {self.tokenizer!r}")
        if self.tokenizer is not None:
            object.__setattr__(self, "tokenizer", os.fspath(self.tokenizer))
        if not isinstance(self.text_column, str) or not self.text_column:
            raise ConfigError(f"text_column must be a column name, not {self.text_column!r}")
        object.__setattr__(self, "fields", _check_fields(self.fields))
        _positive_int("max_count", self.max_count)
        object.__setattr__(self, "max_size", Cut(self.max_count, self.max_size).max_size)
        _choice("format", self.format, FORMATS)
        _choice("validate", self.validate, ("none", "header", "full"))
        check_on_error(self.on_error)
        _choice("resize_mode", self.resize_mode, RESIZE_MODES)
        _choice("encode", self.encode, ENCODE_FORMATS)
        _choice("layout", self.layout, LAYOUTS)
        _positive_int("fetch_concurrency", self.fetch_concurrency)
        _check_timeout(self.fetch_timeout)
        if self.workers is not None:
            _positive_int("workers", self.workers)
        for name in ("resize", "max_side"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
        _check_resize_mode(self.resize_mode, self.resize, self.max_side)
        if self.root is not None and (not isinstance(self.root, str) or not self.root):
            raise ConfigError(f"root must be a folder path or URL, not {self.root!r}")
        check_int(self.quality, "quality", low=1, high=100)
        check_int(self.seed, "seed", low=0, high=MAX_SEED)
        _check_prefix(self.prefix)
        check_hash(self.hash)
        check_engine(self.engine, self.address)
        for name in ("shuffle", "index"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, not {getattr(self, name)!r}")

    @property
    def size_limit(self) -> int:
        """``max_size`` in bytes."""
        return int(self.max_size)

    @property
    def trailer(self) -> bytes:
        """The bytes every shard ends with (a tar's end-of-archive blocks)."""
        return END_OF_ARCHIVE if self.format == "tar" else b""

    @property
    def cut(self) -> Cut:
        """Where shards are cut (:class:`~shardkit.formats.cut.Cut`), trailer included."""
        return Cut(self.max_count, self.max_size, trailer=len(self.trailer))

    @property
    def transforms(self) -> bool:
        """Whether images may be decoded and re-encoded (``resize``, ``max_side``, ``encode``)."""
        return self.resize is not None or self.max_side is not None or self.encode != "keep"

    @property
    def extension(self) -> str:
        return "tar" if self.format == "tar" else "tfrecord"

    def output_options(self) -> dict[str, Any]:
        """The options that determine the output bytes (stored in journal and manifest),
        as JSON reads them back (``fields`` as lists)."""
        return {
            field.name: [list(pair) for pair in self.fields]
            if field.name == "fields"
            else getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in _RUN_ONLY
            and not (
                field.name in _LATER_DEFAULTS
                and getattr(self, field.name) == _LATER_DEFAULTS[field.name]
            )
        }


def _check_fields(fields: Any) -> tuple[tuple[str, str], ...]:
    """``fields`` as (ext, column) pairs, each extension once."""
    pairs = list(fields.items()) if isinstance(fields, dict) else fields
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, (list, tuple)):
        raise ConfigError(f"fields must be a dict of EXT: COLUMN, not {fields!r}")
    out: dict[str, str] = {}
    for pair in pairs:
        ext, column = pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else ("", "")
        ok = isinstance(ext, str) and ext.strip(".") and not set(ext) & {"/", "\\", " "}
        if not ok or not isinstance(column, str) or not column:
            raise ConfigError(
                f"fields: {pair!r} is not an (EXT, COLUMN) pair such as ('txt', 'caption')"
            )
        ext = ext.lower()
        if ext in out or ext.startswith("__"):
            raise ConfigError(f"fields: extension {ext!r} is given twice or reserved")
        out[ext] = column
    return tuple(out.items())


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def _check_resize_mode(mode: str, resize: int | None, max_side: int | None) -> None:
    if mode == "keep-ratio":
        return
    if resize is None:
        raise ConfigError(f"resize_mode={mode!r} needs resize (the side of the square)")
    if max_side is not None:
        raise ConfigError(
            f"max_side does not combine with resize_mode={mode!r}: the output is already "
            f"{resize} x {resize}"
        )


def _positive_int(name: str, value: object) -> None:
    check_int(value, name)


def _check_timeout(value: object) -> None:
    check_seconds(value, "fetch_timeout")


def _check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix must be a non-empty string, not {prefix!r}")
    if prefix.startswith(".") or _PREFIX_FORBIDDEN & set(prefix):
        raise ConfigError(f"prefix {prefix!r} must not start with '.' or contain '/', '\\'")
