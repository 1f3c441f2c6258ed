"""Helpers for the remote-storage tests: the servers scripts/test-services starts, and
small loopback HTTP servers that misbehave on purpose."""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

HOW = "run the tests through scripts/test-services (as `make test` and .ci/run do)"


def http_service() -> tuple[str, str]:
    """(folder nginx serves, its base URL); fails the test when nginx is not running."""
    root, url = os.environ.get("SHARDKIT_TEST_HTTP_ROOT"), os.environ.get("SHARDKIT_TEST_HTTP_URL")
    if not root or not url:
        pytest.fail(f"no nginx: SHARDKIT_TEST_HTTP_ROOT/URL are not set; {HOW}", pytrace=False)
    folder = os.path.join(root, uuid.uuid4().hex[:12])
    os.makedirs(folder)
    os.chmod(folder, 0o755)
    return folder, f"{url}/{os.path.basename(folder)}"


def s3_options() -> dict[str, str]:
    """fsspec storage options for the SeaweedFS server; fails the test when it is not up."""
    endpoint = os.environ.get("SHARDKIT_TEST_S3_ENDPOINT")
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not endpoint or not key or not secret:
        pytest.fail(f"no S3 server: SHARDKIT_TEST_S3_ENDPOINT is not set; {HOW}", pytrace=False)
    return {"endpoint_url": endpoint, "key": key, "secret": secret}


