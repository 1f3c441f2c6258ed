"""Build options: one frozen dataclass, validated eagerly."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from ..digest import DEFAULT_HASH, HashName, check_hash
from ..errors import ConfigError
from ..formats.cut import BUILD_MAX_COUNT, BUILD_MAX_SIZE, Cut
from ..formats.tar import END_OF_ARCHIVE
from ..units import Size

__all__ = ["BuildOptions", "OnError", "OutputFormat", "ValidateMode", "upgrade_options"]

OutputFormat = Literal["tar", "tfrecord"]
ValidateMode = Literal["none", "header", "full"]
OnError = Literal["skip", "fail"]

# Options that do not change the output bytes: they are left out of the stored fingerprint.
_RUN_ONLY = frozenset({"workers", "overwrite", "engine", "address"})
_PREFIX_FORBIDDEN = frozenset("/\\\0")


@dataclass(frozen=True)
class BuildOptions:
    """How :func:`shardkit.build` packs a dataset (the CLI's options, same names).

    ``max_size`` accepts an int, a float (``1e9``) or a size string (``"100MB"``,
    ``"1GiB"``); shards are cut by :class:`~shardkit.formats.cut.Cut`. ``workers``
    ``None`` means every usable core. ``resize`` scales the shorter side to that many
    pixels; ``max_side`` shrinks images whose longer side is larger; both re-encode in
    the workers (``quality`` applies to JPEG and WebP). ``path_column`` and
    ``label_column`` name the columns of a CSV/JSONL list. ``hash`` is the algorithm of
    each shard's digest in the manifest (:mod:`shardkit.digest`: ``blake3``, ``sha256``,
    ``xxh3-128`` or ``none``); it never changes the shards' bytes.
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
    quality: int = 90
    on_error: OnError = "skip"
    overwrite: bool = False
    path_column: str = "path"
    label_column: str | None = "label"
    engine: Literal["local", "ray", "dask"] = "local"  # where tasks run (docs/scaling.md)
    address: str | None = None  # the Ray/Dask cluster (None: start a local one)
    hash: HashName = DEFAULT_HASH

    def __post_init__(self) -> None:
        _positive_int("max_count", self.max_count)
        object.__setattr__(self, "max_size", Cut(self.max_count, self.max_size).max_size)
        _choice("format", self.format, ("tar", "tfrecord"))
        _choice("validate", self.validate, ("none", "header", "full"))
        _choice("on_error", self.on_error, ("skip", "fail"))
        if self.workers is not None:
            _positive_int("workers", self.workers)
        for name in ("resize", "max_side"):
            value = getattr(self, name)
            if value is not None:
                _positive_int(name, value)
        if isinstance(self.quality, bool) or not isinstance(self.quality, int):
            raise ConfigError(f"quality must be an int from 1 to 100, not {self.quality!r}")
        if not 1 <= self.quality <= 100:
            raise ConfigError(f"quality must be from 1 to 100, not {self.quality}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an int, not {self.seed!r}")
        _check_prefix(self.prefix)
        check_hash(self.hash)
        from ..engines import check_engine

        check_engine(self.engine, self.address)
        if not isinstance(self.shuffle, bool):
            raise ConfigError(f"shuffle must be True or False, not {self.shuffle!r}")

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
        """Whether images are decoded and re-encoded (``resize`` or ``max_side``)."""
        return self.resize is not None or self.max_side is not None

    @property
    def extension(self) -> str:
        return "tar" if self.format == "tar" else "tfrecord"

    def output_options(self) -> dict[str, Any]:
        """The options that determine the output bytes (stored in journal and manifest)."""
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in _RUN_ONLY
        }


# What an older shardkit did for options it did not have yet.
_BEFORE = {"hash": "sha256"}


def upgrade_options(stored: dict[str, Any]) -> dict[str, Any]:
    """Options stored (journal, manifest) by an older shardkit, with the values it used
    for options it did not have yet: such a build resumes, or is found complete, as the
    same build when asked for with those values."""
    return {**_BEFORE, **stored}


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {value!r}")
    if value < 1:
        raise ConfigError(f"{name} must be at least 1, not {value}")


def _check_prefix(prefix: object) -> None:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix must be a non-empty string, not {prefix!r}")
    if prefix.startswith(".") or _PREFIX_FORBIDDEN & set(prefix):
        raise ConfigError(f"prefix {prefix!r} must not start with '.' or contain '/', '\\'")
