"""Helpers shared by the pipeline tests: small shard sets written on the fly."""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Sequence
from typing import Any

from shardkit import ShardWriter


def sample(index: int, *, jpeg: bool = False, payload: int = 0) -> dict[str, Any]:
    """Sample number ``index``: its key and class say which one it is; ``payload`` adds
    a ``bin`` field of that many pseudo-random bytes."""
    out: dict[str, Any] = {"__key__": f"s{index:05d}", "cls": index, "txt": f"text {index}"}
    if jpeg:
        out["jpg"] = tiny_jpeg(index)
    if payload:
        out["bin"] = random.Random(index).randbytes(payload)
    return out


def tiny_jpeg(seed: int, size: tuple[int, int] = (24, 16)) -> bytes:
    from PIL import Image

    rng = random.Random(seed)
    image = Image.new("RGB", size, tuple(rng.randrange(256) for _ in range(3)))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def write_shards(
    folder: str,
    counts: Sequence[int],
    *,
    ext: str = "tar",
    manifest: bool = True,
    jpeg: bool = False,
    payload: int = 0,
) -> list[str]:
    """Shards ``shard-%06d.<ext>`` holding ``counts[i]`` samples each, numbered
    consecutively; a manifest.json with the counts unless ``manifest=False``."""
    os.makedirs(folder, exist_ok=True)
    urls = []
    index = 0
    for number, count in enumerate(counts):
        pattern = os.path.join(folder, f"shard-%06d.{ext}")
        # index=False: shards as any webdataset writer leaves them (no .idx); tests that
        # need counts write a manifest or indexes themselves
        with ShardWriter(
            pattern, start_index=number, max_count=None, max_size=None, index=False
        ) as sink:
            for _ in range(count):
                sink.write(sample(index, jpeg=jpeg, payload=payload))
                index += 1
        if not sink.shards:  # an empty shard: write the file anyway
            path = pattern % number
            with open(path, "wb") as f:
                f.write(bytes(1024) if ext.startswith("tar") else b"")
            urls.append(path)
        else:
            urls.append(sink.shards[0].url)
    if manifest:
        entries = [
            {"url": os.path.basename(url), "samples": count}
            for url, count in zip(urls, counts, strict=True)
        ]
        with open(os.path.join(folder, "manifest.json"), "w") as f:
            json.dump({"shards": entries}, f)
    return urls


def keys(items: Sequence[Any]) -> list[str]:
    """The sample keys of raw samples (dicts) or of tuples whose first field is a key."""
    return [item["__key__"] if isinstance(item, dict) else item[0] for item in items]
