"""fsspec, imported only when a remote URL is opened; and the fork hooks that keep an event
loop running in a thread (fsspec's, the build's downloads) usable across ``fork``."""

from __future__ import annotations

import os
import selectors
import sys
import weakref
from typing import TYPE_CHECKING, Any

from .._optional import missing
from ..errors import StorageError
from ._access import LOCAL, Access
from ._urls import is_local, local_path, url_scheme

if TYPE_CHECKING:
    import asyncio

__all__ = ["REQUESTS_IN_FLIGHT", "detach_loop_at_fork", "filesystem", "protocol", "url_exists"]

REQUESTS_IN_FLIGHT = 16
"""How many independent requests one process keeps in flight to an object store at once,
where it has many to make: the build driver's commits (``builder.commit``) and the
folders of an image folder it lists (``builder.folders``)."""


def _fs(url: str, access: Access) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a required dependency
        raise StorageError("fsspec is required for remote URLs", url=url) from exc
    try:
        fs, path = fsspec.core.url_to_fs(url, **_pooled(url, access.storage_options))
    except ImportError as exc:
        scheme = url_scheme(url)
        if scheme in _SCHEME_MODULES:
            raise missing(_SCHEME_MODULES[scheme], f"{scheme}:// URLs") from exc
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    except ValueError as exc:
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    if type(fs).__module__.partition(".")[0] == "s3fs" and not fs.asynchronous:
        _send_bodies_at_once(fs)
    return fs, path


def _pooled(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with, for S3, a connection pool of ``REQUESTS_IN_FLIGHT`` (botocore's
    default, 10, would hold the 11th request in flight back until one returns), unless
    the caller chose one."""
    if url_scheme(url) not in ("s3", "s3a"):
        return options
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", REQUESTS_IN_FLIGHT)
    return {**options, "config_kwargs": config}


def protocol(fs: Any) -> str:
    """The name of an fsspec filesystem's protocol (its first, where it has several)."""
    name = fs.protocol
    return str(name if isinstance(name, str) else name[0])


def _send_bodies_at_once(fs: Any) -> None:
    """Make the S3 client of ``fs`` send an upload's body with its headers.

    botocore asks for ``Expect: 100-continue`` on every upload, and aiohttp arms no read
    timeout while it waits for the "100 Continue": a PUT the server never answered (a
    loaded server drops one now and then) waited forever. Sent at once, the wait for the
    answer is bounded by ``read_timeout`` and the upload is retried like any request.
    """
    try:
        client = fs.s3  # creates the client (no request is sent) or returns the one made
    except Exception:  # a bad profile, say: the first real call raises it
        return  # where errors are handled, as it did before
    if getattr(fs, "_shardkit_client", None) is client:
        return
    from botocore.handlers import add_expect_header

    client.meta.events.unregister("before-call.s3", add_expect_header)
    fs._shardkit_client = client


# The fsspec implementations shardkit's extras install (see shardkit._optional.EXTRAS).
_SCHEME_MODULES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "http": "aiohttp",
    "https": "aiohttp",
}


# Event loops that run in a thread of their own and hold keep-alive connections: fsspec's
# IO loop (looked up as each fork begins) and those registered by detach_loop_at_fork (the
# build's download loop, builder/_fetch.py). The ones there are as a fork begins, for the
# child to detach.
_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
_loops_at_fork: list[Any] = []


def detach_loop_at_fork(loop: asyncio.AbstractEventLoop) -> None:
    """Have every child forked from now on give ``loop`` a selector of its own
    (:func:`_detach_inherited_loops`), so that nothing the child frees reaches the
    parent's sockets. For a loop running in a thread whose objects a child inherits."""
    _loops.add(loop)


def _note_loops_at_fork() -> None:
    asyn = sys.modules.get("fsspec.asyn")
    fsspec_loop = None if asyn is None else asyn.loop[0]  # fsspec forgets it in the child
    _loops_at_fork[:] = [loop for loop in (fsspec_loop, *_loops) if loop is not None]


def _detach_inherited_loops() -> None:
    """In a forked child: give each event loop inherited from the parent (fsspec's IO
    loop, the download loop) a selector of its own.

    The child inherits the loop and, with it, the parent's epoll set: one kernel object
    the two processes share. When the child frees what it inherited (a DataLoader worker's
    garbage collection frees an fsspec filesystem; a forked build lets go of the parent's
    download session), a finalizer closes that HTTP session, and each keep-alive
    connection it closes is taken out of the shared epoll set. The parent's loop then
    never hears the answer on that connection again: its next request through it waits
    forever, or until its timeout (fsspec's and aiohttp's finalizers do not check that
    they run in the process that made the session). Given an empty selector, the dead
    loop in the child touches nothing of the parent's.
    """
    loops, _loops_at_fork[:] = list(_loops_at_fork), []
    epoll = getattr(selectors, "EpollSelector", None)  # kqueue and poll are not shared
    for loop in loops:
        if epoll is None or not isinstance(getattr(loop, "_selector", None), epoll):
            continue
        inherited, loop._selector = loop._selector, selectors.SelectSelector()
        inherited.close()  # closes the child's descriptor only: the parent's set stays


def _forget_loops_at_fork() -> None:
    _loops_at_fork.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_note_loops_at_fork,
        after_in_parent=_forget_loops_at_fork,
        after_in_child=_detach_inherited_loops,
    )


def filesystem(url: str, access: Access = LOCAL) -> tuple[Any, str]:
    """The fsspec filesystem of a remote URL and the path inside it."""
    return _fs(url, access)


def url_exists(url: str, access: Access = LOCAL) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = _fs(url, access)
    return bool(fs.exists(path))
