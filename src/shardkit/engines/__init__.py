"""Where tasks run on a cluster: Ray and Dask behind the build's small executor interface.

An executor has ``submit(fn, arg) -> concurrent.futures.Future``, ``progress()`` (counts
the tasks reported since the last call) and ``close()`` (see
:mod:`shardkit.builder.executor`). The engines here implement it on an existing cluster:

- ``"ray"``: each call is a Ray task (``max_retries`` re-runs a task whose worker died);
  progress goes to a small actor the driver polls; a task's error comes back as its
  original exception (Ray's ``RayTaskError`` wrapper is removed).
- ``"dask"``: each call is a Dask future (``retries=``, ``pure=False``); progress goes
  through a ``distributed.Queue``; Dask already re-raises the original exception.

Both send the per-run ``context`` (for a build: its :class:`~shardkit.builder.worker.WorkerContext`)
to the cluster once and install it in each worker process the first time a task of that
run arrives there, through ``init(context, reporter)``. ``ray`` and ``distributed`` are
imported only when an engine is created. Task functions must be importable on the
workers (defined in an installed package, not in ``__main__`` or a test file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from .._optional import require
from ..errors import ConfigError
from ._connect import CONNECT_TIMEOUT_S, check_reachable

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ENGINES",
    "Engine",
    "InitFn",
    "check_engine",
    "check_reachable",
    "make_executor",
]

Engine = Literal["local", "ray", "dask"]
ENGINES: tuple[str, ...] = ("local", "ray", "dask")
InitFn = Callable[[Any, Any], None]  # init(context, reporter) in each worker process

#: Times a task whose worker process died is run again before the build fails.
RETRIES = 3


def check_engine(engine: object, address: object) -> None:
    """Raise ConfigError unless ``engine``/``address`` are a valid pair."""
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
    address: str | None,
    *,
    init: InitFn | None = None,
    context: Any = None,
) -> Any:
    """A Ray or Dask executor connected to ``address`` (None: start a local one)."""
    check_engine(engine, address)
    check_reachable(engine, address)
    if engine == "ray":
        from ._ray import RayExecutor

        return RayExecutor(address, init=init, context=context, retries=RETRIES)
    if engine == "dask":
        from ._dask import DaskExecutor

        return DaskExecutor(address, init=init, context=context, retries=RETRIES)
    raise ConfigError("engine='local' runs in local processes: no cluster executor")
