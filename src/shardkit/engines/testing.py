"""Fault injection for checking a cluster setup: a dataset whose worker dies once.

Cluster workers import task code from installed packages only, so the faults a test of
Ray or Dask needs must live here rather than in the test files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CrashOnce"]


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
