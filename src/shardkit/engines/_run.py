"""The run a task belongs to, for as long as the task runs.

One process may serve tasks of several runs at once: two builds in threads of a notebook
or a service (inline), or two runs on one Ray or Dask worker. So a run's state never
lives in a module global: each engine makes it once per process and run, through
``init(context, reporter)``, and sets it in a context variable around each of that run's
tasks (:func:`call`); a task asks :func:`run_state` for it. Context variables are per
thread (and per asyncio task), so two runs in two threads each see their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

__all__ = ["call", "close_state", "run_state"]

T = TypeVar("T")
R = TypeVar("R")

_current: ContextVar[Any] = ContextVar("shardkit_run_state")


def run_state() -> Any:
    """The state ``init`` made for the run of the task running now; RuntimeError outside
    a task of a run that has one."""
    state = _current.get(None)
    if state is None:
        raise RuntimeError("no run is active: a task ran outside its engine's run")
    return state


def call(state: Any, fn: Callable[[T], R], arg: T) -> R:
    """``fn(arg)`` with ``state`` as :func:`run_state` while it runs."""
    token = _current.set(state)
    try:
        return fn(arg)
    finally:
        _current.reset(token)


def close_state(state: Any) -> None:
    """Release what a run's state holds in this process (its ``close()``, if any)."""
    close = getattr(state, "close", None)
    if close is not None:
        with contextlib.suppress(OSError):  # what it read from is left as it was
            close()
