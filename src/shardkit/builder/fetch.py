"""Concurrent http(s) downloads for build tasks, handed back in plan order.

A worker process keeps one event loop in a background thread with one aiohttp session
(one connection pool, reused across tasks). A task submits up to ``fetch_concurrency``
downloads ahead of the item it is writing and takes their results in plan order, so the
shard bytes are those of a one-at-a-time fetch, whatever the concurrency. A forked child
never uses the parent's loop (it makes its own), and the loop goes through the storage
layer's fork hooks (:func:`~shardkit.storage.detach_loop_at_fork`), so that a child
freeing the session it inherited cannot take the parent's connections out of its loop.

Each download is bounded: ``fetch_timeout`` seconds in all (connecting included) and at
most :data:`~shardkit.formats.tar.MAX_MEMBER_SIZE` bytes. A host that refuses or times
out :data:`HOST_FAILURES` times in a row is closed for the rest of the worker's life:
its remaining URLs are skipped at once, with the reason. The breaker trades
reproducibility for speed on such hosts only: had one of them recovered, the URLs it
would then have served are skipped instead (each with its reason, in the manifest).

Every outcome has a short category (``ok``, ``http 404``, ``timeout``, ``refused``,
``truncated``, ``host skipped``, ...) that the task counts for the manifest.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .._optional import require
from ..formats.tar import MAX_MEMBER_SIZE
from ..storage import detach_loop_at_fork
from .sources import Item

__all__ = ["HOST_FAILURES", "Download", "close_fetcher", "prefetch"]

#: Connection failures or timeouts in a row after which a host's other URLs are skipped.
HOST_FAILURES = 3
_RETRIES = 1  # a 5xx, 429 or a body cut short is tried once more (never a refusal)
_BACKOFF_S = 0.2
_BLOCK = 1 << 20


class Download(NamedTuple):
    """A finished download: the bytes, or None with the category and message of the failure."""

    data: bytes | None
    category: str
    message: str


class _Fetcher:
    """An event loop thread with one aiohttp session, and the per-host breaker."""

    def __init__(self, concurrency: int, timeout: float) -> None:
        self.settings = (concurrency, timeout, os.getpid())
        self.timeout = timeout
        self.failures: dict[str, tuple[int, str]] = {}  # host -> failures in a row, last
        self.loop = asyncio.new_event_loop()
        detach_loop_at_fork(self.loop)  # a forked child that frees this must not deafen it
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="shardkit-fetch", daemon=True
        )
        self.thread.start()
        try:
            self.session: Any = self._run(self._open(concurrency)).result()
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Any) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def _open(self, concurrency: int) -> Any:
        aiohttp = require("aiohttp", "downloading http(s) URLs")
        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
        return aiohttp.ClientSession(connector=connector, raise_for_status=False)

    def submit(self, url: str) -> Future[Download]:
        return self._run(self._get(url))

    async def _get(self, url: str) -> Download:
        host = urlsplit(url).netloc.rpartition("@")[2].lower()  # never a password
        for attempt in range(_RETRIES + 1):
            count, last = self.failures.get(host, (0, ""))
            if count >= HOST_FAILURES:
                return Download(
                    None,
                    "host skipped",
                    f"download skipped: {host} failed {count} times in a row ({last})",
                )
            result, retry = await self._attempt(url)
            if result.category in ("timeout", "refused", "cannot connect"):
                # Read again: other downloads from this host may have failed meanwhile.
                now = self.failures.get(host, (0, ""))[0]
                self.failures[host] = (now + 1, result.category)
            elif result.data is not None or result.category.startswith("http"):
                self.failures.pop(host, None)  # the host answered
            if not retry or attempt == _RETRIES:
                return result
            await asyncio.sleep(_BACKOFF_S)
        raise RuntimeError("unreachable")  # pragma: no cover

    async def _attempt(self, url: str) -> tuple[Download, bool]:
        """One GET: the download, and whether a failure is worth one more try."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with self.session.get(url, timeout=timeout) as response:
                status = response.status
                if status != 200:
                    what = f"http {status}"
                    retry = status >= 500 or status == 429
                    return Download(None, what, f"download failed: {what}"), retry
                return await _body(response), False
        except asyncio.TimeoutError:
            return Download(None, "timeout", f"download timed out after {self.timeout:g} s"), False
        except aiohttp.ClientConnectorError as exc:
            refused = exc.os_error.errno == errno.ECONNREFUSED
            what = "refused" if refused else "cannot connect"
            return Download(None, what, f"download failed: {what} ({exc.os_error})"), False
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            return Download(None, "truncated", f"download cut short: {exc}"), True
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a malformed URL
            message = f"download failed: {type(exc).__name__}: {exc}"
            return Download(None, "error", message), False

    def close(self) -> None:
        if self.settings[2] == os.getpid():  # never another process's loop after a fork
            self._run(self.session.close()).result()
            self._stop()

    def _stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def _body(response: Any) -> Download:
    length = response.content_length
    if length is not None and length > MAX_MEMBER_SIZE:
        return _too_large(length)
    data = bytearray()
    async for block in response.content.iter_chunked(_BLOCK):
        data += block
        if len(data) > MAX_MEMBER_SIZE:
            return _too_large(len(data))
    return Download(bytes(data), "ok", "")


def _too_large(size: int) -> Download:
    message = f"download too large ({size} bytes; the limit is {MAX_MEMBER_SIZE})"
    return Download(None, "too large", message)


_fetcher: _Fetcher | None = None
_lock = threading.Lock()


def _get_fetcher(concurrency: int, timeout: float) -> _Fetcher:
    global _fetcher
    with _lock:
        if _fetcher is None or _fetcher.settings != (concurrency, timeout, os.getpid()):
            close_fetcher()
            _fetcher = _Fetcher(concurrency, timeout)
        return _fetcher


def close_fetcher() -> None:
    """Close this process's session and loop thread, if there is one."""
    global _fetcher
    fetcher, _fetcher = _fetcher, None
    if fetcher is not None:
        fetcher.close()


def prefetch(
    url_of: Callable[[Item], str], items: list[Item], *, concurrency: int, timeout: float
) -> Iterator[tuple[Item, Future[Download] | None]]:
    """Each item, in order, with its download when ``url_of`` gives it an http(s) URL
    (else None: the source loads it). Up to ``concurrency`` items ahead are downloading
    meanwhile."""
    fetcher: _Fetcher | None = None
    window: deque[tuple[Item, Future[Download] | None]] = deque()
    pending = iter(items)
    while True:
        while len(window) < concurrency:
            item = next(pending, None)
            if item is None:
                break
            url = url_of(item)
            if url and fetcher is None:
                fetcher = _get_fetcher(concurrency, timeout)
            window.append((item, fetcher.submit(url) if url and fetcher else None))
        if not window:
            return
        yield window.popleft()
