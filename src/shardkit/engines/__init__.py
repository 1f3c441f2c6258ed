"""Where tasks run: local processes, the calling process, a Ray or a Dask cluster.

Every engine is an :class:`Executor`: ``submit(fn, arg) -> concurrent.futures.Future``,
``progress()`` (the progress counts tasks reported since the last call), ``close()`` and
``workers`` (how many tasks run at once). That is all a driver (a build, ``map_shards``,
cluster ``proc``) uses; :func:`make_executor` is the one factory:

- ``"local"``: a pool of ``workers`` processes (forkserver; see :mod:`._local`), or,
  with one worker, the calling process itself (:class:`InlineExecutor`).
- ``"ray"``: each call is a Ray task (``max_retries`` re-runs a task whose worker died);
  progress goes to a small actor the driver polls; a task's error comes back as its
  original exception (Ray's ``RayTaskError`` wrapper is removed).
- ``"dask"``: each call is a Dask future (``pure=False``); progress goes through a
  ``distributed.Queue``; Dask already re-raises the original exception.

Each sends the per-run ``context`` (for a build: its
:class:`~shardkit.builder._worker.WorkerContext`) to every worker process once and makes
the run's state there from it, before that process's first task of the run, through
``init(context, reporter) -> state``. A task gets its own run's state from
:func:`run_state` (a context variable set around each task, never a module global: two
runs in one process, in two threads or on one cluster worker, stay apart).

``ray`` and ``distributed`` are imported only when such an engine is created, and their
address is checked first (:data:`CONNECT_TIMEOUT_S`). Task functions must be importable
on cluster workers (defined in an installed package, not in ``__main__`` or a test file).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from .._optional import require
from ..errors import ConfigError
from ._run import run_state

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ._connect import CONNECT_TIMEOUT_S, check_reachable
    from ._local import InlineExecutor, ProcessExecutor, check_not_bootstrapping, warm_up

# The executors (multiprocessing, sockets) load on first use, not at ``import shardkit``.
_LAZY = {
    "CONNECT_TIMEOUT_S": "._connect",
    "check_reachable": "._connect",
    "InlineExecutor": "._local",
    "ProcessExecutor": "._local",
    "check_not_bootstrapping": "._local",
    "warm_up": "._local",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CONNECT_TIMEOUT_S",
    "ENGINES",
    "Engine",
    "Executor",
    "InitFn",
    "InlineExecutor",
    "ProcessExecutor",
    "check_engine",
    "check_not_bootstrapping",
    "check_reachable",
    "make_executor",
    "run_state",
    "warm_up",
]

#: Where tasks run (the one definition; ``BuildOptions.engine``, ``map_shards`` and
#: ``proc`` take these).
Engine = Literal["local", "ray", "dask"]
ENGINES: tuple[str, ...] = ("local", "ray", "dask")
InitFn = Callable[[Any, Any], Any]  # init(context, reporter) -> the run's state, per process
Counts = tuple[int, int, int]
T = TypeVar("T")
R = TypeVar("R")

#: Times a task whose worker process died is run again before the run fails.
RETRIES = 3


class Executor(Protocol):
    """Runs tasks somewhere and reports progress counts."""

    workers: int

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]: ...

    def progress(self) -> list[Counts]: ...

    def close(self, *, cancel: bool = False) -> None: ...


def check_engine(engine: object, address: object) -> None:
    """Raise ConfigError unless ``engine``/``address`` are a valid pair (and the engine's
    package is installed: MissingDependencyError names the extra)."""
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if address is not None and not isinstance(address, str):
        raise ConfigError(f"address must be a string like 'HOST:PORT', not {address!r}")
    if address is not None and engine == "local":
        raise ConfigError("address applies to engine='ray' or 'dask', not to 'local'")
    if engine != "local":  # fail before anything starts, not once the cluster is needed
        require("ray" if engine == "ray" else "distributed", f"engine={engine!r}")


def make_executor(
    engine: Engine,
    address: str | None = None,
    *,
    workers: int = 1,
    init: InitFn | None = None,
    context: Any = None,
    preload: Sequence[str] = (),
) -> Executor:
    """The executor of ``engine``: for ``"local"``, ``workers`` processes (one: inline;
    ``preload`` names modules every worker imports first); for ``"ray"``/``"dask"``, the
    cluster at ``address`` (None: connect to or start a local one)."""
    check_engine(engine, address)
    if engine == "local":  # no sockets: the cluster doors load only for a cluster
        from ._local import InlineExecutor, ProcessExecutor

        if workers <= 1:
            return InlineExecutor(init=init, context=context)
        return ProcessExecutor(workers, init=init, context=context, preload=preload)
    from ._connect import check_reachable

    check_reachable(engine, address)
    if engine == "ray":
        from ._ray import RayExecutor

        return RayExecutor(address, init=init, context=context, retries=RETRIES)
    from ._dask import DaskExecutor

    return DaskExecutor(address, init=init, context=context, retries=RETRIES)
