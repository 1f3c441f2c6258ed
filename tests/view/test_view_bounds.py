"""The viewer's bounds on connections and on what it shows: at most ``connections``
threads serve at once however many clients connect (a further one waits, then is
answered 503), and the stats page, like every other page, answers 409 for a shard that
changed on disk after it was read."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

from helpers.tools import samples, write_shards
from helpers.view import get

from shardkit.tools.view import Viewer


def _address(viewer: Viewer) -> tuple[str, int]:
    host, port = re.fullmatch(r"http://(.*):(\d+)/", viewer.url).groups()  # type: ignore[union-attr]
    return host, int(port)


def _threads_settle(expected: int, seconds: float = 5.0) -> int:
    deadline = time.monotonic() + seconds
    while threading.active_count() > expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return threading.active_count()


def test_slow_clients_get_no_more_than_the_cap_of_threads(tmp_path: Path) -> None:
    write_shards(str(tmp_path / "d"), samples(5))
    cap, extra = 3, 5
    with Viewer(str(tmp_path / "d"), port=0, connections=cap, connection_wait=1.0) as viewer:
        viewer.start()
        assert get(viewer.url, "/")[0] == 200
        before = _threads_settle(threading.active_count() - 1)
        slow = [socket.create_connection(_address(viewer)) for _ in range(cap + extra)]
        try:
            peak = 0
            for sock in slow:  # a request line, never finished: each holds its connection
                sock.sendall(b"GET / HTTP/1.0\r\n")
            for _ in range(50):
                peak = max(peak, threading.active_count() - before)
                time.sleep(0.02)
            assert peak == cap, f"{peak} handler threads for {cap + extra} slow clients"
            # One more client, past the slow ones queued before it: a 503, not a thread.
            started = time.monotonic()
            status, headers, body = get(viewer.url, "/", timeout=60)
            assert status == 503 and headers["Retry-After"] == "5", body[:300]
            assert "nosniff" in headers["X-Content-Type-Options"]
            assert b"too many connections" in body
            assert time.monotonic() - started < 30
            assert threading.active_count() - before <= cap
        finally:
            for sock in slow:
                sock.close()
        _threads_settle(before)
        assert get(viewer.url, "/")[0] == 200  # the slots are free again


def test_a_waiting_connection_is_served_when_a_thread_frees(tmp_path: Path) -> None:
    write_shards(str(tmp_path / "d"), samples(5))
    with Viewer(str(tmp_path / "d"), port=0, connections=1, connection_wait=30.0) as viewer:
        viewer.start()
        slow = socket.create_connection(_address(viewer))
        slow.sendall(b"GET / HTTP/1.0\r\n")
        time.sleep(0.3)
        threading.Timer(1.0, slow.close).start()  # the slow client leaves after a second
        started = time.monotonic()
        assert get(viewer.url, "/style.css", timeout=60)[0] == 200
        assert 0.5 < time.monotonic() - started < 20


def test_the_stats_page_answers_409_for_a_shard_changed_on_disk(tmp_path: Path) -> None:
    urls = write_shards(str(tmp_path / "d"), samples(30))
    with Viewer(str(tmp_path / "d"), port=0).start() as viewer:
        status, _, page = get(viewer.url, "/stats")
        assert status == 200 and b"30 samples" in page
        with open(urls[-1], "r+b") as f:  # overwritten in place: cut short
            f.truncate(1024)
        status, headers, body = get(viewer.url, "/stats")
        assert status == 409, body[:300]
        assert b"shard-000002.tar changed on disk" in body and b"restart" in body
        assert "nosniff" in headers["X-Content-Type-Options"]
