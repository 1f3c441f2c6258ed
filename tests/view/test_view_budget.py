"""The viewer's memory under load (a server in a subprocess, its RSS read from /proc):
thumbnails decode under a budget, what is kept is bounded in bytes, a shard changed on
disk is an answer (409) rather than a SIGBUS, a cancelled request is no traceback."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers.tools import write_shards
from helpers.view import flat_png, get, memory, served, sparse_shard

from shardkit.tools.index import write_indexes

GIANT = 13_000  # a side: 169 Mpx, under the readers' limit (twice Pillow's 89.5 Mpx)
PEAK_LIMIT = 1_500_000_000
ANON_LIMIT = 1_000_000_000


class _Watch:
    """Polls a process's memory; kills it past ``limit`` bytes of RSS (so a test of the
    old code fails early instead of taking the machine's memory)."""

    def __init__(self, pid: int, limit: int) -> None:
        self.pid, self.limit, self.killed = pid, limit, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                rss = memory(self.pid)["VmRSS"]
            except (OSError, KeyError):
                return
            if rss > self.limit:
                self.killed = True
                os.kill(self.pid, 9)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _status(url: str, path: str) -> Any:
    try:
        return get(url, path, timeout=300)
    except OSError as exc:  # the server died
        return None, {}, str(exc).encode()


def test_six_giant_thumbnails_at_once_stay_under_the_budget(tmp_path: Path) -> None:
    from PIL import Image

    png = flat_png(GIANT, GIANT)
    data = [{"__key__": f"giant/{i}", "png": png} for i in range(6)]
    write_shards(str(tmp_path / "d"), data)
    with served(str(tmp_path / "d")) as (url, process):
        watch = _Watch(process.pid, PEAK_LIMIT)
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda i: _status(url, f"/thumb/{i}"), range(6)))
        watch.stop()
        peak = memory(process.pid)["VmHWM"] if process.poll() is None else None
        after = _status(url, "/")[0]
    assert not watch.killed, "the viewer went over 1.5 GB of RSS"
    assert peak is not None and peak < PEAK_LIMIT, peak
    for status, headers, body in answers:
        assert status in (200, 503), (status, body[:200])
        if status == 503:
            assert headers["Retry-After"].isdigit()
        else:
            with Image.open(io.BytesIO(body)) as img:
                assert img.format == "JPEG" and img.size == (160, 160)
                assert img.convert("RGB").getpixel((80, 80)) == pytest.approx((200, 40, 90), abs=3)
    assert sum(status == 200 for status, _, _ in answers) >= 1
    assert after == 200


@pytest.mark.parametrize("indexed", [False, True])
def test_a_page_of_big_samples_keeps_the_viewer_small(tmp_path: Path, indexed: bool) -> None:
    os.makedirs(tmp_path / "d")
    shard = tmp_path / "d" / "shard-000000.tar"
    sparse_shard(shard, 100, 20_000_000)  # 2 GB of samples, a sparse file
    if indexed:
        write_indexes([str(shard)])
    with served(str(tmp_path / "d")) as (url, process):
        status, _, body = get(url, "/?size=100", timeout=300)
        assert status == 200 and b"samples 1-100" in body
        anonymous = memory(process.pid)["RssAnon"]
        assert anonymous < ANON_LIMIT, anonymous
        status, _, body = get(url, "/sample/57", timeout=300)  # read again, whole
        assert status == 200 and b"s00057" in body and b"20,000,000 bytes" in body
        assert get(url, "/sample/57/field/0", timeout=300)[2] == bytes(20_000_000)
        assert memory(process.pid)["RssAnon"] < ANON_LIMIT


