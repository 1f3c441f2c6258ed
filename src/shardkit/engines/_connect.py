"""Reaching a cluster: a bounded check that something listens at ``--address``.

Ray retries a GCS address with nothing behind it for minutes, and Dask waits 30 s and then
raises a bare ``OSError``. A TCP connection attempt bounded by :data:`CONNECT_TIMEOUT_S`
says the same in one line, before anything is started or written. A worker that keeps
dying under a task is said in one line too (:func:`cluster_worker_died`), whichever cluster.
"""

from __future__ import annotations

import socket

from ..errors import BuildError, ConfigError

__all__ = ["CONNECT_TIMEOUT_S", "check_reachable", "unreachable", "cluster_worker_died"]

#: The longest a run waits to reach a cluster's address before it stops (seconds).
CONNECT_TIMEOUT_S = 10.0


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``HOST:PORT``, ``ray://HOST:PORT``, ``tcp://HOST:PORT``; None for
    other forms (``auto``, ``inproc://...``), which the cluster library resolves itself."""
    rest = address.partition("://")[2] if "://" in address else address
    host, sep, port = rest.split("/", 1)[0].rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def unreachable(engine: str, address: str, reason: str) -> ConfigError:
    """The one-line error for a cluster that cannot be reached."""
    return ConfigError(
        f"cannot reach the {engine} cluster at {address!r} ({reason}) within "
        f"{CONNECT_TIMEOUT_S:g} s: is it running, and is that its address?"
    )


def cluster_worker_died(engine: str, times: int | None, exc: BaseException) -> BuildError:
    """The one-line error for a task whose worker died ``times`` times (None: each time
    the cluster ran it), caused by the cluster's own ``exc``."""
    tries = "each time it ran" if times is None else f"{times} times running"
    error = BuildError(
        f"a {engine} worker died {tries} the same task (killed, or out of memory?); "
        "rerun the same command to resume"
    )
    error.__cause__ = exc
    return error


def check_reachable(engine: str, address: str | None) -> None:
    """Raise ConfigError unless something accepts connections at ``address``."""
    if engine == "local" or address is None:
        return
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise unreachable(engine, address, reason) from None
