"""The lock of an object-store OUT: a lease object, ``OUT/.shardkit-build.lock``.
(:func:`store_lock` is every build's door to its output's lock: ``flock`` on a folder,
this lease on an object store.)

An object store has no ``flock``, and a killed driver cannot release anything, so the lock
is a lease: a small JSON object naming its holder (a random owner id, host, pid) and when
it expires. The driver writes it before touching OUT, a heartbeat thread renews it every
``ttl / 6`` seconds while the build runs, and it is deleted at the end.

- A second build into the same OUT while the lease is live fails at once with a
  :class:`~shardkit.errors.BuildError` naming the holder.
- An expired lease (its driver was killed, or lost the network for longer than ``ttl``)
  is taken over; so is a lease held by a process of this very host that no longer exists
  (a ``kill -9``'ed build rerun on the same machine does not wait for the expiry). A pid
  is judged only where it means the same process: the same host name, boot and pid
  namespace (containers that share a host name, with host networking, each have their
  own pids, and one must not take over another's live lease).
- On S3 the writes are conditional (``If-None-Match: *`` to create, ``If-Match: ETAG`` to
  take over or renew), so of two drivers racing for the same lease exactly one wins, and a
  driver whose lease was taken over learns it at its next renewal. Other stores (no
  conditional writes through fsspec) write it plainly and read it back: that narrows the
  race but does not close it. Either way the lease is advisory: it keeps shardkit builds
  apart, not other writers; and expiry compares the holder's clock with the reader's.

The driver calls :meth:`Lease.check` before each commit and before the manifest: a build
that lost its lease stops with a BuildError instead of writing over another build.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import BuildError
from ..formats.jsondoc import load_json
from ._journal import LOCK_NAME, output_lock
from ._store import ObjectStore, PreconditionFailed, Store

__all__ = ["LEASE_TTL_S", "Lease", "hold_lease", "store_lock"]

logger = logging.getLogger(__name__)

LEASE_TTL_S = 60.0
_ATTEMPTS = 5
_SETTLE_S = 0.2  # pause before reading back a lease written without a condition


@contextlib.contextmanager
def hold_lease(store: ObjectStore, ttl: float = LEASE_TTL_S) -> Iterator[Lease]:
    """Hold the build lease of ``store`` (renewed in the background) for the block."""
    lease = Lease(store, ttl)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()


class Lease:
    """One driver's lease on an object-store OUT (see the module docstring)."""

    def __init__(self, store: ObjectStore, ttl: float = LEASE_TTL_S) -> None:
        self.store = store
        self.ttl = ttl
        import uuid  # here: uuid imports platform, which a local build never needs

        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.pid_space = _pid_space()
        self.expires = 0.0
        self._etag = ""
        self._lost = ""  # why the lease was lost, once it was
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.store.join(LOCK_NAME)

    def _body(self, expires: float) -> bytes:
        record = {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "pid_space": self.pid_space,
            "expires": round(expires, 3),
            "ttl": self.ttl,
        }
        return json.dumps(record).encode()

    # -- taking it
    def acquire(self) -> None:
        """Take the lease, or raise BuildError if another live build holds it."""
        for _ in range(_ATTEMPTS):
            current = self.store.stat(LOCK_NAME)
            match = "*"
            if current is not None:
                data, match = current
                holder = _parse(data)
                if self._alive(holder):
                    raise BuildError(_held_message(holder), url=self.store.url)
                logger.warning("%s: taking over the lease of a build %s", self.url, _who(holder))
            expires = time.time() + self.ttl
            try:
                etag = self.store.put(LOCK_NAME, self._body(expires), match=match)
            except PreconditionFailed:
                continue  # another driver wrote it meanwhile: look again
            if self._confirm(etag):
                self.expires = expires
                self._start_heartbeat()
                return
        raise BuildError(
            "another build keeps taking the lease of this output (.shardkit-build.lock); "
            "wait for it to finish",
            url=self.store.url,
        )

    def _confirm(self, etag: str) -> bool:
        """Read the lease back: is it ours? (With conditional writes it must be.)"""
        if not etag:  # written without a condition: let a racing writer land first
            time.sleep(_SETTLE_S)
        current = self.store.stat(LOCK_NAME)
        if current is None or _parse(current[0]).get("owner") != self.owner:
            return False
        self._etag = current[1] or etag
        return True

    def _alive(self, holder: dict[str, Any]) -> bool:
        if not holder:
            return False  # unreadable: not a lease anyone can renew
        same_pids = holder.get("host") == self.host and holder.get("pid_space") == self.pid_space
        if same_pids and not _pid_alive(holder.get("pid")):
            return False  # its driver on this machine (and in this pid namespace) is gone
        expires = holder.get("expires")
        return isinstance(expires, (int, float)) and expires > time.time()

    # -- keeping it
    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="shardkit-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 6):
            self.renew()

    def renew(self) -> None:
        """Push the expiry forward (the heartbeat calls this)."""
        with self._lock:
            if self._lost:
                return
            expires = time.time() + self.ttl
            try:
                if not self.store.conditional and not self._still_ours():
                    raise PreconditionFailed(LOCK_NAME)
                etag = self.store.put(LOCK_NAME, self._body(expires), match=self._etag or None)
            except PreconditionFailed:
                self._lost = "another build took it over"
                logger.error("%s: %s", self.url, self._lost)
                return
            except OSError as exc:  # a transient failure: the next beat tries again
                logger.warning("%s: could not renew the build lease: %s", self.url, exc)
                return
            self._etag = etag or self._etag
            self.expires = expires

    def _still_ours(self) -> bool:
        current = self.store.stat(LOCK_NAME)
        return current is not None and _parse(current[0]).get("owner") == self.owner

    def check(self) -> None:
        """Raise BuildError if the lease was lost (taken over, or not renewed in time)."""
        with self._lock:
            lost = self._lost or ("it expired" if time.time() >= self.expires else "")
        if lost:
            raise BuildError(
                f"this build lost its lease on the output ({lost}); another build may be "
                "writing there: rerun this one to resume once that one is done",
                url=self.store.url,
            )

    # -- giving it back
    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._lost:
                return
        try:
            if self._still_ours():
                self.store.remove([LOCK_NAME])
        except OSError as exc:  # left behind, it expires; the next build takes it over
            logger.warning("%s: could not remove the build lease: %s", self.url, exc)


def _parse(data: bytes) -> dict[str, Any]:
    try:
        record = load_json(data, what="the build lease")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _pid_space() -> str:
    """What makes a pid name one process here: this boot of this machine and this pid
    namespace (``""`` where /proc cannot tell; then only the host name is compared)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}"


def _pid_alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _who(holder: dict[str, Any]) -> str:
    return f"on host {holder.get('host', '?')}, pid {holder.get('pid', '?')}"


def _held_message(holder: dict[str, Any]) -> str:
    left = max(0, round(float(holder.get("expires", 0)) - time.time()))
    return (
        f"another build is writing to this output ({_who(holder)}; its lease "
        f".shardkit-build.lock expires in {left} s unless renewed); wait for it to finish, "
        "or if that build was killed, rerun once the lease has expired"
    )


@contextlib.contextmanager
def store_lock(store: Store) -> Iterator[Callable[[], None]]:
    """Hold the lock of the output ``store`` (``flock`` on a folder, a lease object on an
    object store); yields a check that raises once it is lost."""
    remote = store.object_store
    if remote is None:
        with output_lock(store.url):  # flock: held until this process ends
            yield lambda: None
        return
    with hold_lease(remote) as lease:
        yield lease.check
