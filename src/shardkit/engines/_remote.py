"""The worker-process side of a cluster task: install the run's context once, then call.

A worker process of a Ray or Dask cluster runs tasks of many runs over its life. Each run
has a random ``run_id``; the first task of a run that arrives in a process installs that
run's context through ``init(context, reporter)``; later tasks of the same run reuse it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["call"]

Reporter = Callable[[int, int, int], None]

_lock = threading.Lock()
_installed: str | None = None


def call(
    run_id: str,
    load_context: Callable[[], Any],
    init: Callable[[Any, Any], None] | None,
    reporter: Reporter | None,
    fn: Callable[[Any], Any],
    arg: Any,
) -> Any:
    """Run ``fn(arg)`` after installing run ``run_id``'s context in this process."""
    global _installed
    if init is not None:
        with _lock:
            if _installed != run_id:
                init(load_context(), reporter)
                _installed = run_id
    return fn(arg)
