"""Real DDP launches on CPU for the tests: each rank a process in a gloo group.

Two launchers, as users start training:

* ``"spawn"``: ``torch.multiprocessing.spawn`` and ``init_process_group("gloo",
  rank=r, world_size=n)`` (PyTorch's DDP tutorial): no ``RANK`` / ``WORLD_SIZE`` in the
  environment, only ``MASTER_ADDR`` / ``MASTER_PORT``;
* ``"env"``: torchrun's way: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
  ``MASTER_PORT`` in the environment and ``init_process_group("gloo")`` reading them.

``launch(body, world, launcher, *args)`` runs ``body(rank, world, *args)`` on every rank
and returns what each returned (pickled through a file), in rank order. ``body`` must be a
module-level function of an importable module (a test module is one).
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from typing import Any, Literal

Launcher = Literal["env", "spawn"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(body: Callable[..., Any], world: int, launcher: Launcher, *args: Any) -> list[Any]:
    """``body(rank, world, *args)`` on ``world`` ranks started by ``launcher``."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank, args=(world, launcher, free_port(), out, body, args), nprocs=world)
        results = []
        for rank in range(world):
            with open(os.path.join(out, f"{rank}.pickle"), "rb") as f:
                results.append(pickle.load(f))
    return results


def _rank(
    rank: int,
    world: int,
    launcher: Launcher,
    port: int,
    out: str,
    body: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if launcher == "env":
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = body(rank, world, *args)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out, f"{rank}.pickle"), "wb") as f:
        pickle.dump(result, f)
