"""Built-in sample data: a small, deterministic image folder (for the demo, tests, benches)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

__all__ = ["CLASSES", "make_image_folder", "make_jpeg", "pack_and_read"]

CLASSES: tuple[str, ...] = ("circle", "square", "stripes")


def make_jpeg(rng: random.Random, label: int, *, min_side: int = 64, max_side: int = 256) -> bytes:
    """One synthetic JPEG whose content depends on ``label`` (a shape on a noisy field)."""
    import io

    from PIL import Image, ImageDraw

    width, height = rng.randint(min_side, max_side), rng.randint(min_side, max_side)
    image = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    color = tuple(rng.randrange(256) for _ in range(3))
    box = (width // 5, height // 5, width * 4 // 5, height * 4 // 5)
    if label % 3 == 0:
        draw.ellipse(box, fill=color)
    elif label % 3 == 1:
        draw.rectangle(box, fill=color)
    else:
        for x in range(0, width, 8):
            draw.line((x, 0, x, height), fill=color, width=3)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=rng.randint(70, 95))
    return out.getvalue()


def make_image_folder(
    folder: str, *, count: int = 600, classes: Sequence[str] = CLASSES, seed: int = 0
) -> list[str]:
    """Write ``count`` JPEGs into one subfolder per class (ImageFolder layout)."""
    rng = random.Random(seed)
    for name in classes:
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for i in range(count):
        label = i % len(classes)
        path = os.path.join(folder, classes[label], f"img_{i:06d}.jpg")
        with open(path, "wb") as f:
            f.write(make_jpeg(rng, label))
    return list(classes)


def pack_and_read(source: str, out: str) -> list[str]:
    """Pack an image folder into tar shards and read them back; returns summary lines."""
    import collections
    import time

    from .build import BuildOptions, build
    from .formats.tar import iter_samples

    started = time.perf_counter()
    result = build(source, out, options=BuildOptions(max_count=200, overwrite=True))
    packed = time.perf_counter() - started
    classes = sorted(d for d in os.listdir(source) if not d.startswith("."))
    counts: collections.Counter[int] = collections.Counter()
    for shard in result.shards:
        path = os.path.join(out, shard.name)
        with open(path, "rb") as f:
            for sample in iter_samples(f, url=path):
                counts[int(sample["cls"])] += 1
    lines = [
        f"packed {sum(counts.values())} samples into {len(result.shards)} shards "
        f"({result.bytes / 1e6:.1f} MB) in {packed:.2f} s",
    ]
    lines += [
        f"  class {label} ({classes[label]}): {counts[label]} samples" for label in sorted(counts)
    ]
    if result.skipped:
        lines.append(f"  skipped {len(result.skipped)} bad files (see manifest.json)")
    return lines
