"""webdataset's keyword arguments, translated to shardkit's options.

Each one is accepted with webdataset's meaning where shardkit has the feature; where it
has not, a :class:`~shardkit.errors.ConfigError` names the shardkit way. Never a bare
``TypeError``: migrating code should learn what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError

__all__ = ["UNSET", "dataset_options", "one_of", "refuse"]

UNSET: Any = object()

# webdataset's splitters that shardkit's built-in splitting replaces exactly.
_BUILT_IN_SPLITTERS = {
    "nodesplitter": ("split_by_node", "single_node_only"),
    "workersplitter": ("split_by_worker",),
}

# WebDataset(...) arguments with no shardkit equivalent, and what to do instead.
_DATASET_WAYS = {
    "cache_size": "shardkit's cache_dir= keeps every shard it reads; empty it to free space",
    "url_to_name": "shardkit names cached copies itself (shardkit.storage.cache_path)",
    "select_files": "drop fields after reading with .map(fn) or .rename(..., keep=False)",
    "rename_files": "rename fields with .rename(new='old') or .map(fn)",
    "mode": "use resampled=True, or .with_epoch(n)",
    "verbose": "shardkit logs through the 'shardkit' logger (logging.getLogger('shardkit'))",
}

# webdataset's defaults of the arguments in _DATASET_WAYS (url_to_name's is a function).
_DEFAULTS: dict[str, Any] = {
    "cache_size": -1,
    "select_files": None,
    "rename_files": None,
    "mode": None,
    "verbose": False,
}


def _is_default(name: str, value: Any) -> bool:
    if name == "url_to_name":
        return getattr(value, "__name__", "") == "pipe_cleaner"
    default = _DEFAULTS.get(name, UNSET)
    return type(value) is type(default) and value == default


def refuse(method: str, name: str, way: str) -> ConfigError:
    """The error for a webdataset argument shardkit does not take."""
    return ConfigError(f"{method}() has no {name}= argument: {way}")


def one_of(method: str, **given: Any) -> Any:
    """The one value given among aliases (``batchsize=`` / ``size``), else UNSET."""
    present = {k: v for k, v in given.items() if v is not UNSET}
    if len(present) > 1:
        raise ConfigError(f"{method}() takes one of {', '.join(present)}, not several")
    return next(iter(present.values()), UNSET)


def dataset_options(
    extra: Mapping[str, Any], *, shuffle_shards: bool | None, node: tuple[int, int] | None
) -> dict[str, Any]:
    """Translate ``WebDataset(urls, **extra)`` arguments into ``Dataset`` options:
    ``shuffle_shards``, ``node``, ``passes`` (None: endless), ``empty_check``."""
    out: dict[str, Any] = {"shuffle_shards": shuffle_shards, "node": node}
    out["passes"] = 1
    out["empty_check"] = bool(extra.get("empty_check", False))
    for name, value in extra.items():
        if name == "shardshuffle":
            out["shuffle_shards"] = _shardshuffle(value, shuffle_shards)
        elif name in ("resampled", "repeat") or (name, value) == ("mode", "resampled"):
            if value:
                out["passes"] = None
        elif name in _BUILT_IN_SPLITTERS:
            out["node"] = _splitter(name, value, node)
        elif name == "detshuffle":
            pass  # shardkit's shuffles are always deterministic, from (seed, epoch)
        elif name == "empty_check":
            pass
        elif name in _DATASET_WAYS:
            if _is_default(name, value):
                continue  # webdataset's own default asks for nothing
            raise refuse("Dataset", name, _DATASET_WAYS[name])
        else:
            raise ConfigError(
                f"Dataset() has no {name}= argument (options: seed, shuffle_shards, equalize, "
                "handler, format, node, storage_options, cache_dir, verify; webdataset's "
                "shardshuffle, resampled, nodesplitter, workersplitter, empty_check)"
            )
    return out


def _shardshuffle(value: Any, shuffle_shards: bool | None) -> bool | None:
    if shuffle_shards is not None:
        raise ConfigError("give shuffle_shards= or webdataset's shardshuffle=, not both")
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value >= 0:
        return value > 0  # shardkit shuffles the whole shard list, seeded per epoch
    raise ConfigError(f"shardshuffle must be an int >= 0, a bool or None, not {value!r}")


def _splitter(name: str, value: Any, node: tuple[int, int] | None) -> tuple[int, int] | None:
    if value is None and name == "nodesplitter":
        return (0, 1)  # every node reads every shard
    module = getattr(value, "__module__", "") or ""
    name_ok = getattr(value, "__name__", "") in _BUILT_IN_SPLITTERS[name]
    if callable(value) and module.startswith("webdataset") and name_ok:
        return node  # what shardkit does anyway
    what = "ranks" if name == "nodesplitter" else "DataLoader workers"
    raise ConfigError(
        f"Dataset() splits by {what} itself; {name}={_name(value)} is not supported "
        "(pass node=(rank, world_size) to choose the rank)"
    )


def _name(value: Any) -> str:
    name = getattr(value, "__qualname__", None) if callable(value) else None
    return name if isinstance(name, str) else repr(value)
