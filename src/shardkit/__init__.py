"""shardkit: pack many small files into WebDataset tar or TFRecord shards, fast, and
stream them back into PyTorch.

``import shardkit`` is light: it imports neither torch, TensorFlow, numpy, PIL nor any
cloud SDK; those load only when a feature that needs them is used.
"""

from __future__ import annotations

from ._version import __version__
from .build import BuildOptions, BuildProgress, BuildResult, build
from .errors import (
    BuildError,
    ChecksumError,
    ConfigError,
    DataError,
    DecodeError,
    EncodeError,
    FormatError,
    ShardkitError,
    StorageError,
    TruncatedShardError,
    UnsafeDataError,
)
from .formats.tar import TarWriter
from .mapshards import ShardResult, map_shards
from .pipeline import Dataset
from .writer import ShardInfo, ShardWriter

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
    "EncodeError",
    "FormatError",
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
]
