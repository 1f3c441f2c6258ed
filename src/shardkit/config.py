"""The one place shardkit reads environment variables."""

from __future__ import annotations

import os
from typing import Literal

from .errors import ConfigError

__all__ = [
    "PipePolicy",
    "allow_pipe_urls",
    "cache_dir",
    "cpu_quota",
    "default_workers",
    "limit_setting",
    "node_info",
    "pipe_policy",
    "rendezvous_variable",
    "s3_endpoint",
    "usable_cores",
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


def limit_setting(name: str) -> str | None:
    """The value of ``SHARDKIT_MAX_<NAME>`` (``name`` upper-cased), a limit of
    :mod:`shardkit.budget` raised or lowered for this process; None where it is unset."""
    return _env(f"SHARDKIT_MAX_{name.upper()}")


def cache_dir() -> str | None:
    """Default local cache folder for remote shards (``SHARDKIT_CACHE_DIR``)."""
    return _env("SHARDKIT_CACHE_DIR")


def default_workers() -> int:
    """Number of worker processes: ``SHARDKIT_WORKERS`` or every usable core."""
    value = _env("SHARDKIT_WORKERS")
    if value is not None:
        return max(1, int(value))
    return usable_cores()


def usable_cores() -> int:
    """CPU cores this process may keep busy: those it may run on (its affinity), or
    fewer under a cgroup CPU limit (:func:`cpu_quota`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    quota = cpu_quota()
    return max(1, cores if quota is None else min(cores, quota))


def cpu_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs a cgroup CPU limit allows (a container's ``--cpus``, a Kubernetes CPU
    limit), rounded up; None when there is none or it cannot be read. Reads cgroup v2's
    ``cpu.max``, else v1's ``cpu/cpu.cfs_quota_us`` and ``cpu/cpu.cfs_period_us``, under
    ``root``: a container's own cgroup, which its cgroup namespace puts there."""
    try:
        with open(os.path.join(root, "cpu.max")) as f:
            fields = f.read().split()
    except OSError:
        try:
            with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
                quota = f.read()
            with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
                fields = [quota.strip(), f.read().strip()]
        except OSError:
            return None
    try:
        quota_us, period_us = int(fields[0]), int(fields[1])
    except (ValueError, IndexError):  # "max": no limit
        return None
    if quota_us <= 0 or period_us <= 0:  # v1's -1: no limit
        return None
    return max(1, -(-quota_us // period_us))


def node_info() -> tuple[int, int] | None:
    """(rank, world_size) from the environment variables torchrun and SLURM set; None
    where neither pair is set."""
    for rank_name, size_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = _env(rank_name), _env(size_name)
        if rank is not None and size is not None:
            try:
                return int(rank), int(size)
            except ValueError:
                raise ConfigError(
                    f"{rank_name}={rank!r}, {size_name}={size!r}: not integers"
                ) from None
    return None


def rendezvous_variable() -> str | None:
    """The name of a set ``MASTER_ADDR`` / ``MASTER_PORT`` (what ``init_process_group``
    reads to meet its peers): a sign that this process, or its parent, joins a group."""
    return next((n for n in ("MASTER_ADDR", "MASTER_PORT") if _env(n) is not None), None)


def s3_endpoint() -> str | None:
    """The S3 endpoint set for this process (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``),
    as botocore reads it; a build hands it to its workers, which may not have it set."""
    return _env("AWS_ENDPOINT_URL_S3") or _env("AWS_ENDPOINT_URL")
