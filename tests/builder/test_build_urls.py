"""Building from a list of http(s) URLs (nginx from scripts/test-services): concurrent
downloads in plan order, validation of every download, per-task fetch statistics in the
manifest, and a per-host breaker that skips a dead or hanging host without waiting."""

from __future__ import annotations

import http.server
import itertools
import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.build import read_samples, run_cli, snapshot, write
from helpers.hostile import run_measured, zeros_gzip
from helpers.remote import http_service

import shardkit
from shardkit import BuildOptions
from shardkit.demo import make_jpeg
from shardkit.errors import ConfigError

GOOD, BROKEN, MISSING = 60, 6, 5


@pytest.fixture(scope="module")
def served() -> tuple[list[str], dict[str, bytes]]:
    """URLs of GOOD JPEGs, BROKEN ones (cut short, not an image) and MISSING (404), in a
    shuffled order; and the bytes of each good one by URL."""
    folder, url = http_service()
    rng = random.Random(3)
    good: dict[str, bytes] = {}
    urls = []
    for i in range(GOOD):
        data = make_jpeg(rng, i)
        write(folder, f"img/{i:04d}.jpg", data)
        good[f"{url}/img/{i:04d}.jpg"] = data
        urls.append(f"{url}/img/{i:04d}.jpg")
    for i in range(BROKEN):
        data = make_jpeg(rng, i)[:300] if i % 2 else b"<html>not an image</html>"
        write(folder, f"img/bad{i}.jpg", data)
        urls.append(f"{url}/img/bad{i}.jpg")
    urls += [f"{url}/img/missing{i}.jpg" for i in range(MISSING)]
    rng.shuffle(urls)
    return urls, good


def _list(tmp_path: Path, urls: list[str], name: str = "urls.csv") -> str:
    path = tmp_path / name
    path.write_text("path,label\n" + "".join(f"{u},{i % 3}\n" for i, u in enumerate(urls)))
    return str(path)


@pytest.mark.parametrize(("concurrency", "workers"), [(16, 2), (3, 1)])
def test_concurrent_downloads_give_the_bytes_of_one_at_a_time(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path, concurrency: int, workers: int
) -> None:
    urls, good = served
    source = _list(tmp_path, urls)
    base = BuildOptions(max_count=16, seed=2, workers=1, fetch_concurrency=1)
    shardkit.build(source, tmp_path / "one", options=base)
    options = BuildOptions(max_count=16, seed=2, workers=workers, fetch_concurrency=concurrency)
    result = shardkit.build(source, tmp_path / "many", options=options)
    assert snapshot(str(tmp_path / "many")) == snapshot(str(tmp_path / "one"))
    assert result.samples == GOOD
    assert result.fetch == {"http 404": MISSING, "invalid image": BROKEN, "ok": GOOD}
    packed = read_samples(str(tmp_path / "many"))
    assert sorted(s["jpg"] for s in packed) == sorted(good.values())  # nothing broken packed


def test_the_manifest_counts_downloads_per_shard_and_in_total(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    urls, _ = served
    options = BuildOptions(max_count=16, seed=2, workers=2)
    shardkit.build(_list(tmp_path, urls), tmp_path / "out", options=options)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    fetch = manifest["fetch"]
    assert fetch["total"] == {"http 404": MISSING, "invalid image": BROKEN, "ok": GOOD}
    assert len(fetch["shards"]) == len(manifest["shards"]) == 4
    for counts, shard in zip(fetch["shards"], manifest["shards"], strict=True):
        assert counts.get("ok", 0) == shard["samples"]  # every sample is a download
    summed: dict[str, int] = {}
    for counts in fetch["shards"]:
        for what, n in counts.items():
            summed[what] = summed.get(what, 0) + n
    assert summed == fetch["total"]
    reasons = {r["reason"] for r in manifest["skipped"]}
    assert "download failed: http 404" in reasons
    assert len(manifest["skipped"]) == BROKEN + MISSING


@pytest.fixture
def dead_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])  # closed again: connections are refused


