"""The decode stage: :class:`shardkit.codecs.Decoder` over the items, in threads when the
process has cores to spare (image decoders release the GIL while they decode).

Only the decoding runs in the threads. Reading, shuffling and every other stage stay on
the thread that iterates, pulling one item whenever the decoders have room for it (at
most ``2 x threads`` in flight), so they behave exactly as without threads and the resume
position stays where it is kept. Items come out in the order they went in; a data error
goes to ``handler`` at that item's turn, any other error is raised there, and an error
from the reader (a cut shard) once the items read before it are out.

The threads belong to one iteration: they start with its first item and end when it
ends, when an error leaves it, or when the iterator is dropped (a ``break``), at most one
decode later. A state saved after that still counts the items the threads had taken
ahead as not consumed.

What a custom or registered decoder raises about the bytes (a ``ValueError``, an
``OSError``) comes out as a :class:`~shardkit.errors.DecodeError` naming the sample, from
the original, as webdataset's ``DecodingError``: bad data, for ``handler=``. Its bugs
(``NameError``, ``AttributeError``, ``TypeError``, ...) propagate as they are.
"""

from __future__ import annotations

import collections
import queue
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .. import config
from ..errors import DecodeError, ShardkitError
from ..handlers import Handler, reraise
from ._context import Context
from ._stages import Stage, guarded, handles, report_error
from ._state import ReadsAhead

__all__ = ["MAX_DEFAULT_THREADS", "Decode", "default_threads"]

#: The most decode threads ``threads=None`` picks. The thread that iterates holds the
#: GIL for ~5% of a 60 KB JPEG's decode (reading, handing over), which leaves room for
#: 8 decoders on 8 cores; past that, raise ``threads=`` and measure.
MAX_DEFAULT_THREADS = 8

_Decode = Callable[[Mapping[str, Any]], dict[str, Any]]


def default_threads(ctx: Context) -> int:
    """Decode threads for ``threads=None``: one per usable core (at most
    :data:`MAX_DEFAULT_THREADS`) when this is the only stream of the node, else 1: a
    DataLoader worker or a DDP rank shares the cores with the others, which decode too."""
    if ctx.world * ctx.workers > 1:
        return 1
    return min(MAX_DEFAULT_THREADS, config.usable_cores())


@dataclass(eq=False)
class Decode(Stage):
    """Decode fields with a :class:`shardkit.codecs.Decoder`, in ``threads`` threads
    (None: :func:`default_threads`); the order of the items never changes."""

    decoder: _Decode
    handler: Handler = reraise
    threads: int | None = None
    catch_all: bool = False  # the stage's own handler= takes what a custom decoder raises

    def __call__(self, items: Iterator[Any], ctx: Context) -> Iterator[Any]:
        threads = default_threads(ctx) if self.threads is None else self.threads
        bind = getattr(self.decoder, "for_stream", None)  # handlers that draw from ctx
        decode = _Wrapping(self.decoder if bind is None else bind(ctx))
        if threads > 1:
            return _ParallelDecode(items, decode, self.handler, threads, self.catch_all)
        return self._serial(items, decode)

    def _serial(self, items: Iterator[Any], decode: _Decode) -> Iterator[Any]:
        return guarded(items, decode, self.handler, self.catch_all)


# What a custom decoder raises that is a bug in it, not bad data: raised as it is.
_BUGS = (
    NameError,
    AttributeError,
    TypeError,
    ImportError,
    AssertionError,
    NotImplementedError,
    RecursionError,
    MemoryError,
    SyntaxError,
)
_MAX_CAUSE = 200  # characters of the wrapped exception's text in a DecodeError


@dataclass(frozen=True)
class _Wrapping:
    """The decoder, with what a custom decoder (``fn(ext, data)``) or a registered one
    raises about the bytes (a ``ValueError``, an ``OSError``, ...) made a
    :class:`~shardkit.errors.DecodeError` naming the sample, from the original, as
    webdataset makes it a ``DecodingError``: bad data, which ``handler=`` policies see.
    shardkit's own errors and the bugs of :data:`_BUGS` (a ``NameError``) pass as they
    are: a bug is never taken for a corrupt sample."""

    decode: _Decode

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self.decode(sample)
        except ShardkitError:
            raise
        except _BUGS:
            raise
        except Exception as exc:
            text = str(exc)
            text = text if len(text) <= _MAX_CAUSE else text[:_MAX_CAUSE] + "..."
            key, url = sample.get("__key__"), sample.get("__url__")
            raise DecodeError(
                f"cannot decode sample: {type(exc).__name__}: {text}",
                url=url if isinstance(url, str) else None,
                key=key if isinstance(key, str) else None,
            ) from exc


