"""Helpers for the shard-tool tests (imported by tests/tools/test_tools_*.py)."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from shardkit.formats import tar
from shardkit.reader import read_shard
from shardkit.writer import ShardWriter

SHARDKIT = os.path.join(os.path.dirname(sys.executable), "shardkit")


def samples(
    n: int, *, seed: int = 0, images: bool = False, prefix: str = "k"
) -> list[dict[str, Any]]:
    """``n`` small samples with txt, bin, cls and json fields (and a jpg if ``images``)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sample: dict[str, Any] = {
            "__key__": f"{prefix}/{i:05d}",
            "txt": f"text {i}",
            "bin": rng.randbytes(rng.randrange(0, 2000)),
            "cls": i % 3,
            "json": {"label": ["cat", "dog", "fox"][i % 3], "i": i},
        }
        if images:
            from shardkit.demo import make_jpeg

            sample["jpg"] = make_jpeg(rng, i % 3, min_side=32, max_side=64)
        out.append(sample)
    return out


def write_shards(
    folder: str, data: Sequence[dict[str, Any]], *, per_shard: int = 10, ext: str = "tar"
) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    pattern = os.path.join(folder, f"shard-%06d.{ext}")
    with ShardWriter(pattern, max_count=per_shard, index=False) as sink:  # no .idx, as most
        for sample in data:
            sink.write(sample)
    return [info.url for info in sink.shards]


def read_all(urls: Sequence[str]) -> list[dict[str, Any]]:
    """Every sample's key and fields (no __url__/__offset__)."""
    out = []
    for url in urls:
        for sample in read_shard(url):
            out.append({k: v for k, v in sample.items() if k not in ("__url__", "__offset__")})
    return out


def tar_bytes(data: Sequence[dict[str, Any]]) -> bytes:
    buf = io.BytesIO()
    with tar.TarWriter(buf, encode=True) as writer:  # type: ignore[arg-type]
        for sample in data:
            writer.write(sample)
    return buf.getvalue()


def shardkit(
    *args: str, input: bytes | None = None, cwd: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed console script."""
    return subprocess.run(
        [SHARDKIT, *args], input=input, capture_output=True, cwd=cwd, timeout=120, check=False
    )
