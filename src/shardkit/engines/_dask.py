"""The Dask engine: each task is a Dask future; progress through a ``distributed.Queue``.

A task whose worker dies is run again by the scheduler, up to
``distributed.scheduler.allowed-failures`` times (3 by default; then ``KilledWorker``).
Dask's own ``retries=`` is left at 0: it would also re-run tasks that raised an error,
and a bad sample fails the same way every time.

The run's context is scattered to the workers once. Scattered data cannot be recomputed:
when the last worker holding it dies (one worker, or every worker replaced since), Dask
cancels every task that needs it. The executor then scatters the context again and
submits those tasks again, up to ``retries`` times per task.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import distributed as _distributed

from ..errors import BuildError
from . import _remote
from ._connect import CONNECT_TIMEOUT_S, cluster_worker_died, unreachable

__all__ = ["DaskExecutor"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Counts = tuple[int, int, int]

distributed: Any = _distributed  # untyped package
_queues: dict[str, Any] = {}


def _report(name: str, samples: int, nbytes: int, skipped: int) -> None:
    queue = _queues.get(name)
    if queue is None:
        queue = _queues[name] = distributed.Queue(name)
    queue.put((samples, nbytes, skipped))


def _task(
    run_id: str, context: Any, init: Any, queue: str | None, fn: Callable[[Any], Any], arg: Any
) -> Any:
    reporter = functools.partial(_report, queue) if queue is not None else None
    return _remote.call(run_id, lambda: context, init, reporter, fn, arg)


def unwrap(exc: BaseException) -> BaseException:
    """The task's own exception; a BuildError when its workers kept dying."""
    if isinstance(exc, distributed.KilledWorker):
        return cluster_worker_died("Dask", None, exc)
    return exc


class DaskExecutor:
    """Runs tasks on a Dask cluster (``address`` None: the current client, or a new one)."""

    def __init__(
        self, address: str | None, *, init: Any = None, context: Any = None, retries: int = 3
    ) -> None:
        self._owns = True
        self._client: Any = None
        if address is None:
            with contextlib.suppress(ValueError):
                self._client = distributed.get_client()
                self._owns = False
        if self._owns:
            try:
                self._client = distributed.Client(
                    address, set_as_default=False, timeout=CONNECT_TIMEOUT_S
                )
            except OSError as exc:  # "Timed out trying to connect to ..."
                raise unreachable("dask", str(address), str(exc)) from None
        self.workers = max(1, sum(self._client.nthreads().values()))
        self._run_id = uuid.uuid4().hex
        self._init = init
        self._retries = retries
        self._raw_context = context
        self._context: Any = None
        self._queue: Any = None
        self._queue_name: str | None = None
        if init is not None:
            self._context = self._scatter()
            self._queue_name = f"shardkit-progress-{self._run_id}"
            self._queue = distributed.Queue(self._queue_name, client=self._client)
        self._futures: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._closing = False

    def _scatter(self) -> Any:
        return self._client.scatter(self._raw_context, broadcast=True, hash=False)

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        out: Future[R] = Future()
        self._launch(out, fn, arg, self._retries)
        return out

    def _launch(self, out: Future[Any], fn: Callable[[Any], Any], arg: Any, tries: int) -> None:
        with self._lock:
            context = self._context
        inner = self._client.submit(
            _task, self._run_id, context, self._init, self._queue_name, fn, arg, pure=False
        )
        key = id(out)
        with self._lock:
            self._futures[key] = inner

        def done(finished: Any) -> None:
            with self._lock:
                self._futures.pop(key, None)
            try:
                out.set_result(finished.result())
            except distributed.client.FutureCancelledError as exc:
                if context is None or self._closing:
                    out.set_exception(exc)
                else:
                    self._resend(out, fn, arg, tries, context, exc)
            except BaseException as exc:
                out.set_exception(unwrap(exc))

        inner.add_done_callback(done)

    def _resend(
        self,
        out: Future[Any],
        fn: Callable[[Any], Any],
        arg: Any,
        tries: int,
        context: Any,
        exc: BaseException,
    ) -> None:
        """A task cancelled because the cluster lost ``context`` (see the module doc):
        scatter it again (once for all the tasks that needed it) and submit the task
        again; a BuildError once ``tries`` are spent."""
        if tries <= 0:
            error = BuildError(
                f"the Dask cluster lost the build's context {self._retries + 1} times "
                "(its workers keep dying?); rerun the same command to resume"
            )
            error.__cause__ = exc
            out.set_exception(error)
            return
        try:
            with self._lock:
                if self._context is context:
                    logger.warning("the Dask cluster lost the build's context; resending")
                    self._context = self._scatter()
            self._launch(out, fn, arg, tries - 1)
        except BaseException as again:  # the client closed meanwhile: never a hang
            out.set_exception(unwrap(again))

    def progress(self) -> list[Counts]:
        if self._queue is None:
            return []
        size = self._queue.qsize()
        if not size:
            return []
        counts: list[Counts] = [tuple(c) for c in self._queue.get(batch=size)]
        return counts

    def close(self, *, cancel: bool = False) -> None:
        self._closing = True
        with self._lock:
            futures = list(self._futures.values())
        if cancel and futures:
            with contextlib.suppress(Exception):
                self._client.cancel(futures)
        if self._context is not None:
            with contextlib.suppress(Exception):
                self._client.cancel([self._context])
        if self._owns:
            self._client.close()
