"""Built-in sample data: a small, deterministic image folder (for the demo, tests, benches)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

from .formats.jsondoc import load_json
from .storage import atomic_write, read_document

__all__ = ["CLASSES", "make_image_folder", "make_jpeg", "pack_and_read"]

CLASSES: tuple[str, ...] = ("circle", "square", "stripes")


def make_jpeg(rng: random.Random, label: int, *, min_side: int = 64, max_side: int = 256) -> bytes:
    """One synthetic JPEG whose content depends on ``label`` (a shape on a noisy field)."""
    import io

    from ._optional import require

    require("PIL.Image", "the demo (it draws its images)")
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
    from ._optional import require

    require("PIL.Image", "the demo (it draws its images)")  # before any folder is made
    rng = random.Random(seed)
    for name in classes:
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for i in range(count):
        label = i % len(classes)
        path = os.path.join(folder, classes[label], f"img_{i:06d}.jpg")
        with atomic_write(path) as f:  # the writing door: a full disk is one StorageError
            f.write(make_jpeg(rng, label))
    return list(classes)


def add_bad_files(folder: str, classes: Sequence[str] = CLASSES) -> list[str]:
    """Drop the kinds of broken file real datasets have into an image folder."""
    good = os.path.join(folder, classes[0], "img_000000.jpg")
    with open(good, "rb") as f:
        jpeg = f.read()
    bad = {
        os.path.join(folder, classes[0], "empty.jpg"): b"",
        os.path.join(folder, classes[1], "truncated.jpg"): jpeg[: len(jpeg) // 2],
        os.path.join(folder, classes[2], "notes.jpg"): b"not an image at all\n",
    }
    for path, data in bad.items():
        with atomic_write(path) as f:
            f.write(data)
    return sorted(bad)


def pack_and_read(source: str, out: str) -> list[str]:
    """Build shards from an image folder, verify them, stream them back decoded.

    Returns summary lines (the library does not print).
    """
    import collections
    import time

    from .builder import BuildOptions, build
    from .pipeline import Dataset
    from .tools import verify

    started = time.perf_counter()
    result = build(source, out, options=BuildOptions(max_count=200, overwrite=True))
    packed = time.perf_counter() - started
    lines = [
        f"build: {result.samples} samples into {len(result.shards)} shards "
        f"({result.bytes / 1e6:.1f} MB) in {packed:.2f} s",
    ]
    lines += [f"  skipped {path}: {reason}" for path, reason in result.skipped]
    report = verify(out)
    lines.append(f"verify: {report.samples} samples, {len(report.problems)} problems")
    counts: collections.Counter[int] = collections.Counter()
    shapes = set()
    started = time.perf_counter()
    dataset = Dataset(out, seed=0).shuffle(100).decode("rgb8").to_tuple("jpg", "cls")
    for image, label in dataset:
        counts[label] += 1
        shapes.add(image.shape[2])
    read = time.perf_counter() - started
    manifest = load_json(read_document(result.manifest, what="manifest"))
    names = {index: name for name, index in manifest["class_to_idx"].items()}
    lines.append(
        f"read: {sum(counts.values())} decoded samples (HxWx{shapes.pop()} uint8) in {read:.2f} s"
    )
    lines += [f"  class {c} ({names[c]}): {counts[c]} samples" for c in sorted(counts)]
    return lines
