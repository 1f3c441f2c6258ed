"""Knowing, in the main process, that DataLoader workers iterate a dataset.

A ``DataLoader(ds, num_workers=n)`` iterates copies of ``ds`` in worker processes; the
main process's object never moves, so its ``state_dict()`` would describe the start of
an epoch that the workers are half-way through. :class:`Handoff` lets that object know:

* under ``fork`` it is a one-byte anonymous shared memory map, inherited by the workers,
  which set it when they start iterating;
* under ``spawn`` / ``forkserver`` the dataset is pickled to start each worker, and the
  flag sets itself at that moment (the workers get a fresh one).

Other pickling (``copy.copy``, saving a dataset) gives a fresh, unset flag.
"""

from __future__ import annotations

import mmap
from typing import Any

__all__ = ["Handoff"]


class Handoff:
    """A flag that a dataset was handed to worker processes that iterate it."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map = mmap.mmap(-1, 1)  # shared and anonymous on POSIX: survives fork

    def mark(self) -> None:
        self._map[0] = 1

    def is_set(self) -> bool:
        return self._map[0] == 1

    def __reduce__(self) -> tuple[Any, ...]:
        from multiprocessing import context

        if context.get_spawning_popen() is not None:  # pickled to start a worker
            self.mark()
        return (Handoff, ())