def _giant_header_png(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` and whose data is one row."""
    png = flat_png(1, 1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    import zlib

    ihdr = b"IHDR" + header
    chunk = struct.pack(">I", len(header)) + ihdr + struct.pack(">I", zlib.crc32(ihdr))
    return png[:8] + chunk + png[8 + 25 :]


def test_a_picture_over_the_pixel_limit_is_refused_not_decoded(tmp_path: Path) -> None:
    from shardkit.tools.view import Viewer

    data = [{"__key__": "bomb", "png": _giant_header_png(20_000, 20_000)}]
    write_shards(str(tmp_path / "d"), data)
    with Viewer(str(tmp_path / "d"), port=0).start() as viewer:
        status, headers, body = get(viewer.url, "/thumb/0")
    assert status == 422 and headers["Content-Type"].startswith("text/html")
    assert b"pixel limit" in body and "nosniff" in headers["X-Content-Type-Options"]


def test_a_shard_cut_short_while_open_is_an_answer_not_a_crash(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "d")
    shard = tmp_path / "d" / "shard-000000.tar"
    sparse_shard(shard, 40, 100_000)
    with served(str(tmp_path / "d")) as (url, process):
        assert get(url, "/sample/1")[0] == 200  # the shard is open (mapped)
        with open(shard, "r+b") as f:  # overwritten in place: cut short
            f.truncate(4096)
        status, _, body = _status(url, "/sample/30")
        assert process.poll() is None, "the viewer died"
        assert status == 409, body[:300]
        assert b"shard-000000.tar changed on disk" in body and b"restart" in body
        assert get(url, "/style.css")[0] == 200


def test_a_cancelled_request_is_no_traceback(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "d")
    sparse_shard(tmp_path / "d" / "shard-000000.tar", 2, 32_000_000)
    with served(str(tmp_path / "d")) as (url, process):
        host, port = re.fullmatch(r"http://(.*):(\d+)/", url).groups()  # type: ignore[union-attr]
        for _ in range(3):  # a browser leaves a big field half read
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(
                    f"GET /sample/0/field/0 HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
                )
                sock.recv(1000)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(1)
        assert get(url, "/")[0] == 200
        process.kill()
        _, err = process.communicate(timeout=60)
    assert "Traceback" not in err and "Error" not in err, err[-2000:]


def test_a_fatal_bus_error_says_so(tmp_path: Path) -> None:
    """What a mapped shard cut short under a reader does (SIGBUS): the CLI prints it."""
    write_shards(str(tmp_path / "d"), [{"__key__": "a", "txt": "x"}])
    with served(str(tmp_path / "d")) as (url, process):
        assert get(url, "/")[0] == 200
        process.send_signal(signal.SIGBUS)
        _, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGBUS
    assert "Fatal Python error: Bus error" in err, err


def test_the_decode_budget_bounds_decodes_and_bytes_at_once() -> None:
    from shardkit.tools.view._budget import Busy, DecodeBudget, OverBudget

    budget = DecodeBudget(100, slots=2, wait=0)
    with budget.reserve(60):
        with pytest.raises(Busy), budget.reserve(50):  # 60 + 50 bytes is over 100
            pass
        with budget.reserve(40), pytest.raises(Busy), budget.reserve(0):  # no third slot
            pass
    with pytest.raises(OverBudget, match="over the viewer's decode memory"), budget.reserve(101):
        pass
    waiting = DecodeBudget(100, slots=1, wait=30)
    order: list[str] = []
    with waiting.reserve(100):
        thread = threading.Thread(target=lambda: _reserve_and_note(waiting, order))
        thread.start()
        time.sleep(0.3)
        order.append("first done")
    thread.join(30)
    assert order == ["first done", "second ran"]  # it waited its turn, then ran


def _reserve_and_note(budget: Any, order: list[str]) -> None:
    with budget.reserve(100):
        order.append("second ran")


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA"])
def test_thumbnails_scaled_in_place_have_the_pixels_of_a_converted_copy(mode: str) -> None:
    """RGB and grayscale pictures are scaled before they are converted (no full-size
    copy): the same pixels as converting first."""
    from PIL import Image

    from shardkit.tools._media import decode_cost, field_picture

    picture = Image.radial_gradient("L").resize((700, 500)).convert(mode)
    out = io.BytesIO()
    picture.save(out, format="PNG")
    data = out.getvalue()
    expected = Image.open(io.BytesIO(data)).convert("RGB")
    expected.thumbnail((160, 160))
    costs: list[int] = []

    def reserve(nbytes: int) -> Any:
        costs.append(nbytes)
        return contextlib.nullcontext()

    drawn = field_picture("seg.png", memoryview(data), (160, 160), reserve=reserve)
    assert drawn.tobytes() == expected.tobytes()
    with Image.open(io.BytesIO(data)) as img:
        assert costs == [decode_cost(img)]
    per_pixel = {"RGB": 4, "L": 1, "P": 5, "RGBA": 8}[mode]
    assert costs == [700 * 500 * per_pixel]


def test_a_local_shard_s_fields_are_views_of_its_mapping(tmp_path: Path) -> None:
    """The zero-copy path is taken (forward and indexed): a page of big samples costs
    page cache, not the viewer's memory."""
    import mmap

    from shardkit.tools.view import Catalog

    os.makedirs(tmp_path / "d")
    shard = tmp_path / "d" / "shard-000000.tar"
    sparse_shard(shard, 3, 1_000_000)
    for indexed in (False, True):
        if indexed:
            write_indexes([str(shard)])
        catalog = Catalog(str(tmp_path / "d"))
        try:
            assert catalog.indexed == indexed
            field = catalog.sample(2).fields["bin"]  # type: ignore[union-attr]
            assert isinstance(field, memoryview) and isinstance(field.obj, mmap.mmap)
            assert len(field) == 1_000_000
        finally:
            catalog.close()