@pytest.fixture
def hanging_host() -> Iterator[str]:
    """A host that accepts connections (in the kernel's backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=256) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_dead_port_and_a_hanging_host_are_skipped_without_waiting(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path, dead_port: int, hanging_host: str
) -> None:
    urls, _ = served
    dead = [f"http://127.0.0.1:{dead_port}/x{i}.jpg" for i in range(40)]
    hung = [f"{hanging_host}/y{i}.jpg" for i in range(40)]
    mixed = [u for trio in zip(urls, dead, hung, strict=False) for u in trio] + urls[40:]
    # A 3 s limit: the good server answers well inside it even on a loaded machine.
    options = BuildOptions(max_count=16, workers=1, fetch_concurrency=4, fetch_timeout=3)
    started = time.monotonic()
    result = shardkit.build(_list(tmp_path, mixed), tmp_path / "out", options=options)
    took = time.monotonic() - started
    # Without the breaker: 40 timeouts of 3 s, 4 at a time = 30 s or more.
    assert took < 20, took
    assert result.samples == GOOD
    fetch = result.fetch
    assert fetch["refused"] >= 3 and fetch["timeout"] >= 3
    assert fetch["refused"] + fetch["timeout"] + fetch["host skipped"] == 80
    assert fetch["host skipped"] >= 60
    reasons = [reason for _, reason in result.skipped]
    assert any(r.startswith("download skipped: 127.0.0.1:") for r in reasons)
    assert any("timed out after 3 s" in r for r in reasons)


def test_fetch_options_are_checked(tmp_path: Path) -> None:
    for bad in ({"fetch_concurrency": 0}, {"fetch_timeout": 0}, {"fetch_timeout": "5"}):
        with pytest.raises(ConfigError, match="fetch_"):
            BuildOptions(**bad)  # type: ignore[arg-type]
    proc = run_cli("x.csv", str(tmp_path / "out"), "--fetch-concurrency", "0")
    assert proc.returncode == 2
    assert "--fetch-concurrency: must be at least 1" in proc.stderr.strip().splitlines()[-1]


def test_the_cli_prints_the_download_counts(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    urls, _ = served
    proc = run_cli(_list(tmp_path, urls), str(tmp_path / "out"), "--workers", "2", "-q")
    assert proc.returncode == 0, proc.stderr
    assert f"downloads: {MISSING} http 404, {BROKEN} invalid image, {GOOD} ok" in proc.stdout


def test_a_parquet_url_list_builds_the_shards_of_the_same_csv_list(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    urls, _ = served
    folder, url = http_service()  # both lists are served too: the parquet one read by ranges
    rows = [{"path": u, "label": i % 3} for i, u in enumerate(urls)]  # as _list writes them
    pq.write_table(pa.Table.from_pylist(rows), f"{folder}/urls.parquet", row_group_size=16)
    write(folder, "urls.csv", Path(_list(tmp_path, urls)).read_bytes())
    options = BuildOptions(max_count=16, seed=2, workers=2)
    shardkit.build(f"{url}/urls.csv", tmp_path / "csv", options=options)
    result = shardkit.build(f"{url}/urls.parquet", tmp_path / "pq", options=options)
    assert result.fetch == {"http 404": MISSING, "invalid image": BROKEN, "ok": GOOD}
    shards, same = snapshot(str(tmp_path / "pq")), snapshot(str(tmp_path / "csv"))
    assert shards.pop("manifest.json")["shards"] == same.pop("manifest.json")["shards"]
    assert shards == same and len([n for n in shards if n.endswith(".tar")]) == 4


def test_fetch_options_do_not_change_the_dataset_identity(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    urls, _ = served
    source = _list(tmp_path, urls[:20])
    shardkit.build(source, tmp_path / "out", options=BuildOptions(workers=1))
    again = BuildOptions(workers=1, fetch_concurrency=5, fetch_timeout=3)
    result = shardkit.build(source, tmp_path / "out", options=again)
    assert result.resumed_tasks == -1  # already complete, not rebuilt
    assert (
        result.fetch
        == json.loads((tmp_path / "out" / "manifest.json").read_text())["fetch"]["total"]
    )


def test_downloads_in_flight_together_all_count_toward_the_breaker(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path, hanging_host: str
) -> None:
    urls, _ = served
    hung = [f"{hanging_host}/z{i}.jpg" for i in range(100)]
    options = BuildOptions(workers=1, fetch_concurrency=32, fetch_timeout=1)
    result = shardkit.build(_list(tmp_path, hung + urls), tmp_path / "out", options=options)
    # The first 32 time out together: the host is closed after that one round, not three.
    assert result.fetch["timeout"] <= 40, result.fetch
    assert result.fetch["timeout"] + result.fetch["host skipped"] == 100
    assert result.samples == GOOD


def test_an_interrupted_url_build_resumes_to_the_same_shards_and_counts(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    urls, _ = served
    source = _list(tmp_path, urls)
    options = BuildOptions(max_count=10, workers=1, seed=4)

    def stop_after_two(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(source, tmp_path / "out", options=options, progress=stop_after_two)
    result = shardkit.build(source, tmp_path / "out", options=options)
    assert result.resumed_tasks >= 2
    shardkit.build(source, tmp_path / "fresh", options=options)
    resumed = snapshot(str(tmp_path / "out"))
    assert resumed == snapshot(str(tmp_path / "fresh"))
    assert resumed["manifest.json"]["fetch"]["total"]["ok"] == GOOD


_FORKS_MID_BUILD = """
import os, sys, shardkit
source, out = sys.argv[1], sys.argv[2]
options = shardkit.BuildOptions(max_count=16, seed=2, workers=1, fetch_timeout=5)
forked = []

