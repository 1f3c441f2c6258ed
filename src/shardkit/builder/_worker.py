"""Run one shard task: load, validate, transform and write items into part files.

This runs in a worker process (or in the driver for one-pass iterables and single-worker
builds). Nothing per sample leaves the process: the driver gets one small
:class:`TaskResult` per task and, a few times a second, progress counts through the
reporter of the run's :class:`WorkerRun`.

A task finds its build through :func:`current_run`: the state :func:`init_worker` made
for that build in this process, which the engine sets around each of the build's tasks
(:func:`shardkit.engines.run_state`). Nothing of a build is kept in a module global, so two
builds in one process (two threads of a notebook or a service) never mix.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import storage
from ..budget import limit
from ..engines import run_state
from ..errors import DataError
from ..formats.cut import Cut
from ..formats.jsondoc import load_json
from ..formats.names import lone_surrogate
from ..formats.record import ShardRecord
from ..formats.tar import Members, tar_sample
from ._inputs import FileSource, check_listed_size, read_file
from ._partwriter import PartWriter
from ._plan import Task
from ._sources import Item, SampleFileError, SampleFiles, Source
from ._store import Store
from ._validate import Blame, check_fields, check_image
from .options import BuildOptions

if TYPE_CHECKING:
    from ._fetch import Download, Downloads

__all__ = [
    "WORKER_MODULE",
    "Reporter",
    "TaskResult",
    "WorkerContext",
    "WorkerRun",
    "current_run",
    "init_worker",
    "encode_item",
    "local_loader",
    "part_name",
    "run_task",
    "sample_record",
]

Reporter = Callable[[int, int, int], None]  # (samples, input bytes, skipped) since last call
#: An item encoded: its record's chunks, their size, its label, its tar members or None.
Encoded = tuple[list[bytes], int, int, Members | None]

# What a list's json holds besides its columns (the schema's filename, label, class text).
_META_KEYS = frozenset({"path", "class", "label"})


@dataclass(frozen=True)
class WorkerContext:
    """What every task of one build needs; sent to each worker once."""

    store: Store  # the output: parts are written straight into it
    options: BuildOptions
    source: Source
    classes: tuple[str, ...]
    assemble: bool = False  # chunk parts to assemble shards from, not whole shards


@dataclass
class TaskResult:
    """What a task sends back: its parts, what it skipped, per-class counts."""

    index: int
    parts: list[ShardRecord]  # each under its hidden part name
    skipped: list[tuple[str, str]] = field(default_factory=list)
    class_counts: dict[int, int] = field(default_factory=dict)
    input_bytes: int = 0
    sizes: list[int] = field(default_factory=list)  # per sample, for the Cutter
    # Each http(s) download's outcome, with the index (in this task) of the sample it is,
    # or of the next sample packed after it when it was skipped: its shard is known later.
    fetch: list[tuple[int, str]] = field(default_factory=list)
    # What a kind of task counts for the manifest besides samples (a token build's
    # ``documents`` and ``tokens``); journaled only when it has any.
    totals: dict[str, int] = field(default_factory=dict)
    # The __key__ of each sample written, when a Python dataset gives them: the driver
    # checks them for repeats (.keys.GivenKeys); journaled only when it has any.
    keys: list[str] = field(default_factory=list)


#: The sources whose samples give their own keys (checked once written: TaskResult.keys).
GIVEN_KEYS = frozenset({"dataset", "iterable"})

#: This module: the local pool's forkserver imports it once for every worker process.
WORKER_MODULE = __name__


@dataclass
class WorkerRun:
    """One build as a process serving its tasks sees it: its context, its reporter and
    its downloads (made by the first task that downloads; :mod:`.fetch`)."""

    context: WorkerContext
    reporter: Reporter | None = None
    downloads: Downloads | None = None

    def close(self) -> None:
        """Release what the build's tasks opened in this process (the source's cached
        input streams; the download loop and session)."""
        close = getattr(self.context.source, "close", None)
        if close is not None:
            close()
        downloads, self.downloads = self.downloads, None
        if downloads is not None:
            downloads.close()


def init_worker(context: WorkerContext, reporter: Reporter | None) -> WorkerRun:
    """The state of the build ``context`` in this process (the engine's ``init``)."""
    if context.options.transforms:
        from ._transform import limit_threads

        limit_threads()
    return WorkerRun(context, reporter)


def current_run() -> WorkerRun:
    """The build whose task is running (in this thread)."""
    try:
        state = run_state()
    except RuntimeError:
        state = None
    if not isinstance(state, WorkerRun):
        raise RuntimeError("a build task ran outside a build (not through its engine)")
    return state


def part_name(options: BuildOptions, task: int) -> str:
    """The hidden name pattern of a task's part files (``%03d`` numbers the parts)."""
    return f".{options.prefix}-task{task:06d}-part%03d.{options.extension}"


class _Progress:
    """Counts since the last report; reports at most every ``interval`` seconds."""

    def __init__(self, reporter: Reporter | None, interval: float = 0.2) -> None:
        self._reporter = reporter
        self.samples = self.bytes = self.skipped = 0
        self._interval = interval
        self._last = time.monotonic()

    def add(self, samples: int, nbytes: int, skipped: int) -> None:
        self.samples += samples
        self.bytes += nbytes
        self.skipped += skipped
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.flush()
            self._last = now

    def flush(self) -> None:
        if self._reporter is not None and (self.samples or self.skipped):
            self._reporter(self.samples, self.bytes, self.skipped)
        self.samples = self.bytes = self.skipped = 0


def run_task(task: Task) -> TaskResult:
    """Write ``task`` into part files in the output; returns what was written."""
    run = current_run()
    context = run.context
    options = context.options
    writer = _part_writer(context, part_name(options, task.index))
    result = TaskResult(task.index, [])
    progress = _Progress(run.reporter)
    local = local_loader(context.source)
    load = local or context.source.load
    add, counts = writer.add, result.class_counts
    packed = 0
    max_pixels = limit("image_pixels")  # the budget's, looked up once per task
    prefetch = getattr(context.source, "prefetch", None)  # a parquet's bytes cells
    keys = result.keys if context.source.kind in GIVEN_KEYS else None
    try:
        if prefetch is not None:
            prefetch(task.items)
        # A local folder's files are never downloaded: no URL to look for in them.
        pairs = _with_downloads(run, task.items) if local is None else _no_downloads(task)
        for item, download in pairs:
            try:
                if download is None:
                    loaded = load(item)
                else:
                    loaded = _downloaded(context, item, download, result.fetch, packed)
                chunks, size, label, members = encode_item(
                    context, item, loaded, max_pixels=max_pixels
                )
                add(item.key, chunks, size, members)
                if keys is not None:  # a dataset's sample: a mapping, its key checked
                    keys.append(loaded.get("__key__", item.key))  # type: ignore[union-attr,arg-type]
            except DataError as exc:
                if download is not None and download.result().data is not None:
                    result.fetch[-1] = (result.fetch[-1][0], "invalid image")
                path = exc.url if isinstance(exc, SampleFileError) else None
                path = path or context.source.describe(item)  # a sample's file: that file
                if options.on_error == "fail":
                    raise type(exc)(exc.message, url=path, key=item.key) from exc
                result.skipped.append((path, exc.message))
                progress.add(0, item.size, 1)
                continue
            counts[label] = counts.get(label, 0) + 1
            packed += 1
            result.input_bytes += item.size
            progress.add(1, item.size, 0)
        progress.flush()
        parts = writer.close()
    except BaseException:  # a part being written is never left behind, even by a signal
        writer.abort()
        raise
    result.parts = parts
    result.sizes = writer.sizes
    return result


def local_loader(source: Source) -> Callable[[Item], bytes | SampleFiles] | None:
    """``source.load`` for a local folder (its items are files under its root, or
    samples of several files), with no per-item dispatch for a file: its path is the
    root's and the item's, read by :func:`.inputs.read_file` as ``load`` reads it. None
    for any other source."""
    if not isinstance(source, FileSource) or source.kind != "image_folder":
        return None
    if storage.url_scheme(source.root):  # an object-store folder: its files are URLs
        return None
    prefix, load = os.path.join(source.root, ""), source.load

    def local(item: Item) -> bytes | SampleFiles:
        ref = item.ref
        return read_file(prefix + ref, item.size) if type(ref) is str else load(item)

    return local


def _no_downloads(task: Task) -> Iterator[tuple[Item, None]]:
    return zip(task.items, itertools.repeat(None))


def _with_downloads(
    run: WorkerRun, items: list[Item]
) -> Iterator[tuple[Item, Future[Download] | None]]:
    """The items with their downloads, when some are http(s) URLs (see :mod:`.fetch`)."""
    url_of = getattr(run.context.source, "http_url", None)
    if url_of is None or not any(map(url_of, items)):
        return zip(items, itertools.repeat(None))
    from ._fetch import Downloads  # asyncio and aiohttp only where something is downloaded

    if run.downloads is None:
        run.downloads = Downloads(run.context.options)
    return run.downloads.prefetch(url_of, items)


def _downloaded(
    context: WorkerContext,
    item: Item,
    download: Future[Download],
    outcomes: list[tuple[int, str]],
    packed: int,
) -> bytes:
    """The item's downloaded bytes; its outcome is noted in ``outcomes`` at ``packed``,
    the samples written before it."""
    data, category, message = download.result()
    outcomes.append((packed, category))
    if data is None:
        raise DataError(message)
    check_listed_size(data, item.size, context.source.describe(item))
    return data


def _part_writer(context: WorkerContext, pattern: str) -> PartWriter:
    options = context.options
    if context.assemble:  # one part, samples back to back; the driver cuts the shards
        return PartWriter(context.store, pattern, cut=Cut(), keep_sizes=True)
    return PartWriter(
        context.store,
        pattern,
        cut=options.cut,
        trailer=options.trailer,
        format=options.format,
        index=options.index,
    )


def encode_item(
    context: WorkerContext,
    item: Item,
    loaded: bytes | Mapping[str, Any] | None = None,
    *,
    max_pixels: int | None = None,
) -> Encoded:
    """One item's output bytes (as chunks), their size, its label and its tar members
    (:func:`~shardkit.formats.tar.tar_sample`; None where a member table parses them);
    ``loaded`` is what the source loads for it, when already loaded; ``max_pixels`` is
    the budget's ``image_pixels`` limit, when the caller looked it up.

    Raises :class:`~shardkit.errors.DataError` for bad data (the item is then skipped).
    """
    if loaded is None:
        loaded = context.source.load(item)
    options = context.options
    if isinstance(loaded, SampleFiles) or item.fields:  # a sample of several fields
        return _encode_fields(context, item, loaded)
    if not isinstance(loaded, bytes):  # a sample from Python or from shards
        return _encode_python(context, item, loaded)
    ext = check_image(loaded, item.ext, options.validate, max_pixels=max_pixels)
    size: tuple[int, int] | None = None
    if options.transforms:
        loaded, ext, size = _transform(options, loaded, ext)
    if options.format == "tfrecord":
        record = _record(_example(context, item, loaded, ext, size))
        return [record], len(record), item.label, None
    return sample_record(context, item, [(ext, loaded)])


def _encode_fields(
    context: WorkerContext, item: Item, loaded: bytes | Mapping[str, Any]
) -> Encoded:
    """A sample of several fields, a folder's (its files) or a list's (``--field``, a
    parquet's bytes columns): read, each checked by :func:`.validate.check_fields` (image
    fields transformed as the options say), then made into its record."""
    options = context.options
    fields: Iterable[tuple[str, bytes, Blame]]
    if isinstance(loaded, SampleFiles):  # a folder's files: a bad one is named
        fields = ((name, loaded[name], Blame(file=path)) for path, name, _ in item.ref)
    else:
        from ._fields import sample_fields

        fields = sample_fields(context.source, item, loaded)
    transform = functools.partial(_transformed, options) if options.transforms else None
    return sample_record(context, item, check_fields(fields, options.validate, transform))


def sample_record(context: WorkerContext, item: Item, fields: list[tuple[str, bytes]]) -> Encoded:
    """The output record of a sample's checked ``fields`` (a tar sample's members, or a
    TFRecord Example): the fields in order, then ``cls`` (the item's label, when it has
    one) and the generated ``json`` (:meth:`Source.json_text`: a list's other columns, the
    class layout's path, class and label) unless a field is ``json`` already: a sample's
    own ``json`` is packed as it is, the generated one left out. Returns the record's
    chunks, its size, the label and its tar members (None for a TFRecord)."""
    fields = list(fields)
    if item.label >= 0:
        fields.append(("cls", str(item.label).encode()))
    meta = context.source.json_text(item, context.classes)
    if meta and not any(name == "json" for name, _ in fields):
        fields.append(("json", meta.encode("utf-8", "surrogateescape")))
    if context.options.format == "tfrecord":  # the same bytes, as features (none encoded)
        sample: dict[str, Any] = {"__key__": item.key, **dict(fields)}
        if item.label >= 0:
            sample["cls"] = item.label  # an int64 feature, as a sample from Python's
        record = _record(sample)
        return [record], len(record), item.label, None
    chunks, total, members = tar_sample(item.key, fields)
    return chunks, total, item.label, members


def _transform(options: BuildOptions, data: bytes, ext: str) -> tuple[bytes, str, tuple[int, int]]:
    from ._transform import transform_image

    return transform_image(
        data,
        ext,
        resize=options.resize,
        max_side=options.max_side,
        quality=options.quality,
        mode=options.resize_mode,
        encode=options.encode,
    )


def _transformed(options: BuildOptions, data: bytes, ext: str) -> tuple[bytes, str]:
    return _transform(options, data, ext)[:2]


def _record(sample: Mapping[str, Any]) -> bytes:
    from ..formats.example import sample_to_example
    from ..formats.tfrecord import frame_record

    return frame_record(sample_to_example(sample))


def _example(
    context: WorkerContext, item: Item, data: bytes, ext: str, size: tuple[int, int] | None
) -> dict[str, Any]:
    """The Example of an image file, in the shardkit TFRecord schema (formats.tfschema)."""
    from ..formats import tfschema as tf

    if size is None:
        from ..codecs import image_size

        size = image_size(data)
    sample: dict[str, Any] = {
        "__key__": item.key,
        tf.IMAGE: data,
        tf.FORMAT: tf.image_format(ext),
        tf.HEIGHT: size[1],
        tf.WIDTH: size[0],
        tf.FILENAME: context.source.describe(item),
    }
    if item.label >= 0:
        sample[tf.LABEL] = item.label
        if item.label < len(context.classes):
            sample[tf.TEXT] = context.classes[item.label]
    if item.meta:  # a list's other columns, each a feature of its own
        for name, value in load_json(item.meta, what="a list row's columns").items():
            feature = tf.column_feature(value)
            if name not in _META_KEYS and feature is not None:
                sample[name] = feature
    return sample


def _encode_python(context: WorkerContext, item: Item, sample: Mapping[str, Any]) -> Encoded:
    from ..codecs import encode_sample
    from ..formats.tar import encode_sample as tar_bytes

    out = dict(sample)
    out.setdefault("__key__", item.key)
    if isinstance(out["__key__"], str) and (problem := lone_surrogate(out["__key__"], "key")):
        raise DataError(problem)
    label = _label_of(out, item.label)
    if context.options.format == "tfrecord":
        from ..formats.example import encode_other_values

        data = _record(encode_other_values(out, encode_sample))
    else:
        data = tar_bytes(encode_sample(out))
    return [data], len(data), label, None


def _label_of(sample: Mapping[str, Any], default: int) -> int:
    """The integer class label of a sample from Python or shards, or ``default``."""
    value = sample.get("cls", sample.get("image/class/label", default))
    if isinstance(value, bytes) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
