"""Reading benchmark: shardkit against webdataset, a tarfile loop, tf.data, MDS and litdata.

Run: ``.venv/bin/python bench/read.py [--quick] [--repeat R] [--data DIR]``; with
``--steady --peers PYTHON``: the in-process steady-state comparison of ``bench/steady.py``
(``bench/results/read-steady.json``); ``--steady --workers N [--batch B]``: the same
contenders, each pass an epoch through N DataLoader workers (``bench/results/read-loader.json``).

The data (~20,000 samples of ~60 KB 384x384 JPEGs plus a ``cls`` field; ``--quick``:
3,000) is generated once into ``/dev/shm/shardkit-bench-read`` as tar shards and as
TFRecord shards, both written by shardkit, and reused by later runs. Every contender runs in a fresh
subprocess (best of R; imports, and the peers' dataset objects, happen before the clock
starts), so its peak RSS is its own (VmHWM; DataLoader workers' from ``RUSAGE_CHILDREN``)
and the page cache is warm for all.
Groups, side by side:

* raw iteration (samples as dicts of bytes): shardkit (``bytes`` fields, and
  ``copy=False``: memoryviews of the memory-mapped shard) vs webdataset vs a tarfile loop
  vs iterating MosaicML streaming's ``StreamingDataset`` (MDS shards) and litdata's
  ``StreamingDataset`` (whose byte fields are memoryviews into its memory-mapped chunks,
  not copies) in one process;
* ``decode("rgb8")``, HxWx3 uint8: shardkit (its default decode threads, and one thread)
  vs webdataset (Pillow) vs MDS and litdata iterated as above, each sample decoded by
  ``shardkit.codecs.Decoder("rgb8")``, the decoder of shardkit's ``decode("rgb8")``
  (libjpeg-turbo through simplejpeg, which the peers' venv must hold too: the ``JPEG``
  column says which decoder each process loaded), so the rows differ in reading only; and
  MDS and litdata decoding with Pillow (``np.asarray(Image.open(...).convert("RGB"))``), as
  their users would; and two ceilings, not contenders: the same decoder on samples already
  in memory, nothing read, in one thread (no reader that decodes in one thread can pass it)
  and in as many threads as shardkit's ``decode()`` uses here (what the machine's cores
  gave that decoder during the run: on a shared machine, often far from cores x one
  thread). The ``cores`` column (CPU time over wall time) says how many cores each kept
  busy;
* image specs, the decoder alone in one thread as above: ``rgb8`` (HxWx3 uint8) against
  ``torchrgb8`` (CxHxW uint8 tensor) and ``torchrgb`` (CxHxW float32), what putting the
  channels first and converting to float add;
* ``shardkit.image(224)`` and ``image(112)``, center crop: shardkit's reader decoding
  with it (one thread, and at 224 its default threads) vs the same reader with Pillow's
  full decode then the same crop and resize (bilinear), one thread, vs litdata iterated
  with that Pillow decode-then-resize (``--peers``), the same output size. Twice: on the
  384x384 JPEGs of every group (image(224) decodes them at 5/8 scale, 240 px; image(112) at
  3/8, 144 px) and on 500x375 JPEGs of the same kind (ImageNet's usual size; 5/8 and 3/8
  again), written once beside them (``jpeg-500x375/`` in the data folder). On a busy
  machine the ``CPU us/sample`` column is the figure to compare;
* TFRecord read + parse: shardkit vs ``tf.data.TFRecordDataset`` + ``tf.io.parse_single_example``
  in eager Python iteration;
* ``DataLoader(num_workers=2, batch_size=32)`` over ``decode("rgb8").to_tuple("jpg", "cls")``;
* random access, ``ds[i]`` in a seeded random order over local shards (raw samples):
  ``shardkit.IndexedDataset`` (slices of memory-mapped shards; the same reading each
  span with ``pread``; and ``copy=False``) vs MosaicML streaming's
  ``StreamingDataset.__getitem__`` (MDS shards, an ``open`` and two reads per sample) vs
  litdata's ``StreamingDataset.__getitem__``;
* mixing: ``shardkit.mix`` of two sources (the tar shards split in halves) vs reading one
  source, raw samples;
* the floor under random access: one bare ``os.pread`` of each sample's bytes, in the
  random-access order, from the tar shards (offsets from their ``.idx``) and from MDS's
  shard files (offsets from their headers): what touching the data costs on each set of
  files in that run, which on a virtual machine can differ by 2x between two sets of
  files of the same size.

MDS and litdata are not in the project's environment: give ``--peers PYTHON``, an
interpreter of a separate venv holding them (``pip install torch==2.13.0
mosaicml-streaming litdata simplejpeg``; shardkit is taken from this checkout's ``src``,
for the writers and the decoder). Their children run there, each reading its own
library's copy of the same samples (written once by that library's writer, the JPEGs kept
as raw bytes). ``import streaming`` imports torchvision, whose registry wheels do not match
the pinned CPU torch (``operator torchvision::nms does not exist``); those children get
``bench/standins`` (shared with ``bench/build.py``) on ``PYTHONPATH``, a stand-in
``torchvision`` with only the names ``streaming`` imports, none of which the benchmark
uses. Without ``--peers`` those rows are left out.

The results are written as JSON (``--json``, ``bench/results/read.json`` by default),
named after their file: ``--only "center crop" --json bench/results/read-image.json``
keeps the image(size) groups beside the full run, and ``bench/charts.py`` draws each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import steady
from _results import Results, add_json_option

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PER_SHARD = 1000
FULL, QUICK = 20_000, 3_000
JPEG = "384x384"  # the JPEGs of every group but the image(size) groups that name another


# --------------------------------------------------------------------------- data


def _jpeg_pool(count: int, seed: int = 0, size: tuple[int, int] = (384, 384)) -> list[bytes]:
    """Distinct JPEGs of ``size`` (width, height), ~60 KB at 384x384: smooth colour fields
    with grain."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = size
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    x /= width
    y /= height
    out = []
    for _ in range(count):
        a, b, c = rng.uniform(0, 255, 3)
        base = np.stack([a * x + (255 - a) * y, b * y, c * (1 - x)], axis=-1)
        grain = rng.normal(0, 16, base.shape)
        pixels = np.clip(base + grain, 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        out.append(buffer.getvalue())
    return out


def jpeg_root(root: str, jpeg: str) -> str:
    """Where the samples of JPEGs of size ``jpeg`` ("WxH") live: ``root`` for the default
    size, a folder inside it for another."""
    return root if jpeg == JPEG else os.path.join(root, f"jpeg-{jpeg}")


def _jpeg_size(jpeg: str) -> tuple[int, int]:
    width, _, height = jpeg.partition("x")
    return int(width), int(height)


def ensure_data(root: str, samples: int, jpeg: str = JPEG) -> None:
    """Write ``samples`` samples of ``jpeg``-sized JPEGs as tar shards, and TFRecord shards
    for the default size, under ``jpeg_root(root, jpeg)`` (once)."""
    root = jpeg_root(root, jpeg)
    stamp = os.path.join(root, f"done-{samples}")
    if os.path.exists(stamp):
        return
    from shardkit import ShardWriter

    pool = _jpeg_pool(400, size=_jpeg_size(jpeg))
    for fmt in ("tar", "tfrecord") if jpeg == JPEG else ("tar",):
        folder = os.path.join(root, str(samples), fmt)
        os.makedirs(folder, exist_ok=True)
        pattern = os.path.join(folder, f"shard-%06d.{fmt}")
        with ShardWriter(pattern, max_count=PER_SHARD, max_size=None, encode=False) as sink:
            for i in range(samples):
                sink.write(
                    {"__key__": f"s{i:08d}", "jpg": pool[i % len(pool)], "cls": b"%d" % (i % 1000)}
                )
    open(stamp, "w").close()


def ensure_indexes(root: str, samples: int) -> None:
    """The .idx files of the tar shards, for random access and counts (once)."""
    stamp = os.path.join(root, f"indexed-{samples}")
    if not os.path.exists(stamp):
        from shardkit.tools import write_indexes

        write_indexes(shards(root, samples, "tar"))
        open(stamp, "w").close()


def shards(root: str, samples: int, fmt: str, limit: int | None = None) -> list[str]:
    folder = os.path.join(root, str(samples), fmt)
    names = sorted(n for n in os.listdir(folder) if n.endswith(fmt))
    if limit is not None:
        names = names[: max(2, -(-limit // PER_SHARD))]
    return [os.path.join(folder, n) for n in names]


# --------------------------------------------------------------------------- contenders
# Each takes (root, samples, limit), does its imports, and returns the work to time: a
# function returning the number of samples it produced.

Work = Callable[[], int]


def _count(items: Iterable[Any]) -> int:
    n = 0
    for _ in items:
        n += 1
    return n


def _images() -> None:
    """Import what image decoding needs up front, for every contender alike."""
    import numpy  # noqa: F401
    import PIL.Image  # noqa: F401


def tarfile_raw(root: str, samples: int, limit: int) -> Work:
    import tarfile

    urls = shards(root, samples, "tar")

    def work() -> int:
        n, last = 0, None
        for path in urls:
            with tarfile.open(path, "r|") as tar:
                sample: dict[str, bytes] = {}
                for member in tar:
                    key, _, ext = member.name.partition(".")
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    if key != last:
                        n, last, sample = n + 1, key, {}
                    sample[ext] = data
        return n

    return work


def webdataset_raw(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    urls = shards(root, samples, "tar")
    return lambda: _count(wds.WebDataset(urls, shardshuffle=False))


def shardkit_raw(root: str, samples: int, limit: int, copy: bool = True) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tar")
    return lambda: _count(Dataset(urls, copy=copy))


def shardkit_raw_views(root: str, samples: int, limit: int) -> Work:
    """``Dataset(copy=False)``: fields are memoryviews of the memory-mapped shard, as
    litdata's are of its chunks."""
    return shardkit_raw(root, samples, limit, copy=False)


def webdataset_rgb8(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    _images()
    urls = shards(root, samples, "tar", limit)
    return lambda: _count(wds.WebDataset(urls, shardshuffle=False).decode("rgb8"))


def shardkit_rgb8(root: str, samples: int, limit: int, threads: int | None = None) -> Work:
    from shardkit import Dataset

    _images()
    urls = shards(root, samples, "tar", limit)
    return lambda: _count(Dataset(urls).decode("rgb8", threads=threads))


def shardkit_rgb8_1thread(root: str, samples: int, limit: int) -> Work:
    """As the peers decode when iterated in one process: one sample at a time."""
    return shardkit_rgb8(root, samples, limit, threads=1)


def _decoder_alone(root: str, samples: int, limit: int, threads: int, spec: str = "rgb8") -> Work:
    """A ceiling, not a contender: ``Decoder("rgb8")`` on samples already in memory (the
    first 400 distinct ones, cycled to ``limit``), in ``threads`` threads, nothing read. A
    reader that decodes in one thread stays under the one-thread figure; the many-thread
    figure is what this machine's cores gave this decoder during the run."""
    import itertools
    import threading

    from shardkit import Dataset
    from shardkit.codecs import Decoder

    _images()
    pool = list(itertools.islice(Dataset(shards(root, samples, "tar", 400)), 400))
    decoder = Decoder(spec)
    decoder(pool[0])  # load the decoder's modules before the clock

    def decode(count: int) -> None:
        for sample in itertools.islice(itertools.cycle(pool), count):
            decoder(sample)

    def work() -> int:
        shares = [limit // threads + (i < limit % threads) for i in range(threads)]
        running = [threading.Thread(target=decode, args=(n,)) for n in shares]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        return limit

    return work


def decoder_alone_1(root: str, samples: int, limit: int) -> Work:
    return _decoder_alone(root, samples, limit, 1)


def spec_torchrgb8(root: str, samples: int, limit: int) -> Work:
    return _decoder_alone(root, samples, limit, 1, "torchrgb8")


def spec_torchrgb(root: str, samples: int, limit: int) -> Work:
    return _decoder_alone(root, samples, limit, 1, "torchrgb")


def _core_threads() -> int:
    """The decode threads shardkit's ``decode()`` picks in one process here (at least 2)."""
    from shardkit.pipeline._context import Context

    try:
        from shardkit.pipeline._decode import default_threads
    except ImportError:  # an older shardkit, for before/after runs: min(4, cores) then
        return max(2, min(4, len(os.sched_getaffinity(0))))
    return max(2, default_threads(Context(seed=0, epoch=0)))


def decoder_alone_cores(root: str, samples: int, limit: int) -> Work:
    return _decoder_alone(root, samples, limit, _core_threads())


def tfdata_parse(root: str, samples: int, limit: int) -> Work:
    import tensorflow as tf

    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in ("__key__", "jpg", "cls")}
    urls = shards(root, samples, "tfrecord")

    def work() -> int:
        n = 0
        for record in tf.data.TFRecordDataset(urls):
            tf.io.parse_single_example(record, spec)
            n += 1
        return n

    return work


def shardkit_tfrecord(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tfrecord")
    return lambda: _count(Dataset(urls))


def _loader(dataset: Any) -> Work:
    from torch.utils.data import DataLoader

    def work() -> int:
        loader = DataLoader(dataset, batch_size=32, num_workers=2)
        return sum(len(labels) for _, labels in loader)

    return work


def webdataset_loader(root: str, samples: int, limit: int) -> Work:
    import webdataset as wds

    urls = shards(root, samples, "tar", limit)
    return _loader(wds.WebDataset(urls, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls"))


def shardkit_loader(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    urls = shards(root, samples, "tar", limit)
    return _loader(Dataset(urls).decode("rgb8").to_tuple("jpg", "cls"))


def _random_order(total: int, limit: int) -> list[int]:
    import random

    return random.Random(0).sample(range(total), min(limit, total))


def shardkit_random(
    root: str, samples: int, limit: int, copy: bool = True, mapped: bool | None = None
) -> Work:
    from shardkit import IndexedDataset

    ds = IndexedDataset(os.path.join(root, str(samples), "tar"), copy=copy)
    if mapped is not None:
        ds._map_local = mapped  # the benchmark's switch: slices of a memory map or pread
    order = _random_order(len(ds), limit)

    def work() -> int:
        for i in order:
            ds[i]
        return len(order)

    return work


def shardkit_random_mmap(root: str, samples: int, limit: int) -> Work:
    """``ds[i]`` copying each field out of the shard's memory map instead of a pread."""
    return shardkit_random(root, samples, limit, mapped=True)


def shardkit_random_views(root: str, samples: int, limit: int) -> Work:
    """``IndexedDataset(copy=False)``: fields are memoryviews of the shard's map."""
    return shardkit_random(root, samples, limit, copy=False)


def _spans_floor(paths: list[str], spans: list[list[tuple[int, int]]], limit: int) -> Work:
    """One bare ``os.pread`` of each sample's bytes, in the random order of the random
    access group: what touching the data costs on these files, with no parsing."""
    order = _random_order(sum(len(s) for s in spans), limit)
    flat = [(fd, o, n) for fd, shard in zip(paths, spans, strict=True) for o, n in shard]

    def work() -> int:
        fds: dict[str, int] = {}
        for i in order:
            path, offset, size = flat[i]
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY)
            os.pread(fd, size, offset)
        for fd in fds.values():
            os.close(fd)
        return len(order)

    return work


def shardkit_floor(root: str, samples: int, limit: int) -> Work:
    paths = shards(root, samples, "tar")
    spans = []
    for path in paths:
        with open(path + ".idx") as f:
            index = json.load(f)
        spans.append(list(zip(index["offsets"], index["sizes"], strict=True)))
    return _spans_floor(paths, spans, limit)


def mds_floor(root: str, samples: int, limit: int) -> Work:
    """The same over MDS's shard files (a uint32 count, then count+1 uint32 offsets)."""
    import itertools
    import struct

    folder = os.path.join(root, str(samples), "mds")
    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".mds"))
    spans = []
    for path in paths:
        with open(path, "rb") as f:
            (count,) = struct.unpack("<I", f.read(4))
            ends = struct.unpack(f"<{count + 1}I", f.read(4 * (count + 1)))
        spans.append([(a, b - a) for a, b in itertools.pairwise(ends)])
    return _spans_floor(paths, spans, limit)


def _peer_random(ds: Any, limit: int) -> Work:
    order = _random_order(len(ds), limit)

    def work() -> int:
        for i in order:
            ds[i]
        return len(order)

    return work


def _peer_decode(pillow: bool) -> Callable[[dict[str, Any]], Any]:
    """How a peer's sample (``key``, ``jpg``, ``cls``) becomes an HxWx3 uint8 array and an int:
    with ``shardkit.codecs.Decoder("rgb8")``, the decoder of shardkit's ``decode("rgb8")``
    (litdata's memoryviews become bytes first), or with Pillow as a user would write it."""
    _images()
    if pillow:
        import io

        import numpy as np
        import PIL.Image

        def by_pillow(s: dict[str, Any]) -> Any:
            with PIL.Image.open(io.BytesIO(s["jpg"])) as img:
                return np.asarray(img.convert("RGB")), int(bytes(s["cls"]))

        return by_pillow
    from shardkit.codecs import Decoder

    decoder = Decoder("rgb8")
    return lambda s: decoder({"__key__": s["key"], "jpg": bytes(s["jpg"]), "cls": bytes(s["cls"])})


def _peer_rgb8(ds: Any, limit: int, pillow: bool = False) -> Work:
    """Iterate a peer's dataset, decoding its first ``limit`` samples (see _peer_decode)."""
    import itertools

    decode = _peer_decode(pillow)

    def work() -> int:
        n = 0
        for s in itertools.islice(ds, limit):
            decode(s)
            n += 1
        return n

    return work


def mds_raw(root: str, samples: int, limit: int) -> Work:
    from _peers import mds_dataset

    ds = mds_dataset(root, samples)
    return lambda: _count(ds)


def litdata_raw(root: str, samples: int, limit: int) -> Work:
    from _peers import litdata_dataset

    ds = litdata_dataset(root, samples)
    return lambda: _count(ds)


def mds_rgb8(root: str, samples: int, limit: int) -> Work:
    from _peers import mds_dataset

    return _peer_rgb8(mds_dataset(root, samples), limit)


def litdata_rgb8(root: str, samples: int, limit: int) -> Work:
    from _peers import litdata_dataset

    return _peer_rgb8(litdata_dataset(root, samples), limit)


def mds_pillow(root: str, samples: int, limit: int) -> Work:
    from _peers import mds_dataset

    return _peer_rgb8(mds_dataset(root, samples), limit, pillow=True)


def litdata_pillow(root: str, samples: int, limit: int) -> Work:
    from _peers import litdata_dataset

    return _peer_rgb8(litdata_dataset(root, samples), limit, pillow=True)


def mds_random(root: str, samples: int, limit: int) -> Work:
    from _peers import mds_dataset

    return _peer_random(mds_dataset(root, samples), limit)


def litdata_random(root: str, samples: int, limit: int) -> Work:
    from _peers import litdata_dataset

    return _peer_random(litdata_dataset(root, samples), limit)


def _pillow_sized(size: int) -> Callable[[bytes], Any]:
    """Pillow's decode, then the resize of ``shardkit.image(size)`` (the centre square,
    bilinear, one pass), as a user writes decode-then-resize: the full-size decode."""
    import io

    import numpy as np
    import PIL.Image

    def decode(data: bytes) -> Any:
        with PIL.Image.open(io.BytesIO(data)) as img:
            full = img.convert("RGB")
        side = min(full.size)
        left, top = (full.width - side) / 2, (full.height - side) / 2
        box = (left, top, left + side, top + side)
        return np.asarray(full.resize((size, size), PIL.Image.Resampling.BILINEAR, box=box))

    return decode


def _shardkit_sized(root: str, samples: int, limit: int, size: int, threads: int | None) -> Work:
    import shardkit

    _images()
    urls = shards(root, samples, "tar", limit)
    return lambda: _count(shardkit.Dataset(urls).decode(shardkit.image(size), threads=threads))


def _pillow_sized_reader(root: str, samples: int, limit: int, size: int) -> Work:
    """shardkit's reader, one thread, each JPEG through :func:`_pillow_sized`."""
    from shardkit import Dataset

    _images()
    urls = shards(root, samples, "tar", limit)
    decode = _pillow_sized(size)
    return lambda: _count(Dataset(urls).map(lambda s: decode(s["jpg"])))


def _litdata_sized(root: str, samples: int, limit: int, size: int) -> Work:
    import itertools

    from _peers import litdata_dataset

    _images()
    ds = litdata_dataset(root, samples)
    decode = _pillow_sized(size)
    return lambda: sum(
        1 for s in itertools.islice(ds, limit) if decode(bytes(s["jpg"])) is not None
    )


def sized224_1thread(root: str, samples: int, limit: int) -> Work:
    return _shardkit_sized(root, samples, limit, 224, 1)


def sized224(root: str, samples: int, limit: int) -> Work:
    return _shardkit_sized(root, samples, limit, 224, None)


def pillow224(root: str, samples: int, limit: int) -> Work:
    return _pillow_sized_reader(root, samples, limit, 224)


def litdata_pillow224(root: str, samples: int, limit: int) -> Work:
    return _litdata_sized(root, samples, limit, 224)


def sized112_1thread(root: str, samples: int, limit: int) -> Work:
    return _shardkit_sized(root, samples, limit, 112, 1)


def pillow112(root: str, samples: int, limit: int) -> Work:
    return _pillow_sized_reader(root, samples, limit, 112)


def litdata_pillow112(root: str, samples: int, limit: int) -> Work:
    return _litdata_sized(root, samples, limit, 112)


def shardkit_one_source(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset

    folder = os.path.join(root, str(samples), "tar")
    return lambda: _count(Dataset(folder, seed=0).map(len))


def shardkit_mix_two(root: str, samples: int, limit: int) -> Work:
    from shardkit import Dataset, mix

    listed = Dataset(os.path.join(root, str(samples), "tar")).shards  # counts from .idx
    counts = listed.counts or ()
    half = len(listed.urls) // 2
    parts = []
    for part, span in (("a", slice(None, half)), ("b", slice(half, None))):
        path = os.path.join(root, str(samples), f"mix-{part}.json")
        entries = [
            {"url": url, "samples": n}
            for url, n in zip(listed.urls[span], counts[span], strict=True)
        ]
        with open(path, "w") as f:
            json.dump({"shards": entries}, f)
        parts.append(Dataset(path, seed=0))
    # Weights of the halves' sizes: one epoch reads every sample once, as one source does.
    mixed = mix(parts, weights=[sum(counts[:half]), sum(counts[half:])], seed=0)
    return lambda: _count(mixed.map(len))


GROUPS: dict[str, list[tuple[str, Callable[[str, int, int], Work]]]] = {
    "raw iteration": [
        ("shardkit", shardkit_raw),
        ("shardkit views", shardkit_raw_views),
        ("webdataset", webdataset_raw),
        ("tarfile loop", tarfile_raw),
        ("MDS", mds_raw),
        ("litdata", litdata_raw),
    ],
    'decode("rgb8")': [
        ("shardkit", shardkit_rgb8),
        ("shardkit 1 thr", shardkit_rgb8_1thread),
        ("webdataset", webdataset_rgb8),
        ("MDS", mds_rgb8),
        ("litdata", litdata_rgb8),
        ("MDS Pillow", mds_pillow),
        ("litdata Pillow", litdata_pillow),
        ("decoder alone", decoder_alone_1),
        (f"decoder x{_core_threads()}", decoder_alone_cores),
    ],
    "image specs, decoder alone": [
        ("rgb8", decoder_alone_1),
        ("torchrgb8", spec_torchrgb8),
        ("torchrgb", spec_torchrgb),
    ],
    # 384x384 JPEGs: image(224) decodes them at 5/8 scale (240 px), image(112) at 3/8
    # (144 px); 500x375 (ImageNet's usual size): at 5/8 (313x235) and 3/8 (188x141).
    "image(224) center crop, 384x384": [
        ("shardkit 1 thr", sized224_1thread),
        ("shardkit", sized224),
        ("Pillow 1 thr", pillow224),
        ("litdata Pillow", litdata_pillow224),
    ],
    "image(112) center crop, 384x384": [
        ("shardkit 1 thr", sized112_1thread),
        ("Pillow 1 thr", pillow112),
        ("litdata Pillow", litdata_pillow112),
    ],
    "image(224) center crop, 500x375": [
        ("shardkit 1 thr", sized224_1thread),
        ("shardkit", sized224),
        ("Pillow 1 thr", pillow224),
        ("litdata Pillow", litdata_pillow224),
    ],
    "image(112) center crop, 500x375": [
        ("shardkit 1 thr", sized112_1thread),
        ("Pillow 1 thr", pillow112),
        ("litdata Pillow", litdata_pillow112),
    ],
    "TFRecord read+parse": [("shardkit", shardkit_tfrecord), ("tf.data", tfdata_parse)],
    "DataLoader(workers=2) rgb8": [
        ("shardkit", shardkit_loader),
        ("webdataset", webdataset_loader),
    ],
    "random ds[i], raw": [
        ("shardkit", shardkit_random),
        ("shardkit mmap", shardkit_random_mmap),
        ("shardkit views", shardkit_random_views),
        ("MDS", mds_random),
        ("litdata", litdata_random),
    ],
    "random: bare pread of the bytes": [
        ("shardkit tar", shardkit_floor),
        ("MDS shards", mds_floor),
    ],
    "mix(2 sources) vs 1, raw": [
        ("shardkit mix", shardkit_mix_two),
        ("one source", shardkit_one_source),
    ],
}
CONTENDERS = {fn.__name__: fn for group in GROUPS.values() for _, fn in group}
# The groups whose JPEGs are not 384x384 (their samples live in jpeg_root(DATA, size)).
GROUP_JPEG = {group: group.rpartition(", ")[2] for group in GROUPS if group.endswith("500x375")}
PEERS = {name for name in CONTENDERS if name.startswith(("mds_", "litdata_"))}  # --peers venv


# --------------------------------------------------------------------------- running


def peak_rss_mb() -> float:
    """This process's peak RSS. ``ru_maxrss`` survives exec on Linux (it would report the
    launching process's peak if that was larger), so read the memory map's own VmHWM."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished children (workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def _jpeg_decoder() -> str:
    """Which JPEG decoder this process loaded: libjpeg-turbo via simplejpeg, Pillow, none."""
    if "simplejpeg" in sys.modules:
        return "simplejpeg"
    return "Pillow" if "PIL.JpegImagePlugin" in sys.modules else "-"


def child(name: str, root: str, samples: int, limit: int) -> None:
    """Run one contender in this (fresh) process and print its figures as JSON."""
    work = CONTENDERS[name](root, samples, limit)
    cpu_before = _cpu_seconds()
    started = time.perf_counter()
    count = work()
    seconds = time.perf_counter() - started
    cpu = _cpu_seconds() - cpu_before
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result = {
        "samples": count,
        "seconds": seconds,
        "cpu_us": cpu / max(count, 1) * 1e6,
        "cores": cpu / seconds,
        "rss_mb": peak_rss_mb(),
        "worker_rss_mb": workers,
        "torch": "torch" in sys.modules,
        "jpeg": _jpeg_decoder(),
    }
    print(json.dumps(result))


HERE = os.path.dirname(os.path.abspath(__file__))


def peer_env() -> dict[str, str]:
    """The environment of a child in the peers' venv: the torchvision stand-in first."""
    path = [os.path.join(HERE, "standins"), HERE, os.path.join(os.path.dirname(HERE), "src")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def run_child(
    name: str, root: str, samples: int, limit: int, python: str | None = None
) -> dict[str, Any]:
    command = [python or sys.executable, __file__, "--child", name, "--data", root]
    command += ["--samples", str(samples), "--limit", str(limit)]
    env = peer_env() if python else None
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = dict(min(runs, key=lambda r: r["seconds"]))
    best["rate"] = best["samples"] / best["seconds"]
    best["cpu_us"] = min(r["cpu_us"] for r in runs)
    best["rss_mb"] = max(r["rss_mb"] for r in runs)
    best["worker_rss_mb"] = max(r["worker_rss_mb"] for r in runs)
    return best


def report(results: dict[str, list[tuple[str, dict[str, Any]]]], out: Results) -> None:
    print(
        f"{'group':<32} {'contender':<14} {'samples':>8} {'samples/s':>10} {'ratio':>7} "
        f"{'CPU us/sample':>14} {'cores':>6} {'peak RSS MB':>12} {'worker RSS MB':>14} "
        f"{'torch':>6} {'JPEG':>10}"
    )
    for group, rows in results.items():
        ours = rows[0][1]["rate"]
        out.section(
            group,
            "samples/s",
            [
                {
                    "name": n,
                    "rate": round(r["rate"]),
                    "peak_mb": round(r["rss_mb"]),
                    "cpu_us": round(r["cpu_us"]),  # per sample: the steadier figure
                }
                for n, r in rows
            ],
        )
        for label, r in rows:
            ratio = ours / r["rate"]
            workers = f"{r['worker_rss_mb']:.0f}" if "DataLoader" in group else "-"
            jpeg = r["jpeg"] if group.startswith("decode") else "-"
            print(
                f"{group:<32} {label:<14} {r['samples']:>8} {r['rate']:>10.0f} "
                f"{ratio:>6.2f}x {r['cpu_us']:>14.0f} {r['cores']:>6.2f} {r['rss_mb']:>12.0f} "
                f"{workers:>14} {r['torch']!s:>6} {jpeg:>10}"
            )
    print(
        "ratio = shardkit's samples/s over the contender's (best of the runs); CPU us/sample: "
        "user+sys time of all threads and workers (least of the runs), which a busy machine "
        "disturbs less than wall time; cores: CPU time over wall time in the fastest run (how "
        "many cores the contender kept busy); RSS: peak; JPEG: the decoder the decoding process "
        "loaded. 'decoder alone' / 'decoder xN' are ceilings, not contenders: shardkit's "
        "decoder on samples already in memory, in one thread / in the N threads shardkit's "
        "decode() uses here: what this machine gave a decoder during the run"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK} samples, not {FULL}")
    parser.add_argument("--repeat", type=int, default=2, help="runs per contender (best)")
    parser.add_argument("--data", default="/dev/shm/shardkit-bench-read")
    parser.add_argument("--peers", default=None, metavar="PYTHON", help="venv with MDS, litdata")
    parser.add_argument("--only", default=None, help="run only the groups containing this text")
    parser.add_argument("--samples", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    add_json_option(parser, "read")
    steady.add_options(parser)
    args = parser.parse_args()
    if args.steady:  # bench/steady.py: in-process steady state against the peers
        if args.data == parser.get_default("data"):
            args.data = "/dev/shm/shardkit-bench-steady"
        if args.json == parser.get_default("json"):  # --workers: read-loader.json
            kept = "read-loader.json" if args.workers else "read-steady.json"
            args.json = os.path.join(os.path.dirname(args.json), kept)
        out = Results(os.path.splitext(os.path.basename(args.json))[0])
        steady.main(args, out)
        if not args.child:
            out.write(args.json)
        return
    samples = args.samples or (QUICK if args.quick else FULL)
    limit = args.limit or min(samples, 4000)  # decode and DataLoader groups
    if args.child == "prepare-peers":
        from _peers import prepare

        prepare(args.data, samples, shards(args.data, samples, "tar"))
        return
    if args.child:
        child(args.child, args.data, samples, limit)
        return
    groups = [group for group in GROUPS if not args.only or args.only in group]
    jpegs = dict.fromkeys([JPEG, *(GROUP_JPEG.get(group, JPEG) for group in groups)])
    for jpeg in jpegs:
        ensure_data(args.data, samples, jpeg)
    ensure_indexes(args.data, samples)
    if args.peers:
        for jpeg in jpegs:
            command = [args.peers, __file__, "--child", "prepare-peers"]
            command += ["--data", jpeg_root(args.data, jpeg), "--samples", str(samples)]
            subprocess.run(command, check=True, env=peer_env())
    print(f"{samples} samples of JPEGs ({', '.join(jpegs)}; ~60 KB at {JPEG}) in {args.data}")
    print(f"decode/DataLoader/random on ~{limit}")
    results = {}
    for group in groups:
        root = jpeg_root(args.data, GROUP_JPEG.get(group, JPEG))
        contenders = [c for c in GROUPS[group] if args.peers or c[1].__name__ not in PEERS]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in contenders}
        for _ in range(args.repeat):  # interleaved, so a busy moment hits every contender
            for label, fn in contenders:
                python = args.peers if fn.__name__ in PEERS else None
                runs[label].append(run_child(fn.__name__, root, samples, limit, python))
        results[group] = [(label, best_of(runs[label])) for label, _ in contenders]
    # Named after its file: bench/results/read.json is "read"; a run of some groups kept
    # beside it (read-image.json) is drawn as its own chart by bench/charts.py.
    out = Results(os.path.splitext(os.path.basename(args.json))[0])
    report(results, out)
    out.write(args.json)


if __name__ == "__main__":
    main()
