"""The local engine: a process pool on this machine, or the calling process itself.

Both implement :class:`~shardkit.engines.Executor`. Each worker process gets the run's
``context`` once and makes the run's state from it, through ``init(context, reporter)``
(the reporter sends progress counts back to the driver); each task sees that state through
:func:`~shardkit.engines.run_state`. Inline, the state belongs to the executor, and is set
around each task in the calling thread only: two inline runs in two threads of one
process never see each other's (see :mod:`._run`).

The local pool uses the ``forkserver`` start method. ``fork`` starts fastest, but it
copies whatever the calling process holds (threads of torch, tqdm or a user's program,
open locks, a large dataset in memory) and is unsafe with threads (Python 3.12 warns, 3.14
no longer defaults to it on Linux). ``forkserver`` forks workers from a small clean server
process that has already imported shardkit, so it starts almost as fast as ``fork`` and
makes tasks self-contained: everything a worker needs arrives pickled, exactly what a
Ray or Dask worker will need too.

A worker exits as soon as the driver process dies (a thread waits on a pidfd of the
driver), so ``kill -9`` of a build leaves no orphan still writing. Without that, pool
workers of a killed parent wait forever: each holds both ends of its task queue, and the
forkserver stays alive for as long as its children do.

A run that fails stops its other workers with SIGTERM. A worker in the middle of a task
unwinds it first (the task's ``finally`` and ``except`` blocks run, so a part being
written is discarded, not left in the output as a temporary file) and then exits; an
idle one exits at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import BuildError
from . import _run

if TYPE_CHECKING:  # ast loads only to explain a failed start (a build's start stays light)
    import ast

__all__ = [
    "STOP_TIMEOUT_S",
    "UNGUARDED_SCRIPT",
    "InlineExecutor",
    "ProcessExecutor",
    "check_not_bootstrapping",
    "worker_died",
    "warm_up",
]

T = TypeVar("T")
R = TypeVar("R")
Counts = tuple[int, int, int]
InitFn = Callable[[Any, Any], Any]  # init(context, reporter) -> the run's state, per process


class InlineExecutor:
    """Runs each task in the calling thread when it is submitted."""

    workers = 1

    def __init__(self, *, init: InitFn | None = None, context: Any = None) -> None:
        self._counts: list[Counts] = []
        self._state = init(context, self._report) if init is not None else None

    def _report(self, samples: int, nbytes: int, skipped: int) -> None:
        self._counts.append((samples, nbytes, skipped))

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        future: Future[R] = Future()
        try:
            future.set_result(_run.call(self._state, fn, arg))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def progress(self) -> list[Counts]:
        counts, self._counts = self._counts, []
        return counts

    def close(self, *, cancel: bool = False) -> None:
        state, self._state = self._state, None
        _run.close_state(state)


# A pool process serves one run only (each run makes its own pool): its state is set by
# the pool's initializer here, the only way to hand it to that process's tasks.
_state: Any = None


class _Stopped(BaseException):
    """Raised in a worker's task by SIGTERM: the run is being cancelled."""


_in_task = False


def _task(fn: Callable[[T], R], arg: T) -> R:
    """A task in a pool worker; a SIGTERM during it unwinds it, then ends the process."""
    global _in_task
    _in_task = True
    try:
        return _run.call(_state, fn, arg)
    except _Stopped:
        os._exit(1)  # the task has cleaned up; a cancelled run takes no further task
    finally:
        _in_task = False


def _on_sigterm(signum: int, frame: Any) -> None:
    if not _in_task:
        os._exit(1)
    raise _Stopped


def _init_process(init: InitFn | None, context: Any, progress_queue: Any, driver: int) -> None:
    global _state
    signal.signal(signal.SIGTERM, _on_sigterm)
    _exit_with(driver)
    if init is not None:
        _state = init(context, _QueueReporter(progress_queue))


class _QueueReporter:
    """Sends a pool worker's progress counts to the driver."""

    def __init__(self, progress_queue: Any) -> None:
        self._queue = progress_queue

    def __call__(self, samples: int, nbytes: int, skipped: int) -> None:
        self._queue.put((samples, nbytes, skipped))


def _exit_with(pid: int) -> None:
    """Exit this process as soon as process ``pid`` (the driver) ends."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll instead
        fd = -1
    threading.Thread(target=_watch, args=(pid, fd), name="shardkit-watch", daemon=True).start()


def _watch(pid: int, fd: int) -> None:
    if fd >= 0:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not poller.poll():
            pass
        os._exit(1)
    while True:
        time.sleep(1.0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass


UNGUARDED_SCRIPT = (
    "a worker process importing your script started a build again: put the call to "
    "shardkit.build under `if __name__ == '__main__':`"
)
_PRELOAD = ["__main__"]
STOP_TIMEOUT_S = 10.0
"""Seconds a cancelled run's worker has to unwind its task before it is killed."""