def gcs_options() -> dict[str, str]:
    """fsspec storage options for the GCS emulator (fake-gcs-server): its endpoint and no
    credentials; fails the test when it is not up. scripts/test-services also exports
    STORAGE_EMULATOR_HOST and FSSPEC_GS_TOKEN, so gs:// URLs work without options too."""
    endpoint = os.environ.get("SHARDKIT_TEST_GCS_ENDPOINT")
    if not endpoint:
        pytest.fail(f"no GCS server: SHARDKIT_TEST_GCS_ENDPOINT is not set; {HOW}", pytrace=False)
    if os.environ.get("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "true").lower() not in ("false", "0"):
        # gcsfs would ask every new bucket its type over gRPC, 60 s each against an emulator.
        pytest.fail(f"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT is not false; {HOW}", pytrace=False)
    return {"endpoint_url": endpoint, "token": "anon"}


# --------------------------------------------------------------------------- a faulty server


@dataclass
class Faults:
    """What the server does to the requests it gets, in order."""

    cut_after: list[int] = field(default_factory=list)  # close after n body bytes
    statuses: list[int] = field(default_factory=list)  # answer with this status instead
    hold_after: int | None = None  # pause the body after n bytes until `release` is set
    stall_after: list[int] = field(default_factory=list)  # send n body bytes, then go silent
    chunked: bool = False  # no Content-Length: a chunked body (Range requests still honoured)
    end_after: list[int] = field(default_factory=list)  # chunked: a clean end after n bytes
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[dict[str, str]] = field(default_factory=list)


_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


def _handle(conn: socket.socket, files: dict[str, bytes], faults: Faults) -> None:
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(4096)
            if not chunk:
                return
            request += chunk
        lines = request.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        faults.requests.append({"method": method, "path": path, **headers})
        data = files.get(path)
        if data is None:
            conn.sendall(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            return
        if faults.statuses:
            code = faults.statuses.pop(0)
            conn.sendall(
                b"HTTP/1.1 %d Oops\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % code
            )
            return
        start, stop, status = 0, len(data), "200 OK"
        match = _RANGE.fullmatch(headers.get("range", ""))
        extra = ""
        if match:
            start, status = int(match.group(1)), "206 Partial Content"
            stop = min(stop, int(match.group(2)) + 1) if match.group(2) else stop
            extra = f"Content-Range: bytes {start}-{stop - 1}/{len(data)}\r\n"
        body = data[start:stop]
        length = "Transfer-Encoding: chunked" if faults.chunked else f"Content-Length: {len(body)}"
        head = (
            f"HTTP/1.1 {status}\r\n{length}\r\nAccept-Ranges: bytes\r\n"
            f"{extra}Connection: close\r\n\r\n"
        )
        conn.sendall(head.encode())
        if method == "HEAD":
            return
        if faults.chunked:
            if method == "GET" and faults.end_after:
                body = body[: faults.end_after.pop(0)]  # ends early, yet cleanly
            for i in range(0, len(body), 4096):
                piece = body[i : i + 4096]
                conn.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.sendall(b"0\r\n\r\n")
            return
        if method == "GET" and faults.cut_after:
            conn.sendall(body[: faults.cut_after.pop(0)])
            return  # closing mid-body: the client sees a reset / incomplete payload
        if method == "GET" and faults.stall_after:
            conn.sendall(body[: faults.stall_after.pop(0)])
            faults.release.wait(60)  # silent, connection open: only a read timeout helps
            return
        if faults.hold_after is not None:
            conn.sendall(body[: faults.hold_after])
            faults.release.wait(30)
            body = body[faults.hold_after :]
        conn.sendall(body)


@contextmanager
def faulty_server(files: dict[str, bytes], faults: Faults) -> Iterator[str]:
    """Serve ``files`` (path -> bytes) on loopback, misbehaving as ``faults`` says."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_handle, args=(conn, files, faults), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        faults.release.set()
        thread.join(5)
        listener.close()


@dataclass
class Held:
    """What a :func:`slow_proxy` held: request lines (GET and HEAD), and the most
    requests held at once (sent by the client at the same time)."""

    requests: list[str] = field(default_factory=list)
    now: int = 0
    peak: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def slow_proxy(
    upstream: str,
    delay: float,
    jitter: float = 0.0,
    seed: int = 0,
    held: Held | None = None,
    only: str = "",
) -> Iterator[str]:
    """A loopback TCP proxy to ``upstream`` that holds every request ``delay`` seconds
    before passing it on, plus up to ``jitter`` more (random, from ``seed``): a distant
    server, one added round trip per request (connections wait independently, so
    requests sent at once overlap as they would over a long link). With ``only``, just the
    requests whose first line holds it are held. What it held is counted in ``held``.
    Used by bench/listing.py too."""
    wait, held = random.Random(seed), Held() if held is None else held

    def hold(request: str) -> None:
        if only not in request.partition("\r\n")[0]:
            return
        with held.lock:
            held.now += 1
            held.peak = max(held.peak, held.now)
            seconds = delay + jitter * wait.random()
        time.sleep(seconds)
        with held.lock:
            held.now -= 1

    with cutting_proxy(upstream, [], held.requests, hold=hold) as url:
        yield url


@contextmanager
def cutting_proxy(
    upstream: str,
    cut_after: list[int],
    requests: list[str],
    swallow: list[str] | None = None,
    hold: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """A loopback TCP proxy to ``upstream`` (``http://host:port``) that closes the
    connection of the first GETs after ``cut_after[i]`` response bytes; every request
    line and Range header seen is appended to ``requests``. The first request whose
    request line starts with ``swallow[i]`` is never forwarded and never answered: its
    connection stays open and silent (a server that lost it). With ``hold``, what a
    client sends is passed on once ``hold(what it sent)`` returns."""
    swallow = [] if swallow is None else swallow
    host, port = upstream.removeprefix("http://").split(":")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def pipe(client: socket.socket) -> None:
        server = socket.create_connection((host, int(port)))
        budget: list[int | None] = [None]

        def upstream_to_client() -> None:
            while True:
                try:
                    data = server.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                if budget[0] is not None:
                    data = data[: budget[0]]
                    budget[0] -= len(data)
                try:
                    client.sendall(data)
                except OSError:
                    break
                if budget[0] == 0:
                    break
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the other thread's recv()
                sock.close()

        threading.Thread(target=upstream_to_client, daemon=True).start()
        while True:
            try:
                data = client.recv(65536)
            except OSError:
                break
            if not data:
                break
            text = data.decode("latin-1")
            for line in text.split("\r\n"):
                if line.startswith(("GET ", "HEAD ")) or line.lower().startswith("range:"):
                    requests.append(line)
            if text.startswith("GET ") and cut_after and budget[0] is None:
                budget[0] = cut_after.pop(0)
            if any(text.startswith(prefix) for prefix in swallow):
                swallow.pop(next(i for i, p in enumerate(swallow) if text.startswith(p)))
                stop.wait(120)  # silent until the proxy stops
                break
            if hold is not None:
                hold(text)
            try:
                server.sendall(data)
            except OSError:
                break

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=pipe, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
