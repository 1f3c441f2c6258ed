"""Datasets and an HTTP client for the viewer tests (tests/test_view*.py)."""

from __future__ import annotations

import http.client
import random
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


def get(url: str, path: str, *, method: str = "GET", host: str | None = None) -> Any:
    """(status, headers, body) for ``path`` sent exactly as given (no normalization)."""
    address = url.split("//", 1)[1].rstrip("/")
    connection = http.client.HTTPConnection(address, timeout=30)
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
