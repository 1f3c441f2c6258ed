"""The Ray engine: each task is a Ray task; progress through a small actor."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import ray
from ray import exceptions as ray_errors

from . import _remote
from ._connect import cluster_worker_died

__all__ = ["SETTLE_TIMEOUT_S", "RayExecutor"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Counts = tuple[int, int, int]

SETTLE_TIMEOUT_S = 30.0
"""Seconds a cancelled run waits for its Ray tasks to end before it lets go of Ray."""


class _Sink:
    """Collects progress counts from every task; the driver drains it."""

    def __init__(self) -> None:
        self.counts: list[Counts] = []

    def add(self, counts: Counts) -> None:
        self.counts.append(counts)

    def drain(self) -> list[Counts]:
        counts, self.counts = self.counts, []
        return counts


_untyped: Any = ray
_SinkActor: Any = ray.remote(num_cpus=0)(_Sink)


def _report(sink: Any, samples: int, nbytes: int, skipped: int) -> None:
    sink.add.remote((samples, nbytes, skipped))


def _task(
    run_id: str, box: list[Any], init: Any, sink: Any, fn: Callable[[Any], Any], arg: Any
) -> Any:
    reporter = functools.partial(_report, sink) if sink is not None else None
    return _remote.call(run_id, lambda: ray.get(box[0]), init, reporter, fn, arg)


_remote_task: Any = ray.remote(_task)


def unwrap(exc: BaseException, retries: int) -> BaseException:
    """The exception the task raised (not Ray's wrapper); a BuildError for a dead worker."""
    if isinstance(exc, ray_errors.RayTaskError):
        cause = exc.cause
        if isinstance(cause, BaseException):
            return cause
    if isinstance(exc, (ray_errors.WorkerCrashedError, ray_errors.NodeDiedError)):
        return cluster_worker_died("Ray", retries + 1, exc)
    return exc


class RayExecutor:
    """Runs tasks on a Ray cluster (``address`` None: connect to or start a local one)."""

    def __init__(
        self, address: str | None, *, init: Any = None, context: Any = None, retries: int = 3
    ) -> None:
        self._owns = not ray.is_initialized()
        if self._owns:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        elif address is not None:
            logger.info("Ray is already initialized in this process: using that cluster")
        self.workers = max(1, int(_untyped.cluster_resources().get("CPU", 1)))
        self._retries = retries
        self._run_id = uuid.uuid4().hex
        self._init = init
        self._box = [ray.put(context)] if init is not None else [None]
        self._sink = _SinkActor.remote() if init is not None else None
        self._drain: Any = self._sink.drain.remote() if self._sink is not None else None
        self._refs: dict[int, Any] = {}  # id(out) -> its ref, until its future is set
        self._lock = threading.Lock()
        self._options = _remote_task.options(max_retries=retries, retry_exceptions=False)

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        ref = self._options.remote(self._run_id, self._box, self._init, self._sink, fn, arg)
        out: Future[R] = Future()
        key = id(out)
        with self._lock:
            self._refs[key] = ref

        def done(inner: Future[Any]) -> None:
            try:
                out.set_result(inner.result())
            except BaseException as exc:
                out.set_exception(unwrap(exc, self._retries))
            finally:
                with self._lock:
                    self._refs.pop(key, None)

        ref.future().add_done_callback(done)
        return out

    def _settle(self, refs: list[Any]) -> None:
        """Wait (up to :data:`SETTLE_TIMEOUT_S`) until the cancelled tasks have ended and
        their done callbacks have run: a callback of ``ObjectRef.future()`` still pending
        when Ray shuts down can crash the process (a CI run lost its pytest worker so)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=SETTLE_TIMEOUT_S)
        while time.monotonic() < deadline:
            with self._lock:
                if not self._refs:
                    return
            time.sleep(0.01)

    def progress(self) -> list[Counts]:
        if self._drain is None:
            return []
        ready, _ = ray.wait([self._drain], timeout=0)
        if not ready:
            return []
        counts: list[Counts] = ray.get(self._drain)
        self._drain = self._sink.drain.remote() if self._sink is not None else None
        return counts

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            with self._lock:
                refs = list(self._refs.values())
            for ref in refs:  # force: a running task is not interrupted otherwise, and
                with contextlib.suppress(Exception):  # would go on writing to the output
                    ray.cancel(ref, force=True)
            self._settle(refs)
        if self._sink is not None:
            with contextlib.suppress(Exception):
                ray.kill(self._sink)
            self._sink = self._drain = None
        if self._owns:
            ray.shutdown()
