"""shardkit: pack many small files into WebDataset tar or TFRecord shards, fast, and
stream them back into PyTorch.

``import shardkit`` is light: it imports neither torch, TensorFlow, numpy, PIL nor any
cloud SDK; those load only when a feature that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .builder import BuildOptions, BuildProgress, BuildResult, build
from .errors import (
    BuildError,
    ChecksumError,
    ConfigError,
    DataError,
    DecodeError,
    EmptyBuildError,
    EncodeError,
    FormatError,
    ManifestError,
    MissingDependencyError,
    ShardkitError,
    StorageError,
    TruncatedShardError,
    UnsafeDataError,
)
from .formats.tar import TarWriter
from .writer import ShardInfo, ShardWriter

if TYPE_CHECKING:
    from .mapshards import ShardResult, map_shards
    from .pipeline import Dataset, Loader
    from .reader import read_shard

# Loaded on first use: the reading pipeline and the shard mapper are not needed to build.
_LAZY = {
    "Dataset": ".pipeline",
    "Loader": ".pipeline",
    "ShardResult": ".mapshards",
    "map_shards": ".mapshards",
    "read_shard": ".reader",
}

__all__ = [
    "BuildError",
    "BuildOptions",
    "BuildProgress",
    "BuildResult",
    "ChecksumError",
    "ConfigError",
    "DataError",
    "Dataset",
    "DecodeError",
    "EmptyBuildError",
    "EncodeError",
    "FormatError",
    "Loader",
    "ManifestError",
    "MissingDependencyError",
    "ShardInfo",
    "ShardResult",
    "ShardWriter",
    "ShardkitError",
    "StorageError",
    "TarWriter",
    "TruncatedShardError",
    "UnsafeDataError",
    "__version__",
    "build",
    "map_shards",
    "read_shard",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
