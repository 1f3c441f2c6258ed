"""The one place shardkit reads environment variables."""

from __future__ import annotations

import os

__all__ = ["allow_pipe_urls", "cache_dir", "default_workers", "node_info", "s3_endpoint"]


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else None


def allow_pipe_urls() -> bool:
    """Whether ``pipe:`` URLs may run shell commands (``SHARDKIT_ALLOW_PIPE=0`` disables)."""
    return (_env("SHARDKIT_ALLOW_PIPE") or "1").lower() not in ("0", "false", "no")


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
