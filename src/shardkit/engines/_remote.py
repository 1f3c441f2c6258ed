"""The worker-process side of a cluster task: make the run's state once, then call.

A worker process of a Ray or Dask cluster runs tasks of many runs over its life, and of
several at once (two builds on one cluster; Dask runs tasks in threads). Each run has a
random ``run_id``; the first task of a run that arrives in a process makes that run's
state through ``init(context, reporter)``; later tasks of the same run reuse it, and each
task sees its own run's state (:mod:`._run`). The states of the last :data:`KEEP` runs
are kept; an older one is closed once no task of its run is running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from . import _run

__all__ = ["KEEP", "call"]

Reporter = Callable[[int, int, int], None]

KEEP = 4
"""Runs whose state a worker process keeps (more only while their tasks run)."""


class _Runs:
    """The states of the runs this process served lately, by run id, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, Any] = {}
        self._running: dict[str, int] = {}  # tasks running, per run

    def enter(self, run_id: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            if run_id not in self._states:
                self._states[run_id] = make()
            else:  # most recently used last
                self._states[run_id] = self._states.pop(run_id)
            self._running[run_id] = self._running.get(run_id, 0) + 1
            return self._states[run_id]

    def leave(self, run_id: str) -> None:
        with self._lock:
            self._running[run_id] -= 1
            if not self._running[run_id]:
                del self._running[run_id]
            idle = [r for r in self._states if r not in self._running]
            old = [self._states.pop(r) for r in idle[: max(0, len(self._states) - KEEP)]]
        for state in old:
            _run.close_state(state)


_runs = _Runs()  # the process's table of runs (not a run's state: keyed by run)


def call(
    run_id: str,
    load_context: Callable[[], Any],
    init: Callable[[Any, Any], Any] | None,
    reporter: Reporter | None,
    fn: Callable[[Any], Any],
    arg: Any,
) -> Any:
    """Run ``fn(arg)`` with run ``run_id``'s state (made in this process if need be)."""
    if init is None:
        return fn(arg)
    state = _runs.enter(run_id, lambda: init(load_context(), reporter))
    try:
        return _run.call(state, fn, arg)
    finally:
        _runs.leave(run_id)
