"""The decode stage: :class:`shardkit.codecs.Decoder` over the items, in a thread pool
when the process has cores to spare (image decoding releases the GIL)."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import DataError
from ..handlers import Handler, reraise
from .context import Context, usable_cores
from .stages import Stage, report_bad_data

__all__ = ["Decode"]


@dataclass(eq=False)
class Decode(Stage):
    """Decode fields with a :class:`shardkit.codecs.Decoder`, in ``threads`` threads.

    ``threads=None`` picks: several threads (up to 4, one per usable core) when this is
    the only stream of the node (no DataLoader workers, one rank), else 1, since workers
    already decode in parallel. Image decoding releases the GIL, so threads scale; the
    order of the items never changes.
    """

    decoder: Callable[[Mapping[str, Any]], dict[str, Any]]
    handler: Handler = reraise
    threads: int | None = None

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        threads = self.threads
        if threads is None:
            threads = min(4, usable_cores()) if ctx.world * ctx.workers == 1 else 1
        if threads > 1:
            return _ParallelDecode(items, self.decoder, self.handler, threads)
        return self._serial(items)

    def _serial(self, items: Iterator[Any]) -> Iterator[Any]:
        decode, handler = self.decoder, self.handler
        for sample in items:
            try:
                out = decode(sample)
            except DataError as exc:
                report_bad_data(handler, exc, sample)
                continue
            yield out


class _ParallelDecode:
    """Decode ahead in a thread pool, yielding in order; ``lookahead()`` says how many
    items it has pulled but not yet handed on (the resume position discounts them)."""

    def __init__(
        self,
        items: Iterator[Any],
        decode: Callable[[Mapping[str, Any]], dict[str, Any]],
        handler: Handler,
        threads: int,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._items = items
        self._decode = decode
        self._handler = handler
        self._depth = 2 * threads
        self._pool: Any = ThreadPoolExecutor(threads, thread_name_prefix="shardkit-decode")
        self._pending: collections.deque[tuple[Any, Any]] = collections.deque()
        self._exhausted = False

    def lookahead(self) -> int:
        return len(self._pending)

    def __iter__(self) -> _ParallelDecode:
        return self

    def __next__(self) -> Any:
        while True:
            self._fill()
            if not self._pending:
                self.close()
                raise StopIteration
            sample, future = self._pending.popleft()
            try:
                return future.result()
            except DataError as exc:
                report_bad_data(self._handler, exc, sample)

    def _fill(self) -> None:
        while not self._exhausted and len(self._pending) < self._depth:
            try:
                sample = next(self._items)
            except StopIteration:
                self._exhausted = True
                return
            self._pending.append((sample, self._pool.submit(self._decode, sample)))

    def close(self) -> None:
        self._pending.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        self.close()
