"""The supported API, as explicit lists (httpx's ``test_exported_members``): each public
face's ``__all__`` is exactly its list, every name resolves, and every other module is
private by name. Changing the supported API means changing these lists, on purpose."""

from __future__ import annotations

import importlib
import typing
from pathlib import Path

import pytest

import shardkit

#: What users import, per public face: the top level, the build's options, the decoders
#: (``shardkit.codecs``), the reading pipeline, the tools, ``read_shard`` (docs/guide.md).
SUPPORTED: dict[str, list[str]] = {
    "shardkit": [
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
    ],
    "shardkit.builder": ["BuildOptions", "BuildProgress", "BuildResult", "ShardRecord", "build"],
    "shardkit.builder.options": [
        "BuildOptions",
        "EncodeFormat",
        "FolderLayout",
        "OutputFormat",
        "ResizeMode",
        "ValidateMode",
    ],
    "shardkit.codecs": [
        "AUDIO_EXTENSIONS",
        "Audio",
        "AudioSpec",
        "Clip",
        "Codecs",
        "Decoder",
        "FIELD_CHECKS",
        "FieldDecoder",
        "FieldEncoder",
        "Handler",
        "IMAGE_EXTENSIONS",
        "IMAGE_FEATURE",
        "IMAGE_SPECS",
        "MAX_EXPANDED_SIZE",
        "VIDEO_EXTENSIONS",
        "VideoSpec",
        "audio",
        "check_field",
        "decode_sample",
        "default_codecs",
        "encode_sample",
        "image",
        "register",
        "video",
    ],
    "shardkit.pipeline": [
        "Dataset",
        "IndexedDataset",
        "Loader",
        "MixedDataset",
        "ShardList",
        "mix",
        "resolve_source",
    ],
    "shardkit.reader": ["read_shard"],
    "shardkit.tools": [
        "ContactSheet",
        "FieldInfo",
        "Manifest",
        "Problem",
        "ProcError",
        "ProcResult",
        "ShardCheck",
        "ShardIndex",
        "ShardRef",
        "ShardStats",
        "Stats",
        "VerifyReport",
        "build_index",
        "cat",
        "class_names",
        "contact_sheet",
        "convert",
        "describe_field",
        "describe_sample",
        "field_value",
        "format_sample",
        "format_samples",
        "format_stats",
        "index_url",
        "iter_cat",
        "iter_samples",
        "load_index",
        "parse_fields",
        "plot_stats",
        "proc",
        "read_indexed_sample",
        "read_manifest",
        "resolve_inputs",
        "run_on_sample",
        "run_on_samples",
        "shuffle_buffer",
        "split",
        "stats",
        "tsv_rows",
        "verify",
        "verify_shard",
        "write_index",
        "write_indexes",
        "write_shards",
        "write_tsv",
    ],
}

#: Modules with a public name besides the faces above: the lower layers other packages and
#: the docs name (formats, storage's neighbours, the CLI's subcommands, found by name; the
#: tools' modules). Every other module is ``_private``; a new public module is added here
#: on purpose, or named ``_name.py``.
PUBLIC_MODULES = {
    "shardkit.budget",
    "shardkit.cachelimit",
    "shardkit.config",
    "shardkit.demo",
    "shardkit.digest",
    "shardkit.errors",
    "shardkit.handlers",
    "shardkit.mapshards",
    "shardkit.ranges",
    "shardkit.units",
    "shardkit.writer",
    "shardkit.cli.build",
    "shardkit.cli.cat",
    "shardkit.cli.convert",
    "shardkit.cli.demo",
    "shardkit.cli.index",
    "shardkit.cli.proc",
    "shardkit.cli.show",
    "shardkit.cli.split",
    "shardkit.cli.stats",
    "shardkit.cli.tsv",
    "shardkit.cli.verify",
    "shardkit.cli.view",
    "shardkit.engines.testing",
    "shardkit.formats.cut",
    "shardkit.formats.example",
    "shardkit.formats.gzframe",
    "shardkit.formats.index",
    "shardkit.formats.jsondoc",
    "shardkit.formats.limits",
    "shardkit.formats.manifest",
    "shardkit.formats.megatron",
    "shardkit.formats.members",
    "shardkit.formats.names",
    "shardkit.formats.record",
    "shardkit.formats.tar",
    "shardkit.formats.tfrecord",
    "shardkit.formats.tfschema",
    "shardkit.formats.tokens",
    "shardkit.tools.cat",
    "shardkit.tools.convert",
    "shardkit.tools.grid",
    "shardkit.tools.index",
    "shardkit.tools.proc",
    "shardkit.tools.show",
    "shardkit.tools.split",
    "shardkit.tools.stats",
    "shardkit.tools.tsv",
    "shardkit.tools.verify",
}


def _modules() -> list[str]:
    """Every module under src/shardkit but ``__init__`` and ``__main__``, dotted."""
    root = Path(shardkit.__file__).parent
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] not in ("__init__", "__main__"):
            names.append(".".join(parts))
    return names


def _is_public(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


@pytest.mark.parametrize("face", sorted(SUPPORTED))
def test_all_is_the_supported_api(face: str) -> None:
    module = importlib.import_module(face)
    assert module.__all__ == SUPPORTED[face]
    assert SUPPORTED[face] == sorted(SUPPORTED[face])
    for name in SUPPORTED[face]:
        assert getattr(module, name) is not None, f"{face}.{name}"


def test_every_other_module_is_private_by_name() -> None:
    public = {name for name in _modules() if _is_public(name)}
    assert public - PUBLIC_MODULES - set(SUPPORTED) == set()  # a new public module
    assert PUBLIC_MODULES - public == set()  # renamed or removed: drop it from the list


def test_at_most_two_fifths_of_the_modules_are_public() -> None:
    """Issue 29's bar: the faces the docs name not counted (65% before the fold)."""
    modules = [name for name in _modules() if name not in SUPPORTED]
    public = [name for name in modules if _is_public(name)]
    assert len(public) <= 0.4 * len(modules), f"{len(public)} of {len(modules)}"


def test_shard_record_is_exported_where_build_results_hold_it() -> None:
    from shardkit.formats.record import ShardRecord

    assert shardkit.ShardRecord is ShardRecord
    assert shardkit.builder.ShardRecord is ShardRecord
    hints = typing.get_type_hints(shardkit.BuildResult)
    assert hints["shards"] == list[ShardRecord]
    assert issubclass(shardkit.ShardInfo, shardkit.ShardRecord)


def test_shared_internal_names_stay_out_of_all() -> None:
    """What a package shares with shardkit's other packages resolves through the package
    (the import contract forbids their ``_private`` modules) but is not supported API."""
    import shardkit.builder
    import shardkit.codecs
    import shardkit.pipeline

    for module, name in [
        (shardkit.pipeline, "list_folder"),
        (shardkit.pipeline, "load_indexes"),
        (shardkit.pipeline, "TokenSource"),
        (shardkit.builder, "SKIPPED_NAME"),
        (shardkit.codecs, "parse_json"),
    ]:
        assert getattr(module, name) is not None
        assert name not in module.__all__
