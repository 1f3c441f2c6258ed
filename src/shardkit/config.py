"""The one place shardkit reads environment variables."""

from __future__ import annotations

import os
from typing import Literal

from .errors import ConfigError

__all__ = [
    "PipePolicy",
    "allow_pipe_urls",
    "cache_dir",
    "default_workers",
    "node_info",
    "pipe_policy",
    "s3_endpoint",
]


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


PipePolicy = Literal["off", "direct", "all"]

_PIPE_SETTINGS: dict[str, PipePolicy] = {
    **dict.fromkeys(("0", "false", "no", "off"), "off"),
    **dict.fromkeys(("1", "true", "yes", "on"), "direct"),
    "all": "all",
}


def pipe_policy() -> PipePolicy:
    """Where ``pipe:CMD`` URLs may run shell commands (``SHARDKIT_ALLOW_PIPE``, any case):

    - ``"direct"`` (unset, empty, ``1``, ``true``, ``yes``, ``on``): only in a URL the
      caller passes directly (an argument or a Python call), never in one read from a
      data file (a manifest, a CSV/JSONL list, a journal);
    - ``"off"`` (``0``, ``false``, ``no``, ``off``): nowhere;
    - ``"all"``: in data files too (trust every manifest and list you read).

    Any other value is a ConfigError."""
    value = _env("SHARDKIT_ALLOW_PIPE")
    if value is None:
        return "direct"
    policy = _PIPE_SETTINGS.get(value.strip().lower())
    if policy is None:
        raise ConfigError(
            f"SHARDKIT_ALLOW_PIPE={value!r}: use 1 (pipe: URLs given directly run), "
            "0 (none run) or all (those in manifests and lists run too)"
        )
    return policy


def allow_pipe_urls() -> bool:
    """Whether a ``pipe:`` URL the caller passes directly may run (see :func:`pipe_policy`)."""
    return pipe_policy() != "off"


def cache_dir() -> str | None:
    """Default local cache folder for remote shards (``SHARDKIT_CACHE_DIR``)."""
    return _env("SHARDKIT_CACHE_DIR")


def default_workers() -> int:
    """Number of worker processes: ``SHARDKIT_WORKERS`` or every usable core."""
    value = _env("SHARDKIT_WORKERS")
    if value is not None:
        return max(1, int(value))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def node_info() -> tuple[int, int]:
    """(rank, world_size) from the environment variables torchrun and SLURM set."""
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = _env(rank_name), _env(size_name)
        if rank is not None and size is not None:
            return int(rank), int(size)
    return 0, 1


def s3_endpoint() -> str | None:
    """The S3 endpoint set for this process (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``),
    as botocore reads it; a build hands it to its workers, which may not have it set."""
    return _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
