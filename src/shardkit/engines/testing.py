"""Fault injection for checking a cluster setup: a dataset whose worker dies once, and
one that fails while another worker is busy.

Cluster workers import task code from installed packages only, so the faults a test of
Ray or Dask needs must live here rather than in the test files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CrashOnce", "FailWhileAnotherLoads"]


@dataclass(frozen=True)
class CrashOnce:
    """A map-style dataset over ``items``; loading item ``index`` kills the worker process
    (``os._exit``) the first time, as a ``kill -9`` or the OOM killer would. ``marker`` is
    a file created just before the crash: its presence means it has happened.
    """

    items: Sequence[Any]
    index: int
    marker: str

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        if i == self.index and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os._exit(1)
        return self.items[i]


@dataclass(frozen=True)
class FailWhileAnotherLoads:
    """A map-style dataset over ``items`` for two workers: loading item ``slow`` creates
    ``marker`` and then takes ``seconds``; loading item ``fail`` waits for ``marker`` and
    raises RuntimeError (a bug in user code). So the build fails while another worker is
    part way through writing the task that holds ``slow``."""

    items: Sequence[Any]
    slow: int
    fail: int
    marker: str
    seconds: float = 30.0

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        if i == self.slow:
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(self.seconds)
        if i == self.fail:
            deadline = time.monotonic() + 30
            while not os.path.exists(self.marker) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise RuntimeError(f"item {i} is broken")
        return self.items[i]