class _Ahead:
    """How many items a :class:`_ParallelDecode` has pulled but not handed on (the
    resume position discounts them). It outlives the decoder, which holds no reference
    from the pipeline's progress: dropping the iterator stops the threads."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> int:
        return self.count


# A job: (sequence number, sample); a result: (sequence number, ok, value or exception).
_Job = tuple[int, Mapping[str, Any]]
_Result = tuple[int, bool, Any]


def _work(
    decode: _Decode,
    jobs: queue.SimpleQueue[_Job | None],
    results: queue.SimpleQueue[_Result],
    stop: threading.Event,
) -> None:
    """A decode thread: jobs in, results (or the exception raised) out, until told to stop."""
    while True:
        job = jobs.get()
        if job is None or stop.is_set():
            return
        try:
            result: _Result = (job[0], True, decode(job[1]))
        except BaseException as exc:  # raised in the iterating thread, at its item's turn
            result = (job[0], False, exc)
        results.put(result)
        del job, result  # hold no sample between jobs


class _ParallelDecode(ReadsAhead):
    """Decode ahead in ``threads`` threads, handing the items on in order."""

    def __init__(
        self,
        items: Iterator[Any],
        decode: _Decode,
        handler: Handler,
        threads: int,
        catch_all: bool = False,
    ) -> None:
        self._started = self._closed = False
        self._catch_all = catch_all
        self._failure: Exception | None = None
        self._items = items
        self._handler = handler
        self._depth = 2 * threads
        self._pending: collections.deque[Mapping[str, Any]] = collections.deque()
        self._next = 0  # sequence number of the oldest pending item
        self._early: dict[int, tuple[bool, Any]] = {}  # results that overtook it
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=_work,
                args=(decode, self._jobs, self._results, self._stop),
                name=f"shardkit-decode-{i}",
                daemon=True,  # an iterator kept to the end never holds up exit
            )
            for i in range(threads)
        ]
        self._ahead = _Ahead()
        self.lookahead = self._ahead

    def __iter__(self) -> _ParallelDecode:
        return self

    def __next__(self) -> Any:
        try:
            while True:
                self._fill()
                if not self._pending:
                    self.close()
                    failure, self._failure = self._failure, None
                    if failure is not None:  # after the items read before it
                        raise failure
                    raise StopIteration
                sample = self._pending.popleft()
                self._ahead.count = len(self._pending)
                ok, value = self._result()
                if ok:
                    return value
                if not isinstance(value, Exception) or not handles(value, self._catch_all):
                    raise value
                report_error(self._handler, value, sample)
        except BaseException:  # StopIteration too: the iteration is over either way
            self.close()
            raise

    def _fill(self) -> None:
        if not self._started and not self._closed:
            self._started = True
            for thread in self._threads:
                thread.start()
        while not self._closed and self._failure is None and len(self._pending) < self._depth:
            try:
                sample = next(self._items)
            except StopIteration:
                self._items = iter(())
                return
            except Exception as exc:  # the reader's error (a cut shard): raised in its turn
                self._failure = exc
                self._items = iter(())
                return
            self._jobs.put((self._next + len(self._pending), sample))
            self._pending.append(sample)
            self._ahead.count = len(self._pending)

    def _result(self) -> tuple[bool, Any]:
        """The result of the oldest pending item, waiting for it if need be."""
        wanted = self._next
        self._next += 1
        while wanted not in self._early:
            number, ok, value = self._results.get()
            self._early[number] = (ok, value)
        return self._early.pop(wanted)

    def close(self) -> None:
        """Stop the threads (each finishes the decode it is in) and let go of the
        items; the lookahead count keeps the items that were never handed on."""
        if self._closed:
            return
        self._closed = True
        self._items = iter(())  # the reader's open shards go now, not with the dataset
        self._pending.clear()
        self._early.clear()
        self._stop.set()
        for _ in self._threads:
            self._jobs.put(None)
        current = threading.current_thread()
        for thread in self._threads:
            if thread is not current and thread.ident is not None:
                thread.join()

    def __del__(self) -> None:
        if not sys.is_finalizing():  # at exit the daemon threads are stopped already
            self.close()
