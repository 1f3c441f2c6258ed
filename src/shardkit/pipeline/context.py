"""Where an iteration runs: seed, epoch, node rank and DataLoader worker.

Stages get a :class:`Context` when the pipeline is built at iteration time, so every
random choice derives from ``(seed, epoch, rank, worker)`` through a local
:class:`random.Random`; the global ``random`` state is never touched.

Torch is consulted only if it is already imported: a process that never imported torch
cannot be a DataLoader worker or in a ``torch.distributed`` group.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

from .. import config
from ..errors import ConfigError

__all__ = [
    "Context",
    "current_node",
    "current_worker",
    "in_worker_process",
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
