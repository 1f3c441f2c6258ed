"""Where an iteration runs: seed, epoch, node rank and DataLoader worker.

Stages get a :class:`Context` when the pipeline is built at iteration time, so every
random choice derives from ``(seed, epoch, rank, worker)`` through a local
:class:`random.Random`; the global ``random`` state is never touched.

Torch is consulted only if it is already imported: a process that never imported torch
cannot be a DataLoader worker or in a ``torch.distributed`` group.

The launch context (rank, world size) is resolved where the DataLoader lives and carried
to its workers. A worker started by ``spawn`` or ``forkserver`` does not see its parent's
``torch.distributed`` group (``torch.multiprocessing.spawn`` + ``init_process_group``
sets no environment variable either), so the dataset resolves its node in the parent:
when it is pickled to start a worker (:func:`node_for_pickle`) or when
:class:`~shardkit.pipeline._loader.Loader` starts an iteration. A forked worker sees the
group it inherited. A worker that has neither (no carried node, no group, no ``RANK`` /
``WORLD_SIZE``) while ``MASTER_ADDR`` / ``MASTER_PORT`` say its parent meets peers
raises instead of guessing.
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
    "node_for_pickle",
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


def current_node(
    node: tuple[int, int] | None = None, *, carried: tuple[int, int] | None = None
) -> tuple[int, int]:
    """(rank, world size): ``node`` if given; else this process's ``torch.distributed``
    group; in a DataLoader worker, ``carried`` (the node its parent resolved); else
    ``RANK`` / ``WORLD_SIZE`` (or SLURM's); else a single process, (0, 1).

    Raises :class:`ConfigError` in a DataLoader worker that cannot know: nothing carried,
    no group, no rank variables, but ``MASTER_ADDR`` / ``MASTER_PORT`` set."""
    if node is None:
        node = _process_group()
    if node is None and carried is not None and in_worker_process():
        node = carried
    if node is None:
        node = config.node_info()
    if node is None:
        hint = config.rendezvous_variable() if in_worker_process() else None
        if hint is not None:
            raise ConfigError(
                f"this DataLoader worker cannot know its rank: {hint} is set, so its parent "
                "may be in a torch.distributed group, but the dataset did not come from it "
                "through the DataLoader (or shardkit.Loader); pass node=(rank, world_size) "
                "to the Dataset"
            )
        node = (0, 1)
    rank, world = node
    if not 0 <= rank < world:
        raise ConfigError(f"bad node: rank {rank} of world size {world}")
    return rank, world


def node_for_pickle(
    node: tuple[int, int] | None, carried: tuple[int, int] | None
) -> tuple[int, int] | None:
    """The node to carry in a dataset being pickled: this process's, resolved now, when
    it is pickled to start a process (a DataLoader worker under ``spawn`` or
    ``forkserver``); else ``carried`` unchanged."""
    from multiprocessing import context

    if node is not None or context.get_spawning_popen() is None:
        return carried
    return current_node(carried=carried)


def _process_group() -> tuple[int, int] | None:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return None


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