def fork_a_build(progress):
    if forked or not progress.samples:  # once a task has downloaded
        return
    pid = os.fork()
    if pid == 0:  # lets go of the download session it inherited, builds with its own
        result = shardkit.build(source, os.path.join(out, "child"), options=options)
        print("child", sorted(result.fetch.items()), flush=True)
        os._exit(0)
    forked.append(os.waitpid(pid, 0)[1])

result = shardkit.build(source, os.path.join(out, "parent"), options=options, progress=fork_a_build)
print("parent", sorted(result.fetch.items()), forked, flush=True)
"""


def test_a_url_build_downloads_on_after_a_forked_child_let_go_of_its_session(
    served: tuple[list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    """A build (inline: its download loop lives in this process, with keep-alive
    connections) forks mid-build a child that builds from URLs too. The child frees the
    download session it inherited; aiohttp's finalizer then closes the inherited
    connections, which must not take them out of the epoll set parent and child share:
    else the parent's next downloads on them wait until their timeout and the breaker
    skips the host. In a subprocess, with a time limit, so a regression fails, not hangs."""
    urls, _ = served
    expected = [("http 404", MISSING), ("invalid image", BROKEN), ("ok", GOOD)]
    script = tmp_path / "forks.py"
    script.write_text(_FORKS_MID_BUILD)
    args = [sys.executable, str(script), _list(tmp_path, urls), str(tmp_path)]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the build hangs after the fork: {exc.stdout!r}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"child {expected}",
        f"parent {expected} [0]",
    ], done.stdout
    assert snapshot(str(tmp_path / "parent")) == snapshot(str(tmp_path / "child"))


def test_urls_with_a_query_a_fragment_or_no_extension_are_downloaded(tmp_path: Path) -> None:
    folder, url = http_service()
    rng = random.Random(5)
    jpegs = [make_jpeg(rng, i) for i in range(4)]
    for i, data in enumerate(jpegs[:3]):
        write(folder, f"kinds/{i}.jpg", data)
    write(folder, "kinds/photo", jpegs[3])  # no extension: the bytes say JPEG
    write(folder, "kinds/page.html", b"<html>not an image</html>")
    urls = [
        f"{url}/kinds/0.jpg?sig=a.b/c&w=2",
        f"{url}/kinds/1.jpg#part",
        f"{url}/kinds/2.jpg?v=1",
        f"{url}/kinds/photo",
        f"{url}/kinds/page.html?x=1",
    ]
    out = str(tmp_path / "out")
    options = BuildOptions(shuffle=False, workers=1)
    result = shardkit.build(_list(tmp_path, urls), out, options=options)
    assert result.samples == 4
    assert result.skipped == [(urls[4], "not an image (content is no known format)")]
    samples = read_samples(out)
    assert [s["jpg"] for s in samples] == jpegs
    assert [s["__key__"] for s in samples] == ["0?sig=a%2Eb%2Fc&w=2", "1", "2?v=1", "photo"]
    tfrecord = shardkit.build(
        _list(tmp_path, urls[:4]), tmp_path / "tf", options=BuildOptions(format="tfrecord")
    )
    assert tfrecord.samples == 4


@pytest.fixture(scope="module")
def gzip_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback server whose every answer is gzip-encoded zeros: /N gives N MiB once
    decoded, in about N KB on the wire."""
    folder = tmp_path_factory.mktemp("gzip")
    bodies: dict[int, bytes] = {}
    making = threading.Lock()  # concurrent first requests must not write one file twice

    class Zeros(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            mib = int(self.path.strip("/").split("/")[0])
            with making:
                if mib not in bodies:
                    zeros_gzip(str(folder / f"{mib}.gz"), [mib << 20])
                    bodies[mib] = (folder / f"{mib}.gz").read_bytes()
            body = bodies[mib]
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Zeros)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


_MEASURED_BUILD = """
import shardkit
options = shardkit.BuildOptions(workers=1, max_size={max_size!r})
try:
    skipped = shardkit.build({source!r}, {out!r}, options=options).skipped
except shardkit.EmptyBuildError as exc:  # every download skipped: nothing to pack
    skipped = exc.skipped
result["skipped"] = len(skipped)
result["reasons"] = sorted({{reason for _, reason in skipped}})
"""


def _measured_build(tmp_path: Path, urls: list[str], max_size: str) -> dict[str, object]:
    code = _MEASURED_BUILD.format(
        source=_list(tmp_path, urls), out=str(tmp_path / "out"), max_size=max_size
    )
    return run_measured(code, timeout=300)


