"""``shardkit view`` over HTTP: pages, escaping, headers, refused paths, paging by .idx."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.tools import samples, write_shards
from helpers.view import EVIL_CAPTION, EVIL_JSON, EVIL_KEY, evil_sample, get, served

import shardkit
from shardkit.tools.index import write_indexes
from shardkit.tools.view import Viewer


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Viewer]:
    write_shards(str(tmp_path / "d"), [*samples(3, images=True), evil_sample()])
    with Viewer(str(tmp_path / "d"), port=0).start() as viewer:
        yield viewer


def _text(viewer: Viewer, path: str) -> str:
    status, _, body = get(viewer.url, path)
    assert status == 200, (path, body[:300])
    return str(body.decode())


def test_keys_captions_and_json_are_escaped(hostile: Viewer) -> None:
    grid = _text(hostile, "/")
    page = _text(hostile, "/sample/3")
    for body in (grid, page):
        assert "<script" not in body.lower() and "<img src=x" not in body
        assert html.escape(EVIL_KEY, quote=True) in body
    assert "onerror" in page  # the payloads are shown, as text
    assert html.escape("<script>document.title='pwned-script'</script>") in page
    assert "&quot;c&quot;: &quot;&lt;/pre&gt;&lt;img src=x" in page  # pretty JSON, escaped
    assert "<img" not in re.sub(
        r'<img (class=full )?src="/(thumb|sample)/\d+[^"]*" alt="">', "", page
    )


def test_every_answer_has_nosniff_and_a_csp_without_script(hostile: Viewer) -> None:
    paths = ["/", "/?page=2", "/sample/0", "/sample/0/field/1", "/thumb/0", "/stats"]
    paths += ["/style.css", "/nothing", "/sample/99"]
    for path in paths:
        status, headers, _ = get(hostile.url, path)
        assert status in (200, 404), path
        assert headers["X-Content-Type-Options"] == "nosniff", path
        csp = headers["Content-Security-Policy"]
        assert csp.startswith("default-src 'none'") and "script" not in csp, path
        assert "unsafe" not in csp and headers["Cross-Origin-Resource-Policy"] == "same-origin"


def test_fields_are_served_with_their_type_and_scripts_only_as_downloads(hostile: Viewer) -> None:
    names = list(hostile.catalog.sample(3).fields)  # type: ignore[union-attr]
    expect = {
        "jpg": "image/jpeg",
        "txt": "text/plain; charset=utf-8",
        "json": "application/json",
        "cls": "text/plain; charset=utf-8",
        "svg": "application/octet-stream",
        "html": "application/octet-stream",
    }
    for number, name in enumerate(names):
        status, headers, _ = get(hostile.url, f"/sample/3/field/{number}")
        assert status == 200 and headers["Content-Type"] == expect[name], name
        assert headers["Content-Security-Policy"].endswith("; sandbox")
        assert ("attachment" in headers.get("Content-Disposition", "")) == (
            expect[name] == "application/octet-stream"
        )
    number = names.index("txt")
    assert get(hostile.url, f"/sample/3/field/{number}")[2] == EVIL_CAPTION.encode()
    number = names.index("json")
    assert json.loads(get(hostile.url, f"/sample/3/field/{number}")[2]) == EVIL_JSON


@pytest.mark.parametrize(
    "path",
    [
        "/../../../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/sample/..%2F..%2F..%2Fetc%2Fpasswd",
        "/style.css/../../../etc/passwd",
        "//etc/passwd",
        "/sample/0/field/..%2f..%2fetc%2fpasswd",
        "/sample/0/field/-1",
        "/thumb/0/../../etc/passwd",
        "/sample/0/../../../d/shard-000000.tar",
        "/shard-000000.tar",
        "/d/shard-000000.tar",
        "http://127.0.0.1/etc/passwd",
    ],
)
def test_no_path_outside_the_pages_can_be_requested(hostile: Viewer, path: str) -> None:
    status, _, body = get(hostile.url, path)
    assert status in (404, 421) and b"root:" not in body and b"ustar" not in body


def test_only_reads_from_this_machine_s_names(hostile: Viewer) -> None:
    assert get(hostile.url, "/", method="POST")[0] == 405
    assert get(hostile.url, "/", method="DELETE")[0] == 405
    assert get(hostile.url, "/", host="attacker.example:80")[0] == 421
    assert get(hostile.url, "/", host=f"localhost:{hostile.port}")[0] == 200
    assert hostile.url.startswith("http://127.0.0.1:")


def _indexed_folder(tmp_path: Path) -> tuple[str, list[str]]:
    urls = write_shards(str(tmp_path / "d"), samples(100), per_shard=10)
    write_indexes(urls)
    return str(tmp_path / "d"), urls


def test_a_late_page_is_read_through_the_indexes_alone(tmp_path: Path) -> None:
    folder, urls = _indexed_folder(tmp_path)
    for url in urls[:-1]:  # every shard before the last one becomes unreadable, same size
        size = os.path.getsize(url)
        Path(url).write_bytes(b"\xff" * size)
    with Viewer(folder, port=0, page_size=10).start() as viewer:
        assert viewer.catalog.indexed and viewer.catalog.note is None
        grid = _text(viewer, "/?page=10")
        assert "samples 91-100 of 100" in grid
        assert re.findall(r"class=key>k/(\d+)", grid) == [f"{i:05d}" for i in range(90, 100)]
        page = _text(viewer, "/sample/95")
        assert "k/00095" in page and "shard-000009.tar" in page
        assert get(viewer.url, "/?page=1")[0] == 500  # the first shard is read only now


def test_without_indexes_pages_read_forward_and_say_so(tmp_path: Path) -> None:
    write_shards(str(tmp_path / "d"), samples(100), per_shard=10)
    with Viewer(str(tmp_path / "d"), port=0, page_size=10).start() as viewer:
        assert not viewer.catalog.indexed
        grid = _text(viewer, "/?page=7")
        assert "reading forward from the first shard" in grid and "shardkit index" in grid
        assert re.findall(r"class=key>k/(\d+)", grid) == [f"{i:05d}" for i in range(60, 70)]
        first = _text(viewer, "/?page=1")  # back to the start: read again
        assert re.findall(r"class=key>k/(\d+)", first) == [f"{i:05d}" for i in range(10)]
        assert "samples 91-100 of 100" in _text(viewer, "/?page=10")


@pytest.mark.parametrize("indexed", [True, False])
def test_filters_by_key_substring_and_class(tmp_path: Path, indexed: bool) -> None:
    folder, urls = _indexed_folder(tmp_path)
    if not indexed:
        for url in urls:
            os.unlink(url + ".idx")
    with Viewer(folder, port=0, page_size=5).start() as viewer:
        grid = _text(viewer, "/?q=0004")
        assert re.findall(r"class=key>k/(\d+)", grid) == [
            "00004",
            "00040",
            "00041",
            "00042",
            "00043",
        ]
        more = _text(viewer, "/?q=0004&page=3")
        assert re.findall(r"class=key>k/(\d+)", more) == ["00049"]
        assert "samples 11-11 of 11" in more and ">next<" not in more
        both = _text(viewer, "/?q=0001&cls=2")
        assert re.findall(r"class=key>k/(\d+)", both) == ["00011", "00014", "00017"]


def test_stats_page_has_the_class_histogram_and_sizes(tmp_path: Path) -> None:
    folder, _ = _indexed_folder(tmp_path)
    with Viewer(folder, port=0).start() as viewer:
        page = _text(viewer, "/stats")
    assert "10 shards, 100 samples" in page
    counts = dict(re.findall(r"<tr><td>(\d)</td><td>(\d+)</td><td><progress", page))
    assert counts == {"0": "34", "1": "33", "2": "33"}
    assert "sample sizes" in page and page.count("<progress") > 3


def test_thumbnails_are_jpegs_and_tfrecord_images_show(tmp_path: Path) -> None:
    from PIL import Image

    folder = tmp_path / "d"
    write_shards(str(folder), samples(4, images=True))
    shardkit.tools.convert(str(folder), str(tmp_path / "tf" / "t-%03d.tfrecord"))
    for source in (str(folder), str(tmp_path / "tf")):
        with Viewer(source, port=0).start() as viewer:
            status, headers, body = get(viewer.url, "/thumb/2")
            assert status == 200 and headers["Content-Type"] == "image/jpeg", source
            import io

            with Image.open(io.BytesIO(body)) as img:
                assert img.format == "JPEG" and max(img.size) <= 160
            assert 'src="/thumb/2"' in _text(viewer, "/")


def test_cli_prints_the_url_and_serves(tmp_path: Path) -> None:
    folder, _ = _indexed_folder(tmp_path)
    with served(folder) as (url, process):
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), url
        assert get(url, "/sample/0")[0] == 200
        process.send_signal(signal.SIGINT)  # Ctrl-C stops it cleanly
        assert process.wait(timeout=60) == 0


def test_cli_bad_source_is_one_error_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "shardkit", "view", str(tmp_path / "none.tar"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("Error: ")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize("host", ["127.0.0.2", "::1"])
def test_answers_its_own_printed_address_and_refuses_other_hosts(tmp_path: Path, host: str) -> None:
    write_shards(str(tmp_path / "d"), samples(3))
    with Viewer(str(tmp_path / "d"), host=host, port=0).start() as viewer:
        shown = f"[{host}]" if ":" in host else host
        assert viewer.url == f"http://{shown}:{viewer.port}/"
        assert get(viewer.url, "/")[0] == 200  # the Host header names the printed address
        assert get(viewer.url, "/", host=f"localhost:{viewer.port}")[0] == 200
        assert get(viewer.url, "/", host=f"rebind.example:{viewer.port}")[0] == 421
        assert get(viewer.url, "/", host=f"{shown}:{viewer.port + 1}")[0] == 421
        assert get(viewer.url, "/", host=shown)[0] == 421


def _raw(viewer: Viewer, request: bytes) -> tuple[int, dict[str, str]]:
    """Status and headers of a request sent as raw bytes."""
    import http.client
    import socket

    with socket.create_connection((viewer.host, viewer.port), timeout=30) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k: v for k, v in response.getheaders()}


def test_every_error_answer_has_the_security_headers(tmp_path: Path) -> None:
    from helpers.view import flat_png

    data = [*samples(3, images=True), {"__key__": "bomb", "png": flat_png(1, 1)}]
    write_shards(str(tmp_path / "d"), data)
    with Viewer(str(tmp_path / "d"), port=0, decode_wait=0).start() as viewer:
        authority = f"127.0.0.1:{viewer.port}"
        answers = [
            get(viewer.url, "/nothing")[:2],  # 404
            get(viewer.url, "/", method="POST")[:2],  # 405
            get(viewer.url, "/", host="attacker.example")[:2],  # 421
            _raw(viewer, b"BREW / HTTP/1.1\r\nHost: " + authority.encode() + b"\r\n\r\n"),  # 501
            _raw(viewer, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"),  # 414
            _raw(viewer, b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 120 + b"\r\n"),  # 431
        ]
        with viewer.decoding.reserve(viewer.decoding.nbytes):  # every decode slot busy
            status, headers, _ = get(viewer.url, "/thumb/0")
            answers.append((status, headers))
            assert status == 503 and headers["Retry-After"].isdigit()
        shard = tmp_path / "d" / "shard-000000.tar"
        (tmp_path / "new.tar").write_bytes(b"\xff" * 10_000)
        os.replace(tmp_path / "new.tar", shard)  # replaced: no longer reads
        answers.append(get(viewer.url, "/stats")[:2])  # 500: the stats read it now
        answers.append(get(viewer.url, "/sample/1")[:2])  # 409: it changed while open
    for status, headers in answers:
        assert headers["X-Content-Type-Options"] == "nosniff", status
        assert headers["Content-Security-Policy"].startswith("default-src 'none'"), status
        assert headers["Cross-Origin-Resource-Policy"] == "same-origin", status
        assert headers["X-Frame-Options"] == "DENY", status
    statuses = sorted(status for status, _ in answers)
    assert statuses == [404, 405, 409, 414, 421, 431, 500, 501, 503]