def check_not_bootstrapping() -> None:
    """Stop a worker process that, while importing the user's script (as forkserver and
    spawn children do), reaches a build again: the script has no ``if __name__ ==
    "__main__":`` guard. Without this, every worker prints a page of multiprocessing
    traceback. The worker's last words are one line on stderr (the only place a process
    being bootstrapped can say it); the driver then reports the dead workers."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        sys.stderr.write(f"shardkit: {UNGUARDED_SCRIPT}\n")
        sys.stderr.flush()
        os._exit(1)


def _script_call() -> tuple[str, int] | None:
    """The script run as ``__main__`` and the line of its top-level code running now, if
    this call comes from there (a worker process imports that script again)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not path.endswith(".py"):
        return None
    frame: Any = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            return path, frame.f_lineno
        frame = frame.f_back
    return None


def _unguarded(path: str, line: int) -> bool:
    """Whether ``line`` of the script ``path`` is outside every ``if __name__ ==
    "__main__":`` block (False when the script cannot be read back)."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(1 << 22))
    except (OSError, SyntaxError, ValueError):
        return False
    return not any(
        isinstance(node, ast.If)
        and _is_main_test(node.test)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in ast.walk(tree)
    )


def _is_main_test(test: ast.expr) -> bool:
    import ast

    if not isinstance(test, ast.Compare) or len(test.comparators) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def worker_died(exc: BaseException, script_call: tuple[str, int] | None) -> BuildError:
    """The error for a pool whose worker process died (``exc``: the pool's error);
    ``script_call``: where the script run as ``__main__`` started the pool, if it did.

    A script without the ``if __name__ == "__main__":`` guard kills every worker as it
    starts (each imports the script, which starts a build again): the error says to add
    the guard, since rerunning never helps then."""
    if script_call is not None and _unguarded(*script_call):
        path, line = script_call
        message = (
            f"worker processes could not start: {os.path.basename(path)} runs line {line} "
            "at import, and each worker process imports the script; put that call under "
            "`if __name__ == '__main__':`"
        )
    else:
        message = (
            "a worker process died unexpectedly (killed, out of memory, or see the line it "
            "left above); rerun the same command to resume"
        )
    error = BuildError(message)
    error.__cause__ = exc
    return error


def warm_up(preload: Sequence[str] = ()) -> None:
    """Start the forkserver now (it imports shardkit, and ``preload``, in the background),
    so that the pool starts in milliseconds once the source is listed and every worker
    inherits those imports instead of paying for them."""
    from multiprocessing import forkserver

    check_not_bootstrapping()
    multiprocessing.get_context("forkserver").set_forkserver_preload([*_PRELOAD, *preload])
    forkserver.ensure_running()


class ProcessExecutor:
    """A local pool of ``workers`` processes (forkserver), progress through one queue.

    ``preload`` names modules the forkserver imports once for every worker (the module
    holding ``init`` and the task functions). A task whose worker died fails with
    :func:`worker_died`'s BuildError."""

    def __init__(
        self,
        workers: int,
        *,
        init: InitFn | None = None,
        context: Any = None,
        preload: Sequence[str] = (),
    ) -> None:
        check_not_bootstrapping()
        mp = multiprocessing.get_context("forkserver")
        mp.set_forkserver_preload([*_PRELOAD, *preload])
        self.workers = workers
        self._script_call = _script_call()  # for the error, if the workers cannot start
        self._queue = mp.Queue()
        self._pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=mp,
            initializer=_init_process,
            initargs=(init, context, self._queue, os.getpid()),
        )

    def submit(self, fn: Callable[[T], R], arg: T) -> Future[R]:
        try:
            inner = self._pool.submit(_task, fn, arg)
        except BrokenProcessPool as exc:  # a worker died before this task was handed out
            raise worker_died(exc, self._script_call) from exc
        out: Future[R] = Future()

        def done(finished: Future[R]) -> None:
            if finished.cancelled():
                out.cancel()
                return
            exc = finished.exception()
            if exc is None:
                out.set_result(finished.result())
            elif isinstance(exc, BrokenProcessPool):
                out.set_exception(worker_died(exc, self._script_call))
            else:
                out.set_exception(exc)

        inner.add_done_callback(done)
        return out

    def progress(self) -> list[Counts]:
        counts: list[Counts] = []
        with contextlib.suppress(queue.Empty):
            while True:
                counts.append(self._queue.get_nowait())
        return counts

    def close(self, *, cancel: bool = False) -> None:
        if cancel:
            self._stop()
        else:
            self._pool.shutdown(wait=True)
        self._queue.close()
        self._queue.join_thread()

    def _stop(self) -> None:
        """Cancel the tasks not started, and stop the workers (see the module doc): they
        unwind the task they are in and exit; a worker that has not exited after
        :data:`STOP_TIMEOUT_S` is killed. Returns once every worker is gone."""
        # Taken first: shutdown() forgets the processes and the manager thread.
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):
                process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        if manager is not None:
            manager.join()
