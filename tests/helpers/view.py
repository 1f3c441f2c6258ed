"""Datasets and an HTTP client for the viewer tests (tests/view/test_view*.py)."""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import struct
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import shardkit
from shardkit.demo import make_image_folder, make_jpeg

# A hostile sample: its key, caption and JSON try to run script in the viewer's pages.
EVIL_KEY = "evil<img src=x onerror=document['title']='pwned-key'>"
EVIL_CAPTION = (
    "<script>document.title='pwned-script'</script>"
    "<img src=x onerror=\"document.body.appendChild(document.createElement('pwned'))\">"
)
EVIL_JSON = {"c": "</pre><img src=x onerror=document.title='pwned-json'>", "n": 1}


def evil_sample(seed: int = 0) -> dict[str, Any]:
    return {
        "__key__": EVIL_KEY,
        "jpg": make_jpeg(random.Random(seed), 0),
        "txt": EVIL_CAPTION,
        "json": EVIL_JSON,
        "svg": b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
        "html": b"<script>alert(1)</script>",
        "cls": 0,
    }


def image_dataset(root: Path, *, count: int = 60, per_shard: int = 16) -> str:
    """A built image folder (demo pictures in three classes, with its manifest); returns
    the output folder."""
    images = root / "images"
    make_image_folder(str(images), count=count)
    out = root / "data"
    options = shardkit.BuildOptions(max_count=per_shard, workers=1)
    shardkit.build(str(images), str(out), options=options)
    return str(out)


def evil_dataset(root: Path, *, pictures: int = 3) -> str:
    """A folder with a shard of ``pictures`` plain samples, then the hostile one."""
    with shardkit.ShardWriter(str(root / "evil" / "shard-%06d.tar"), max_count=100) as sink:
        for i in range(pictures):
            sink.write({"__key__": f"plain/{i}", "jpg": make_jpeg(random.Random(i), i % 3)})
        sink.write(evil_sample())
    return str(root / "evil")


def get(
    url: str, path: str, *, method: str = "GET", host: str | None = None, timeout: float = 30
) -> Any:
    """(status, headers, body) for ``path`` sent exactly as given (no normalization)."""
    address = url.split("//", 1)[1].rstrip("/")
    connection = http.client.HTTPConnection(address, timeout=timeout)
    try:
        headers = {"Host": host} if host is not None else {}
        connection.putrequest(method, path, skip_host=host is not None)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def flat_png(width: int, height: int, rgb: tuple[int, int, int] = (200, 40, 90)) -> bytes:
    """A ``width`` x ``height`` RGB PNG of one colour, written with zlib directly (every
    row after the first is filtered "up" to zeros: a 169-Mpx picture is half a MB)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    packer = zlib.compressobj(1)
    rows = [packer.compress(b"\x00" + bytes(rgb) * width)]
    up = b"\x02" + bytes(3 * width)
    rows += [packer.compress(up) for _ in range(height - 1)]
    rows.append(packer.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", b"".join(rows))
        + chunk(b"IEND", b"")
    )


def sparse_shard(path: Path, count: int, size: int) -> None:
    """A tar shard of ``count`` samples, each a ``size``-byte ``bin`` field of zeros (a
    hole in the file: nothing is written) and a ``cls``."""
    with open(path, "wb") as f:
        for i in range(count):
            for name, data_size in ((f"s{i:05d}.bin", size), (f"s{i:05d}.cls", 1)):
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = data_size, 0, 0o444
                f.write(info.tobuf(format=tarfile.USTAR_FORMAT))
                if name.endswith(".cls"):
                    f.write(b"1".ljust(512, b"\0"))
                else:
                    f.seek(-(-data_size // 512) * 512, os.SEEK_CUR)
        f.write(bytes(1024))


def memory(pid: int) -> dict[str, int]:
    """Bytes of a process's memory from /proc: VmRSS, VmHWM (peak RSS), RssAnon, ..."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                out[name] = int(value.split()[0]) * 1024
    return out


@contextlib.contextmanager
def served(folder: str, *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``shardkit view FOLDER --port 0 ARGS`` in a subprocess: (its URL, the process).
    Its stderr is the process's ``stderr`` (a pipe, read when it has stopped). SIGINT
    is a terminal's Ctrl-C, its default action (a test process may ignore SIGINT, e.g.
    after Ray set up its handlers, and a child inherits an ignored signal)."""
    command = [sys.executable, "-m", "shardkit", "view", folder, "--port", "0", *args]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("shardkit view: http://"), line
            yield line.split(": ", 1)[1].strip(), process
        finally:
            process.kill()
