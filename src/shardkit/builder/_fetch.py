"""Concurrent http(s) downloads for build tasks, handed back in plan order.

A build's :class:`Downloads` (one per build in each process that runs its tasks) keeps one
event loop in a background thread with one aiohttp session (one connection pool, reused
across tasks) and the per-host breaker. A task submits up to ``fetch_concurrency``
downloads ahead of the item it is writing and takes their results in plan order, so the
shard bytes are those of a one-at-a-time fetch, whatever the concurrency. A forked child
never uses the parent's loop (it makes its own), and the loop goes through the storage
layer's fork hooks (:func:`~shardkit.storage.detach_loop_at_fork`), so that a child
freeing the session it inherited cannot take the parent's connections out of its loop.

Each download is bounded: ``fetch_timeout`` seconds in all (connecting included; not the
time it waits for room, see below) and at most :func:`download_limit` bytes *once decoded*
(a gzip answer is counted as it inflates, and refused the moment it passes the limit),
held in one buffer. The bytes a
worker's downloads hold together are bounded too (:data:`IN_FLIGHT_BYTES`): past it, a
download waits for the task to take earlier ones, unless it is the next one the task
takes. A host that refuses or times out :data:`HOST_FAILURES` times in a row is closed
for the rest of the build in that process: its remaining URLs are skipped at once, with
the reason. The breaker trades reproducibility for speed on such hosts only: had one of
them recovered, the URLs it would then have served are skipped instead (each with its
reason, in the manifest).

Every outcome has a short category (``ok``, ``http 404``, ``timeout``, ``refused``,
``truncated``, ``host skipped``, ...) that the task counts for the manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import os
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .._optional import require
from ..budget import limit
from ..formats.limits import MAX_MEMBER_SIZE
from ..storage import detach_loop_at_fork
from ._sources import Item
from .options import BuildOptions

__all__ = ["HOST_FAILURES", "IN_FLIGHT_BYTES", "Download", "Downloads", "download_limit"]

#: Connection failures or timeouts in a row after which a host's other URLs are skipped.
HOST_FAILURES = 3
_RETRIES = 1  # a 5xx, 429 or a body cut short is tried once more (never a refusal)
_BACKOFF_S = 0.2
_BLOCK = 1 << 20
#: Bytes one worker's downloads hold at most (done, or under way, and not yet taken by
#: the task), beyond the next one the task takes, which may always finish.
IN_FLIGHT_BYTES = 64 << 20


class Download(NamedTuple):
    """A finished download: the bytes, or None with the category and message of the failure."""

    data: bytes | None
    category: str
    message: str


def download_limit(options: BuildOptions) -> int:
    """The most bytes one download may hold once decoded: a shard's ``max_size`` (a sample
    larger than a whole shard is refused), and never more than a tar member may hold (the
    budget's ``member`` limit, within :data:`~shardkit.formats.limits.MAX_MEMBER_SIZE`)."""
    size = options.max_size
    cap = min(MAX_MEMBER_SIZE, limit("member"))
    return cap if size is None else min(cap, int(size))


class Downloads:
    """The http(s) downloads of one build in one process: the per-host breaker, and (made
    at the first URL, again in a forked child) the loop thread with its session.

    :meth:`prefetch` gives a task's items with their downloads; :meth:`close` ends the
    loop thread. Nothing is kept in the module: two builds in one process each have
    their own."""

    def __init__(self, options: BuildOptions) -> None:
        self.concurrency = options.fetch_concurrency
        self.timeout = options.fetch_timeout
        self.limit = download_limit(options)
        self.in_flight = IN_FLIGHT_BYTES
        self.failures: dict[str, tuple[int, str]] = {}  # host -> failures in a row, last
        self._fetcher: _Fetcher | None = None
        self._lock = threading.Lock()

    def _started(self) -> _Fetcher:
        with self._lock:
            if self._fetcher is None or self._fetcher.pid != os.getpid():
                self._fetcher = _Fetcher(self)
            return self._fetcher

    def prefetch(
        self, url_of: Callable[[Item], str], items: list[Item]
    ) -> Iterator[tuple[Item, Future[Download] | None]]:
        """Each item, in order, with its download when ``url_of`` gives it an http(s) URL
        (else None: the source loads it). Up to ``concurrency`` items ahead are
        downloading meanwhile; a download's bytes count toward the bytes in flight until
        the item after it is asked for."""
        fetcher: _Fetcher | None = None
        window: deque[tuple[Item, Future[Download] | None]] = deque()
        pending = iter(items)
        taken: Future[Download] | None = None  # the download the task has now
        try:
            while True:
                while len(window) < self.concurrency:
                    item = next(pending, None)
                    if item is None:
                        break
                    url = url_of(item)
                    if url and fetcher is None:
                        fetcher = self._started()
                    window.append((item, fetcher.submit(url) if url and fetcher else None))
                if taken is not None and fetcher is not None:
                    taken.add_done_callback(fetcher.release)
                    taken = None
                if not window:
                    return
                item, taken = window.popleft()
                yield item, taken
        finally:  # a task that stops early gives back what its downloads hold
            if fetcher is not None:
                for download in [taken, *(d for _, d in window)]:
                    if download is not None:
                        download.add_done_callback(fetcher.release)

    def close(self) -> None:
        """End the loop thread and its session (never another process's, after a fork)."""
        with self._lock:
            fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:
            fetcher.close()


class _Fetcher:
    """An event loop thread with one aiohttp session; the bytes in flight.

    Downloads are numbered as submitted, which is the order the task takes them in. The
    bytes they hold are bounded by ``in_flight``: a download that would go past it waits,
    unless it is the next one the task takes (so the task always moves on)."""

    def __init__(self, owner: Downloads) -> None:
        self.owner = owner
        self.pid = os.getpid()
        self.submitted = 0  # downloads submitted (the task's thread)
        self.released = 0  # downloads taken by the task and released (the loop's thread)
        self.held = 0  # bytes downloads hold
        self.waiting: list[asyncio.Future[None]] = []  # downloads waiting for room
        self.loop = asyncio.new_event_loop()
        detach_loop_at_fork(self.loop)  # a forked child that frees this must not deafen it
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="shardkit-fetch", daemon=True
        )
        self.thread.start()
        try:
            self.session: Any = self._run(self._open(owner.concurrency)).result()
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def _open(self, concurrency: int) -> Any:
        aiohttp = require("aiohttp", "downloading http(s) URLs")
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
        return aiohttp.ClientSession(
            connector=connector,
            raise_for_status=False,
            auto_decompress=False,  # decoded here, a block at a time (_body)
            timeout=aiohttp.ClientTimeout(total=None),  # each download's own _Timer
            headers={"Accept-Encoding": "gzip, deflate"},
        )

    def submit(self, url: str) -> Future[Download]:
        number = self.submitted
        self.submitted += 1
        return self._run(self._get(url, number))

    def release(self, download: Future[Download]) -> None:
        """Give back what a download the task is done with holds (a done callback)."""
        done = not download.cancelled() and download.exception() is None
        data = download.result().data if done else None
        if self.pid != os.getpid():
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits for room
            self.loop.call_soon_threadsafe(self._given_back, len(data or b""), True)

    def _given_back(self, size: int, taken: bool) -> None:
        """(On the loop's thread.) ``size`` bytes are free again; ``taken``: the task is
        done with one more download. Every download waiting for room looks again."""
        self.held -= size
        self.released += taken
        waiting, self.waiting = self.waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    async def _take(self, number: int, size: int, timer: _Timer) -> None:
        while self.held + size > self.owner.in_flight and number != self.released:
            waiter = self.loop.create_future()
            self.waiting.append(waiter)
            timer.pause()  # waiting for the task is not the host's time
            try:
                await waiter
            finally:
                timer.resume()
        self.held += size

    async def _get(self, url: str, number: int) -> Download:
        host = urlsplit(url).netloc.rpartition("@")[2].lower()  # never a password
        failures = self.owner.failures
        for attempt in range(_RETRIES + 1):
            count, last = failures.get(host, (0, ""))
            if count >= HOST_FAILURES:
                return Download(
                    None,
                    "host skipped",
                    f"download skipped: {host} failed {count} times in a row ({last})",
                )
            result, retry = await self._attempt(url, number)
            if result.category in ("timeout", "refused", "cannot connect"):
                # Read again: other downloads from this host may have failed meanwhile.
                now = failures.get(host, (0, ""))[0]
                failures[host] = (now + 1, result.category)
            elif result.data is not None or result.category.startswith("http"):
                failures.pop(host, None)  # the host answered
            if not retry or attempt == _RETRIES:
                return result
            await asyncio.sleep(_BACKOFF_S)
        raise RuntimeError("unreachable")  # pragma: no cover

    async def _attempt(self, url: str, number: int) -> tuple[Download, bool]:
        """One GET: the download, and whether a failure is worth one more try."""
        import aiohttp

        timeout = self.owner.timeout
        timer = _Timer(self.loop, timeout)
        try:
            async with self.session.get(url) as response:
                status = response.status
                if status != 200:
                    what = f"http {status}"
                    retry = status >= 500 or status == 429
                    return Download(None, what, f"download failed: {what}"), retry
                return await self._body(response, number, timer), False
        except asyncio.CancelledError:
            if not timer.expired:
                raise
            return Download(None, "timeout", f"download timed out after {timeout:g} s"), False
        except asyncio.TimeoutError:
            return Download(None, "timeout", f"download timed out after {timeout:g} s"), False
        except aiohttp.ClientConnectorError as exc:
            refused = exc.os_error.errno == errno.ECONNREFUSED
            what = "refused" if refused else "cannot connect"
            return Download(None, what, f"download failed: {what} ({exc.os_error})"), False
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            return Download(None, "truncated", f"download cut short: {exc}"), True
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a malformed URL
            message = f"download failed: {type(exc).__name__}: {exc}"
            return Download(None, "error", message), False
        finally:
            timer.stop()

    async def _body(self, response: Any, number: int, timer: _Timer) -> Download:
        """The body, decoded here (gzip, deflate) a block at a time, in one buffer;
        refused once it would pass the limit, and paused while the worker's downloads
        hold ``in_flight`` bytes. aiohttp's own decoding would inflate a whole network
        read at once (a 64 KB read of a gzip bomb is 64 MB), before any bound applies."""
        limit = self.owner.limit
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in _DECODINGS:
            message = f"download failed: unknown Content-Encoding {encoding[:40]!r}"
            return Download(None, "error", message)
        length = response.content_length
        if length is not None and length > limit:
            return _too_large(f"{length} bytes", limit)
        inflate = _Inflate(_DECODINGS[encoding])
        body, taken, ok = io.BytesIO(), 0, False
        try:
            async for raw in response.content.iter_chunked(_BLOCK):
                for block in inflate.blocks(raw):
                    if taken + len(block) > limit:
                        decoded = " once decoded" if encoding else ""
                        return _too_large(f"more than {limit} bytes{decoded}", limit)
                    await self._take(number, len(block), timer)
                    taken += len(block)
                    body.write(block)
            if not inflate.complete:
                return Download(None, "truncated", f"download cut short: its {encoding} ends early")
            ok = True
            return Download(body.getvalue(), "ok", "")  # the buffer itself, not a copy
        except zlib.error as exc:
            return Download(None, "error", f"download failed: bad {encoding} data ({exc})")
        finally:
            if not ok:
                self._given_back(taken, False)

    def close(self) -> None:
        if self.pid == os.getpid():  # never another process's loop after a fork
            self._run(self.session.close()).result()
            self._stop()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class _Timer:
    """A download's ``fetch_timeout``, in all, but paused while it waits for room: it
    cancels the download's task when its time is up (``expired`` tells that cancel from
    any other)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self.task = asyncio.current_task()
        self.expired = False
        self.left = seconds
        self.handle: asyncio.TimerHandle | None = None
        self.resume()

    def _expire(self) -> None:
        self.expired = True
        if self.task is not None:
            self.task.cancel()

    def pause(self) -> None:
        if self.handle is not None:
            self.left = self.handle.when() - self.loop.time()
            self.handle.cancel()
            self.handle = None

    def resume(self) -> None:
        if self.handle is None and not self.expired:
            self.handle = self.loop.call_later(max(self.left, 0.0), self._expire)

    def stop(self) -> None:
        self.pause()
        if self.expired and self.task is not None and hasattr(self.task, "uncancel"):
            self.task.uncancel()  # the cancel was this timer's, and it is handled


# Content-Encoding -> zlib's wbits (0: none); the request asks for these only.
_DECODINGS = {"": 0, "identity": 0, "gzip": 31, "x-gzip": 31, "deflate": 15}


class _Inflate:
    """A body's bytes decoded a block at a time: at most ``_BLOCK`` bytes per step."""

    def __init__(self, wbits: int) -> None:
        self.wbits = wbits
        self.decoder: Any = None

    def blocks(self, raw: bytes) -> Iterator[bytes]:
        if not self.wbits:
            yield raw
            return
        if self.decoder is None:  # deflate is zlib-wrapped, or raw as some servers send it
            raw_deflate = self.wbits == 15 and raw[:1] and raw[0] & 0x0F != 8
            self.decoder = zlib.decompressobj(-15 if raw_deflate else self.wbits)
        pending = raw
        while pending and not self.decoder.eof:
            block = self.decoder.decompress(pending, _BLOCK)
            pending = self.decoder.unconsumed_tail
            if block:
                yield block

    @property
    def complete(self) -> bool:
        return not self.wbits or (self.decoder is not None and self.decoder.eof)


def _too_large(size: str, limit: int) -> Download:
    message = f"download too large ({size}; the limit is {limit}, the build's max_size)"
    return Download(None, "too large", message)
