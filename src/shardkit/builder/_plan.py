"""The plan: a fixed order of items cut into shard tasks, decided before any work starts.

Everything the output depends on is decided here, from the listing, the options and the
seed alone: the order (sorted listing, then a seeded shuffle) and the cut into tasks.
Workers then only execute tasks, so the number of workers, their speed and
interruptions cannot change a byte.

Where output sizes are known in advance (listed files packed as they are) a task is one
shard: at most ``max_count`` items and ``max_size`` bytes. A pass-through tar member is
exactly its file plus headers and padding, so the estimate is exact (unless a file turns
out to be another format than its name says; the task writer then rotates to a new part
rather than pass ``max_size``). Where sizes are not known (resized images, samples from
Python, URLs), tasks are chunks of :data:`CHUNK` items and the driver cuts shards from
their output exactly (:class:`~shardkit.builder._assembly.Cutter`). Both cuts are the one
rule, :class:`shardkit.formats.cut.Cut`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..formats import tar
from . import _spill
from ._inputs import folder_json
from ._sources import Item, Items
from ._spill import Spill, bucket_count, bucketed
from .options import BuildOptions

__all__ = [
    "CHUNK",
    "Task",
    "chunk_stream",
    "cut_tasks",
    "estimator",
    "later_repeats",
    "new_item",
    "order_items",
]

CHUNK = 256
"""Most items per task when shards are assembled from chunks (sizes not known up front);
fewer when ``max_count`` is smaller."""

_BLOCK = tar.BLOCK
_TFRECORD_OVERHEAD = 16 + 160  # record framing + Example field names and tags


@dataclass(frozen=True)
class Task:
    """One unit of work: the items of one or more consecutive output shards."""

    index: int
    items: list[Item]

    def __reduce__(self) -> tuple[Callable[[int, list[tuple[Any, ...]]], Task], tuple[Any, ...]]:
        # Sent to a worker with its items as plain tuples: a NamedTuple pickles through its
        # Python-level __getnewargs__, which made sending a task ~3x slower.
        return _task, (self.index, [tuple(item) for item in self.items])


new_item = functools.partial(tuple.__new__, Item)
"""``Item(*row)``, without the Python-level ``__new__`` of a NamedTuple (a C call)."""


def _task(index: int, rows: list[tuple[Any, ...]]) -> Task:
    """A task as :meth:`Task.__reduce__` sent it."""
    return Task(index, [new_item(row) for row in rows])


def order_items(items: Items, options: BuildOptions, spill: Spill | None = None) -> Iterable[Item]:
    """The listing's order, shuffled with ``options.seed`` when ``options.shuffle``.

    Up to :data:`~.spill.ORDER_BUDGET` items (or without a ``spill``): the whole listing
    shuffled with ``random.Random(seed)``. More: each item goes to one of
    :func:`~.spill.bucket_count` buckets by a hash of its key keyed with the seed; bucket
    by bucket, its items are sorted by key and shuffled with ``random.Random("SEED:B")``.
    Either way the order depends on the listing, the seed and the budget only.
    """
    if not options.shuffle:
        return items
    if spill is None or len(items) <= _spill.ORDER_BUDGET:
        ordered = list(items)
        random.Random(options.seed).shuffle(ordered)
        return ordered
    return _bucket_shuffle(items, options.seed, spill)


def later_repeats(keys: Iterable[str], count: int, spill: Spill) -> dict[int, int]:
    """The positions (in ``keys``, ``count`` of them) whose key an earlier position holds
    already, each with that first position: the one rule that keeps a key from being
    written twice (the later input is skipped, naming the first). Found bucket by bucket
    (spilled above the budget, as :func:`order_items` does): memory grows with one bucket
    and with the repeats, never with the listing. The result depends on the keys alone."""
    buckets = bucket_count(count)

    def bucket_of(entry: tuple[str, int]) -> int:
        return zlib.crc32(entry[0].encode("utf-8", "surrogateescape")) % buckets

    later: dict[int, int] = {}  # the repeats only: never an entry per key
    numbered = ((key, position) for position, key in enumerate(keys))
    for chunk in bucketed(numbered, buckets, bucket_of, spill):
        first: dict[str, int] = {}
        for key, position in chunk:  # in listing order within a bucket
            earlier = first.setdefault(key, position)
            if earlier != position:
                later[position] = earlier
    return later


def _bucket_shuffle(items: Items, seed: int, spill: Spill) -> Iterator[Item]:
    buckets = bucket_count(len(items))
    secret = hashlib.sha256(str(seed).encode()).digest()

    def bucket_of(record: tuple[object, str, int, str, int, str]) -> int:
        key = record[1].encode("utf-8", "surrogateescape")
        digest = hashlib.blake2b(key, digest_size=8, key=secret).digest()
        return int.from_bytes(digest, "big") % buckets

    records = (tuple(item) for item in items)
    for bucket, chunk in enumerate(bucketed(records, buckets, bucket_of, spill)):
        chunk.sort(key=_identity)
        random.Random(f"{seed}:{bucket}").shuffle(chunk)
        yield from (Item(*record) for record in chunk)


def _identity(record: tuple[object, str, int, str, int, str]) -> str:
    return record[1]  # the key: unique in a listing


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _member(key: str, ext: str, size: int) -> int:
    name = len(key.encode("utf-8", "surrogateescape")) + 1 + len(ext)
    head = _BLOCK if name <= 100 else len(tar.encode_sample({"__key__": key, ext: b""}))
    return head + _padded(size)


def _json_size(item: Item, classes: list[str]) -> int:
    """Bytes of the ``json`` field the worker will write for ``item``."""
    if item.meta:
        return len(item.meta.encode("utf-8", "surrogateescape"))
    if item.label < 0:
        return 0
    name = classes[item.label]
    if 48 + 6 * (len(str(item.ref)) + len(name)) <= _BLOCK:
        return _BLOCK  # certainly one block: the exact length does not matter
    return len(folder_json(str(item.ref), name, item.label))


def _tar_estimate(item: Item, classes: list[str]) -> int:
    if len(item.key) <= 23 and not item.meta and item.label >= 0:
        # The common case, fast: every member name fits one header (4 bytes per character
        # at most, plus ".json"), and cls and json each take one block.
        name = classes[item.label]
        if 48 + 6 * (len(str(item.ref)) + len(name)) <= _BLOCK:
            return 5 * _BLOCK + _padded(item.size)  # 3 headers, cls and json blocks
    size = _member(item.key, item.ext, item.size)
    if item.label >= 0:
        size += _member(item.key, "cls", len(str(item.label)))
    meta = _json_size(item, classes)
    if meta:
        size += _member(item.key, "json", meta)
    return size


def _tfrecord_estimate(item: Item, classes: list[str]) -> int:
    # A list's other columns become features: about as many bytes as their JSON text.
    extra = len(item.meta.encode("utf-8", "surrogateescape")) if item.meta else 0
    return item.size + len(item.key) + 2 * len(str(item.ref)) + _TFRECORD_OVERHEAD + extra


def estimator(options: BuildOptions, classes: list[str]) -> Callable[[Item], int]:
    """The output size of one listed file packed as it is."""
    if options.format != "tar":
        return functools.partial(_tfrecord_estimate, classes=classes)
    # _tar_estimate's common case, with what it looks up once per class: a path of at most
    # room[label] characters keeps the json member in one block (48 + 6 * (path + class
    # name) <= 512 bytes).
    room = [(_BLOCK - 48) // 6 - len(name) for name in classes]

    def estimate(item: Item) -> int:
        label = item.label
        if label >= 0 and len(item.key) <= 23 and not item.meta:
            ref = item.ref
            if ref.__class__ is str and len(ref) <= room[label]:
                return 5 * _BLOCK + _padded(item.size)
        return _tar_estimate(item, classes)

    return estimate


def cut_tasks(
    items: Iterable[Item], options: BuildOptions, estimate: Callable[[Item], int] | None
) -> Iterator[Task]:
    """Cut ordered items into shard tasks where ``options.cut`` says, by estimated size;
    made as they are needed."""
    index = 0
    full = options.cut.full
    current: list[Item] = []
    size = 0
    for item in items:
        grow = estimate(item) if estimate is not None else 0
        if full(len(current), size, grow):
            yield Task(index, current)
            index += 1
            current, size = [], 0
        current.append(item)
        size += grow
    if current:
        yield Task(index, current)


def chunk_stream(items: Iterable[Item], size: int) -> Iterator[Task]:
    """Tasks of ``size`` consecutive items (the Cutter cuts the shards), made as they are
    needed."""
    items = iter(items)
    index = 0
    while True:
        chunk: list[Item] = []
        for item in items:
            chunk.append(item)
            if len(chunk) >= size:
                break
        if not chunk:
            return
        yield Task(index, chunk)
        index += 1
