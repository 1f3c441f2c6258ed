"""The viewer's decode budget: how many thumbnails decode at once, and how many bytes of
decoded pixels they hold together.

A decode asks for the bytes it will hold (from the picture's header:
:func:`shardkit.tools._media.decode_cost`) before it starts; it waits, at most ``wait``
seconds, until a slot and the bytes are free, then runs. One that waits longer is
:class:`Busy` (the server answers 503 with ``Retry-After``); one that alone needs more than
the whole budget is :class:`OverBudget` (refused at once: it can never run).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ...errors import DataError, ShardkitError
from ...units import format_size

__all__ = ["Busy", "DecodeBudget", "OverBudget"]


class Busy(ShardkitError):
    """No decode slot came free in time: try again later."""


class OverBudget(DataError):
    """One decode would hold more memory than the viewer allows for all of them."""


class DecodeBudget:
    """At most ``slots`` decodes at once, holding at most ``nbytes`` together."""

    def __init__(self, nbytes: int, *, slots: int, wait: float) -> None:
        if nbytes < 1 or slots < 1 or wait < 0:
            raise ValueError("a decode budget needs nbytes, slots >= 1 and wait >= 0")
        self.nbytes, self.slots, self.wait = nbytes, slots, wait
        self._free = threading.Condition()
        self._active = 0
        self._used = 0

    @contextlib.contextmanager
    def reserve(self, nbytes: int) -> Iterator[None]:
        """Hold ``nbytes`` and a slot while the block runs (see the module docs)."""
        if nbytes > self.nbytes:
            raise OverBudget(
                f"decoding it takes {format_size(nbytes)}, over the viewer's decode memory "
                f"of {format_size(self.nbytes)}"
            )
        with self._free:
            if not self._free.wait_for(lambda: self._fits(nbytes), timeout=self.wait):
                raise Busy(f"every decode slot stayed busy for {self.wait:g} s")
            self._active += 1
            self._used += nbytes
        try:
            yield
        finally:
            with self._free:
                self._active -= 1
                self._used -= nbytes
                self._free.notify_all()

    def _fits(self, nbytes: int) -> bool:
        return self._active < self.slots and self._used + nbytes <= self.nbytes
