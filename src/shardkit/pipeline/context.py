"""Where an iteration runs: seed, epoch, node rank and DataLoader worker.

Stages get a :class:`Context` when the pipeline is built at iteration time, so every
random choice derives from ``(seed, epoch, rank, worker)`` through a local
:class:`random.Random`; the global ``random`` state is never touched.

Torch is consulted only if it is already imported: a process that never imported torch
cannot be a DataLoader worker or in a ``torch.distributed`` group.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass

from .. import config
from ..errors import ConfigError

__all__ = [
    "Context",
    "cpu_quota",
    "current_node",
    "current_worker",
    "in_worker_process",
    "usable_cores",
]


@dataclass(frozen=True)
class Context:
    """One stream of one epoch: ``worker`` of ``workers`` on ``rank`` of ``world``."""

    seed: int
    epoch: int
    rank: int = 0
    world: int = 1
    worker: int = 0
    workers: int = 1

    def rng(self, purpose: str) -> random.Random:
        """A generator seeded from (seed, epoch, rank, worker) and ``purpose``."""
        return random.Random(
            f"shardkit-{purpose}:{self.seed}:{self.epoch}:{self.rank}:{self.worker}"
        )


def current_node(node: tuple[int, int] | None = None) -> tuple[int, int]:
    """(rank, world size): ``node`` if given, else torch.distributed, else the environment."""
    if node is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            node = (int(dist.get_rank()), int(dist.get_world_size()))
        else:
            node = config.node_info()
    rank, world = node
    if not 0 <= rank < world:
        raise ConfigError(f"bad node: rank {rank} of world size {world}")
    return rank, world


def current_worker() -> tuple[int, int]:
    """(worker id, number of workers) inside a DataLoader worker, else (0, 1)."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)


def in_worker_process() -> bool:
    """Whether this process is a DataLoader worker (even the only one)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


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