def test_a_gzip_answer_is_refused_once_it_decodes_past_the_limit(
    gzip_host: str, tmp_path: Path
) -> None:
    """Four 0.2 MB answers that decode to 200 MiB each: each is refused at 32 MB decoded
    (max_size), holding one buffer; before, each was held whole, twice (1.6 GB)."""
    result = _measured_build(tmp_path, [f"{gzip_host}/200/{i}.jpg" for i in range(4)], "32MB")
    assert result["skipped"] == 4
    assert result["reasons"] == [
        "download too large (more than 32000000 bytes once decoded; the limit is 32000000, "
        "the build's max_size)"
    ]
    assert result["peak_mb"] < 250, result


def test_the_bytes_a_worker_downloads_at_once_are_bounded(gzip_host: str, tmp_path: Path) -> None:
    """Twelve answers of 40 MiB decoded, under the limit, 32 in flight: together they
    would hold 480 MiB (960 MiB before, each held twice); the worker holds at most
    IN_FLIGHT_BYTES (64 MiB) plus the next one the task takes."""
    result = _measured_build(tmp_path, [f"{gzip_host}/40/{i}.jpg" for i in range(12)], "250MB")
    assert result["skipped"] == 12  # all downloaded, none an image
    assert result["reasons"] == ["not an image (content is not JPG nor another known format)"]
    assert result["peak_mb"] < 280, result


def test_two_builds_in_one_process_have_their_own_downloads(
    served: tuple[list[str], dict[str, bytes]],
) -> None:
    """Two runs' downloads, interleaved in one process with other settings: closing one
    (its build ended) leaves the other's session, loop and breaker alone. The download
    loop was a module global that a run with other settings closed and replaced."""
    from shardkit.builder._fetch import Downloads
    from shardkit.builder._sources import Item

    urls, good = served
    ok = [u for u in urls if u in good][:12]
    items = [Item(u, f"k{i}", -1, "jpg", 0, "") for i, u in enumerate(ok)]
    first = Downloads(BuildOptions(fetch_concurrency=6))
    second = Downloads(BuildOptions(fetch_concurrency=2, fetch_timeout=3))
    try:
        running = first.prefetch(lambda item: str(item.ref), items)
        got = [download.result().data for _, download in itertools.islice(running, 3)]
        other = [d.result().data for _, d in second.prefetch(lambda item: str(item.ref), items)]
        second.close()  # the second build ends while the first still downloads
        got += [download.result().data for _, download in running]
    finally:
        first.close()
    assert got == other == [good[u] for u in ok]


def test_a_task_that_stops_early_gives_back_the_room_its_downloads_held(
    served: tuple[list[str], dict[str, bytes]],
) -> None:
    """Room for one byte: every download but the next one the task takes waits. A task
    that stops mid-way (its item failed with on_error='fail') must give back what its
    downloads hold, or the next task's downloads would wait for room forever."""
    from shardkit.builder._fetch import Downloads
    from shardkit.builder._sources import Item

    urls, good = served
    ok = [u for u in urls if u in good][:8]
    items = [Item(u, f"k{i}", -1, "jpg", 0, "") for i, u in enumerate(ok)]
    downloads = Downloads(BuildOptions(fetch_concurrency=4, fetch_timeout=5))
    downloads.in_flight = 1
    try:
        stopped = downloads.prefetch(lambda item: str(item.ref), items)
        _, first = next(stopped)
        assert first is not None and first.result().data == good[ok[0]]
        stopped.close()  # the task stops while it holds this download and three more
        again = [d.result().data for _, d in downloads.prefetch(lambda i: str(i.ref), items)]
    finally:
        downloads.close()
    assert again == [good[u] for u in ok]


def test_waiting_for_room_does_not_count_toward_the_timeout(
    served: tuple[list[str], dict[str, bytes]],
) -> None:
    """A 1 s timeout, room for one byte, and a task that takes 0.4 s per item: the later
    downloads wait for room far longer than 1 s in all, and none times out."""
    from shardkit.builder._fetch import Downloads
    from shardkit.builder._sources import Item

    urls, good = served
    ok = [u for u in urls if u in good][:6]
    items = [Item(u, f"k{i}", -1, "jpg", 0, "") for i, u in enumerate(ok)]
    downloads = Downloads(BuildOptions(fetch_concurrency=6, fetch_timeout=1))
    downloads.in_flight = 1
    got = []
    try:
        for _, download in downloads.prefetch(lambda item: str(item.ref), items):
            assert download is not None
            got.append(download.result())
            time.sleep(0.4)
    finally:
        downloads.close()
    assert [d.category for d in got] == ["ok"] * 6
    assert [d.data for d in got] == [good[u] for u in ok]
