"""shardkit: pack many small files into WebDataset tar or TFRecord shards, fast, and
stream them back into PyTorch.

``import shardkit`` is light: it imports neither torch, TensorFlow, numpy, PIL nor any
cloud SDK; those load only when a feature that needs them is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from ._version import __version__
from .errors import (
    BuildError,
    ChecksumError,
    ConfigError,
    DataError,
    DecodeError,
    EmptyBuildError,
    EncodeError,
    FormatError,
    LimitError,
    ManifestError,
    MissingDependencyError,
    ShardkitError,
    StateError,
    StorageError,
    TruncatedShardError,
    UnsafeDataError,
)

if TYPE_CHECKING:
    from .builder import BuildOptions, BuildProgress, BuildResult, build
    from .codecs import audio, image, video
    from .formats.record import ShardInfo, ShardRecord
    from .formats.tar import TarWriter
    from .mapshards import ShardResult, map_shards
    from .pipeline import Dataset, IndexedDataset, Loader, MixedDataset, mix
    from .reader import read_shard
    from .writer import ShardWriter

# Everything but the exceptions loads on first use, so ``import shardkit`` costs little
# and a reader never loads the builder (nor a builder the reading pipeline).
_LAZY = {
    "BuildOptions": ".builder",
    "BuildProgress": ".builder",
    "BuildResult": ".builder",
    "build": ".builder",
    "TarWriter": ".formats.tar",
    "ShardInfo": ".formats.record",
    "ShardRecord": ".formats.record",
    "ShardWriter": ".writer",
    "Dataset": ".pipeline",
    "IndexedDataset": ".pipeline",
    "Loader": ".pipeline",
    "MixedDataset": ".pipeline",
    "mix": ".pipeline",
    "ShardResult": ".mapshards",
    "map_shards": ".mapshards",
    "read_shard": ".reader",
    "audio": ".codecs",
    "image": ".codecs",
    "video": ".codecs",
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
    "IndexedDataset",
    "LimitError",
    "Loader",
    "ManifestError",
    "MissingDependencyError",
    "MixedDataset",
    "ShardInfo",
    "ShardRecord",
    "ShardResult",
    "ShardWriter",
    "ShardkitError",
    "StateError",
    "StorageError",
    "TarWriter",
    "TruncatedShardError",
    "UnsafeDataError",
    "__version__",
    "audio",
    "build",
    "image",
    "map_shards",
    "mix",
    "read_shard",
    "video",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
