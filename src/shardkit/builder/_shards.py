"""Existing shards as a source: re-shard, reshuffle, change format.

The driver lists every input shard's samples (key, byte offset, size): from the shard's
``.idx`` file when it has one (:mod:`shardkit.formats.index`; a stale one is refused),
else by reading the shard through once. Workers then read each sample back by seeking
to its offset, so the plan can put any sample anywhere. That needs uncompressed shards
(a gzip stream cannot seek: decompress it first). Remote shards (s3, gs, http with range
requests) without an index are listed by streaming them through the driver once; workers
then fetch samples with ranged reads (256 KiB read-ahead, so a ``--no-shuffle`` pass
reads each shard nearly sequentially).

Samples keep their keys and fields. Between formats, samples are laid out in the shardkit
TFRecord schema (:mod:`shardkit.formats.tfschema`, the same as ``convert``'s): a tar
sample's image, ``cls`` and ``json`` become ``image/encoded``, ``image/format``,
``image/height``, ``image/width``, ``image/class/label``, ``image/filename`` and
``image/class/text`` in a ``tf.train.Example``, and back.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import mmap
import os
import stat
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from .. import config, storage
from ..errors import BuildError, DataError
from ..formats import tfrecord, tfschema
from ..formats.index import ShardIndex, check_key, indexed_sample
from ..formats.names import Format, is_shard_name
from ..formats.tar import BLOCK, Grouping, TarScanner, buffer_samples
from ..handlers import ignore_and_continue
from ..pipeline import list_folder, load_indexes
from ..ranges import RangeReader
from ..reader import detect_format, iter_stream_samples, read_shard
from ._plan import later_repeats
from ._sources import Item, Listing, SpilledItems
from ._spill import Spill, bucket_count, bucketed, held
from ._store import endpoint_options
from ._walk import file_kind

__all__ = ["ShardSource", "list_shards"]

_READ_AHEAD = 256 << 10  # bytes fetched per ranged read of a remote shard
_KEEP_OPEN = 8  # input shards kept open per thread between samples
_COMPRESSED = (
    "compressed shards cannot be re-sharded (samples are read by seeking): decompress them first"
)


def list_shards(
    spec: str | list[str],
    output_format: str,
    *,
    path: str | None = None,
    spill: Spill | None = None,
    classes: tuple[str, ...] = (),
) -> Listing:
    """List every sample of the shards ``spec`` names (a brace pattern, one path, or a list
    of them); ``path`` names the source in errors and the manifest (default: ``spec``).
    Above the budget the samples are kept in ``spill`` files (:mod:`.spill`). ``classes``:
    the class names of the samples' ``cls`` labels, as the input manifest states them
    (:func:`manifest_classes`), carried to the output's manifest."""
    where = path if path is not None else str(spec)
    if spill is None:
        with Spill() as own:  # everything is held in the end anyway
            return list_shards(spec, output_format, path=path, spill=own, classes=classes)._held()
    urls = storage.expand_urls(spec)
    versions = [_version(url) for url in urls]
    digest = hashlib.sha256()

    indexes = _indexes(urls, versions)

    def listed() -> Iterator[tuple[tuple[int, int, int], str, int]]:
        for index, (url, version) in enumerate(zip(urls, versions, strict=True)):
            digest.update(f"{url}\0{version}\n".encode())
            yield from _samples(index, url, indexes[index])

    records = held(listed(), spill)
    if not records:
        raise BuildError("the shards hold no samples", url=where)
    # Keys that repeat (e.g. TFRecords without __key__) get their shard's number.
    prefixed = _repeats((key for _, key, _ in records), len(records), spill)

    def item(record: tuple[tuple[int, int, int], str, int]) -> Item:
        ref, key, size = record
        ref = (int(ref[0]), int(ref[1]), int(ref[2]))
        return Item(ref, f"{ref[0]:06d}/{key}" if prefixed else key, -1, "", size, "")

    # A key a shard holds twice (not adjacent: else they are one sample) is written once,
    # its first time; each later one is skipped, naming where the first is.
    skipped: list[tuple[str, str]] = []
    later = later_repeats((item(r).key for r in records), len(records), spill)
    if later:
        firsts = {first: "" for first in later.values()}
        for position, record in enumerate(records):
            if position in firsts:
                firsts[position] = _where(urls, item(record))
        for position, record in enumerate(records):
            if position in later:
                where_first = firsts[later[position]]
                skipped.append(
                    (_where(urls, item(record)), f"key repeats: packed from {where_first}")
                )
        records = held((r for n, r in enumerate(records) if n not in later), spill)
    items = [item(r) for r in records] if isinstance(records, list) else SpilledItems(records, item)
    return Listing(
        kind="shards",
        path=where,
        source=ShardSource(tuple(urls), output_format, tuple(versions), prefixed=prefixed),
        items=items,
        classes=list(classes),
        skipped=[*_not_shards(where, urls), *skipped],
        fingerprint=digest.hexdigest(),
        sizes_known=False,
    )


def _where(urls: list[str] | tuple[str, ...], item: Item) -> str:
    """Where a listed sample is: ``<shard url>@<offset>``."""
    return f"{urls[item.ref[0]]}@{item.ref[1]}"


def _not_shards(path: str, urls: list[str]) -> list[tuple[str, str]]:
    """Each entry of a local source folder named like a shard that is not a regular file
    (a FIFO, a socket, a folder, a dangling link), with its kind: never opened (a read
    from a FIFO blocks), never left out unnamed. The folder is listed by the one resolver
    (:func:`~shardkit.pipeline._urls.list_folder`: a shard is a regular file)."""
    if not storage.is_local(path) or not os.path.isdir(storage.local_path(path)):
        return []
    folder = storage.local_path(path)
    listing = list_folder(path)
    listed = {os.path.basename(storage.local_path(url)) for url in urls}
    skipped = []
    for name in sorted(listing.names):
        if name in listed or name in listing.sizes or not is_shard_name(name):
            continue
        try:
            reason = (
                f"not a regular file ({file_kind(os.stat(os.path.join(folder, name)).st_mode)})"
            )
        except OSError:
            reason = "broken symbolic link"
        skipped.append((name, reason))
    return skipped


def manifest_classes(document: Any) -> tuple[str, ...]:
    """The class names of an input manifest (its ``class_to_idx``, by index), so that a
    re-sharded build keeps them; () when it states none, or states them in no usable form
    (not every index 0..n-1 exactly once): the classes are then counted from the labels.
    Bounded by the manifest's own read limit."""
    mapping = document.get("class_to_idx") if isinstance(document, Mapping) else None
    if not isinstance(mapping, Mapping) or not mapping:
        return ()
    names: dict[int, str] = {}
    for name, index in mapping.items():
        if not isinstance(name, str) or type(index) is not int or index in names:
            return ()
        names[index] = name
    if sorted(names) != list(range(len(names))):
        return ()
    return tuple(names[i] for i in range(len(names)))


def counted_classes(class_counts: Mapping[int, int]) -> list[str]:
    """Class names for the ``cls`` labels a build from shards without stated classes
    packed: the labels themselves (``"0"`` .. the largest), so the manifest counts them."""
    labels = [label for label, count in class_counts.items() if label >= 0 and count]
    if not labels or max(labels) >= _MAX_COUNTED_CLASSES:  # a label is data: bounded
        return []
    return [str(i) for i in range(max(labels) + 1)]


class _Streams:
    """The input shards one build's tasks read in this process, kept open between samples:
    the last few of each thread (tasks of one build may run in threads of one process, and
    a stream has one position). It belongs to one :class:`ShardSource` object, so to one
    build: a process never serves one build the bytes a shard held for another."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[int, str, str], BinaryIO] = {}

    def get(self, url: str, version: str, s3_endpoint: str | None) -> BinaryIO:
        key = (threading.get_ident(), url, version)
        with self._lock:
            stream = self._open.get(key)
        if stream is not None:
            return stream
        stream = _open_stream(url, version, s3_endpoint)
        with self._lock:
            mine = [k for k in self._open if k[0] == key[0]]
            if len(mine) >= _KEEP_OPEN:
                self._open.pop(mine[0]).close()
            self._open[key] = stream
        return stream

    def close(self) -> None:
        with self._lock:
            streams, self._open = list(self._open.values()), {}
        for stream in streams:
            stream.close()


@dataclass(frozen=True)
class ShardSource:
    """Reads one sample back from an input shard by its byte offset.

    Each shard is read as the version the listing saw (size and mtime, or size and ETag):
    one that differs when it is opened, after a local sample is read, or when a read
    fails, stops the build with one BuildError naming it (never a sample of another
    version packed in a listed one's place; ``on_error`` does not apply: it is not bad
    data). Remote reads go on only while the shard is that version: S3 and HTTP reads
    are conditional on its ETag (``If-Match``), GCS reads name its generation.

    Each copy (the driver's, each worker process's, unpickled) keeps its own open input
    streams; :meth:`close` closes them (the build's end, in that process)."""

    urls: tuple[str, ...]
    output_format: str
    versions: tuple[str, ...]  # per URL, as listed (see _version): checked as it is read
    kind: str = "shards"
    s3_endpoint: str | None = field(default_factory=config.s3_endpoint)  # the driver's
    prefixed: bool = False  # keys were listed as "<shard number>/<key>" (repeats)
    _streams: _Streams = field(default_factory=_Streams, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_streams"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_streams", _Streams())

    def close(self) -> None:
        """Close the input streams this copy holds open."""
        self._streams.close()

    def load(self, item: Item) -> Mapping[str, Any]:
        index, offset, span = item.ref
        url, version = self.urls[index], self.versions[index]
        stream = self._streams.get(url, version, self.s3_endpoint)
        fmt = detect_format(url)[0]
        try:
            sample = self._read(stream, item, url, fmt, offset, span)
        except Exception:  # a read that fails on a shard that changed says so
            with contextlib.suppress(OSError):  # the check's own failure hides nothing
                _check_version(url, version, stream, self.s3_endpoint)
            raise
        if storage.is_local(url):  # written over in place since it was opened? (one fstat)
            _check_version(url, version, stream, self.s3_endpoint)
        sample.pop("__url__", None)
        sample.pop("__offset__", None)
        sample["__key__"] = item.key
        if fmt == "tar" and self.output_format == "tfrecord":
            return tfschema.to_example_fields(sample)
        if fmt == "tfrecord" and self.output_format == "tar":
            return tfschema.to_tar_sample(sample)
        return sample

    def _read(
        self, stream: BinaryIO, item: Item, url: str, fmt: Format, offset: int, span: int
    ) -> dict[str, Any]:
        stream.seek(offset)
        listed = item.key.split("/", 1)[1] if self.prefixed else item.key
        if span:  # a span holding anything else is bad data
            data = stream.read(span)
            try:
                return indexed_sample(
                    data, 0, span, format=fmt, key=listed, offset=offset, base=offset, url=url
                )
            except DataError:
                _refuse_merged(data, fmt, url, offset)
                raise
        found = next(iter_stream_samples(stream, url=url, format=fmt), None)
        if found is None:
            raise DataError("sample not found at its offset (the shard changed?)", url=url)
        if fmt == "tar":
            check_key(listed, found["__key__"], url=url, offset=offset)
        return found

    def describe(self, item: Item) -> str:
        return _where(self.urls, item)

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str:
        return ""


def _refuse_merged(data: bytes, fmt: Format, url: str, offset: int) -> None:
    """Raise BuildError when an indexed span holds more than one sample: the index is
    wrong, and the samples it leaves out have no entry to be skipped under, so the build
    stops (the index refused) rather than pack a part of the shard with exit 0. A span
    holding one bad sample returns: that is bad data, skipped with its reason."""
    found: list[str] = []
    with contextlib.suppress(DataError):  # counted up to where the bytes stop making sense
        if fmt == "tar":
            samples = buffer_samples(data, base=offset, url=url, handler=ignore_and_continue)
            found.extend(sample["__key__"] for sample in samples)
        else:
            records = tfrecord.iter_records(io.BytesIO(data), url=url, verify=False)
            found.extend(f"record at offset {offset + at}" for at, _ in records)
    if len(found) > 1:
        names = ", ".join(repr(key) for key in found[:3]) + (", ..." if len(found) > 3 else "")
        raise BuildError(
            f"its .idx is wrong: the span at offset {offset} holds {len(found)} samples "
            f"({names}); rebuild it with `shardkit index` or delete it",
            url=url,
        )


def _indexes(urls: list[str], versions: list[str]) -> list[ShardIndex | None]:
    """The ``.idx`` file of each shard that has one and provably lists every sample once
    (:func:`_whole`), loaded by the one index loader (remote ones a few at once; a stale
    one refused; one that fails the whole check is not used, and its shard is read
    through: :func:`shardkit.pipeline._idxfiles.load_indexes`)."""
    sizes = [_listed_size(version) for version in versions]
    indexes = load_indexes(urls, sizes=sizes, unchecked="ignore")
    for url, index in zip(urls, indexes, strict=True):
        if index is not None and index.compressed:  # gzip bytes under a plain name
            raise BuildError(_COMPRESSED, url=url)
    return [
        index if index is not None and size is not None and _whole(url, index, size) else None
        for url, index, size in zip(urls, indexes, sizes, strict=True)
    ]


def _listed_size(version: str) -> int | None:
    size = version.split("\0", 1)[0]
    return int(size) if size.isdigit() else None


_RELEASE = 1 << 22  # bytes of a mapped shard listed before its pages are let go
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
_MAX_COUNTED_CLASSES = 1 << 16  # labels named by number, at most (above: none named)
_MAX_TAIL = 1 << 20  # bytes after a tar's last sample: end-of-archive blocks and padding


def _whole(url: str, index: ShardIndex, size: int) -> bool:
    """Whether ``index`` provably lists every sample of the shard, once: its spans tile the
    shard from byte 0, and what follows the last one is a TFRecord's end or a tar's
    end-of-archive zeros (read: at most 1 MiB). An index that leaves a sample out, lists
    one twice, or covers a shard holding other members (a folder entry, a PAX global
    header) fails this, and the shard is read through instead: an index never makes the
    build drop or repeat a sample silently."""
    end = 0
    for offset, span in zip(index.offsets, index.sizes, strict=True):
        if offset != end or span <= 0:
            return False
        end += span
    if index.shard_format == "tfrecord":
        return end == size
    tail = size - end
    if not 2 * BLOCK <= tail <= _MAX_TAIL:
        return False
    reader = RangeReader(
        access=storage.Access(endpoint_options(url, config.s3_endpoint())), max_open=1
    )
    try:
        return not any(reader.read(url, end, tail))
    finally:
        reader.close()


def _samples(
    number: int, url: str, index: ShardIndex | None
) -> Iterator[tuple[tuple[int, int, int], str, int]]:
    """(shard number, offset, indexed span or 0), key and size of each sample of a shard:
    from its index when it has one, else by reading it through. A worker reads an indexed
    sample as exactly its span (:func:`shardkit.formats.index.indexed_sample`), so a span
    that holds two samples is an error, never one sample silently dropped.

    The offset is where the sample starts (its first tar header or its record), in both;
    so are the keys. The size differs (the index counts headers and padding, a read the
    field bytes), but it only counts progress: with shards as the source the sizes are
    not known (``sizes_known=False``), so the driver cuts the shards from what the workers
    wrote, never from listed sizes, and the output is the same either way."""
    if index is not None:
        for key, offset, size in zip(index.keys, index.offsets, index.sizes, strict=True):
            yield (number, offset, size), key, size
        return
    if detect_format(url)[0] == "tar":
        for start, key, size in read_tar_samples(url):
            yield (number, start, 0), key, size
        return
    for sample in read_shard(url):
        size = sum(len(v) for v in sample.values() if isinstance(v, bytes))
        yield (number, sample["__offset__"], 0), sample["__key__"], size


def read_tar_samples(url: str) -> Iterator[tuple[int, str, int]]:
    """(start, key, field bytes) of each sample of a tar shard, through the one member
    parser and grouping rule the readers use (data skipped, not read). ``start`` is the
    offset of the sample's first header block, long-name and PAX headers included, so a
    worker reading from there sees the member's whole name (a name over 100 bytes is in
    those headers, never in the member's own)."""
    with contextlib.closing(_open_listing(url)) as stream, _mapped(stream) as mapped:
        key: str | None = None
        start = size = 0
        members = (
            TarScanner(stream, url=url, readahead=False, seek=True)
            if mapped is None
            else TarScanner.over_buffer(mapped, url=url)  # a local file: data skipped
        )
        if mapped is not None and mapped[:2] == b"\x1f\x8b":  # gzip bytes under a plain name
            raise BuildError(_COMPRESSED, url=url)
        released = 0
        for member, found, _, new in Grouping(url)(members):
            if new:
                if key is not None:
                    yield start, key, size
                key, start, size = found, member.start, 0
                released = _release(mapped, released, start)
            size += member.size
        if key is not None:
            yield start, key, size


@contextlib.contextmanager
def _mapped(stream: BinaryIO) -> Iterator[mmap.mmap | None]:
    """A read-only mapping of a local shard's file (:func:`shardkit.storage.map_file`),
    or None (a remote or empty one); closed at the end."""
    try:
        mapped = storage.map_file(stream.fileno())
    except (OSError, ValueError):  # no descriptor (io.UnsupportedOperation is both)
        mapped = None
    try:
        yield mapped
    finally:
        if mapped is not None:
            mapped.close()


def _release(mapped: mmap.mmap | None, released: int, done: int) -> int:
    """Let the pages before ``done`` leave the resident set (they stay in the page cache),
    every 4 MiB; returns the offset released up to."""
    done -= done % mmap.PAGESIZE
    if mapped is None or done - released < _RELEASE or _DONTNEED is None:
        return released
    mapped.madvise(_DONTNEED, released, done - released)
    return done


def _open_listing(url: str) -> BinaryIO:
    """An input shard open for its listing: a local one through the reading door (a
    regular file, opened without blocking), a remote one as storage opens it."""
    if storage.is_local(url):
        return storage.open_regular(storage.local_path(url), url=url, buffering=1 << 20)
    return storage.open_read(url)


def _repeats(keys: Iterable[str], count: int, spill: Spill) -> bool:
    """Whether any key repeats (checked bucket by bucket when there are many)."""
    buckets = bucket_count(count)

    def bucket_of(key: str) -> int:
        return zlib.crc32(key.encode("utf-8", "surrogateescape")) % buckets

    return any(len(set(chunk)) < len(chunk) for chunk in bucketed(keys, buckets, bucket_of, spill))


def _version(url: str) -> str:
    """Size and mtime (or ETag) of an input shard; raises BuildError if it cannot be used."""
    if detect_format(url)[1]:
        raise BuildError(_COMPRESSED, url=url)
    if storage.is_local(url):
        try:
            info = os.stat(storage.local_path(url))
        except OSError:
            raise BuildError("no such file", url=url) from None
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block its reader: never opened
            raise BuildError("not a regular file: a shard must be one", url=url)
        return _local_version(info)
    fs, path = storage.filesystem(url)
    try:
        meta = fs.info(path)
    except FileNotFoundError:
        raise BuildError("no such file", url=url) from None
    except OSError as exc:
        raise BuildError(f"cannot read: {exc}", url=url) from exc
    return _remote_version(meta)


def _local_version(info: os.stat_result) -> str:
    return f"{info.st_size}\0{info.st_mtime_ns}"


def _remote_version(meta: Mapping[str, Any]) -> str:
    tag = meta.get("ETag") or meta.get("etag") or meta.get("mtime") or ""
    return f"{meta.get('size')}\0{tag}"


def _changed(url: str) -> BuildError:
    return BuildError("the shard changed after it was listed: rerun the build", url=url)


def _check_version(url: str, version: str, stream: BinaryIO, s3_endpoint: str | None) -> None:
    """Raise :func:`_changed` if the shard ``stream`` reads is not the listed version
    (local: the open file's fstat; remote: the object as it is now)."""
    if storage.is_local(url):
        current = _local_version(os.fstat(stream.fileno()))
    else:
        current = _remote_version(_current(url, s3_endpoint)[2])
    if current != version:
        raise _changed(url)


def _current(url: str, s3_endpoint: str | None) -> tuple[Any, str, Mapping[str, Any]]:
    """The filesystem, path and details of a remote shard as it is now (not cached)."""
    fs, path = storage.filesystem(url, storage.Access(endpoint_options(url, s3_endpoint)))
    with contextlib.suppress(AttributeError, NotImplementedError):
        fs.invalidate_cache(path)
    try:
        return fs, path, fs.info(path)
    except FileNotFoundError:  # gone: changed too
        raise _changed(url) from None


def _open_stream(url: str, version: str, s3_endpoint: str | None) -> BinaryIO:
    """Open an input shard, checking it is still the version the listing saw; remote
    reads go on only while it is: S3 by s3fs itself (``If-Match`` the ETag of its own
    look, compared here), HTTP by ``If-Match`` the listed ETag, GCS by the generation."""
    if storage.is_local(url):
        stream = storage.open_regular(storage.local_path(url), url=url)
        current = _local_version(os.fstat(stream.fileno()))
    else:
        fs, path, meta = _current(url, s3_endpoint)
        if _remote_version(meta) != version:
            raise _changed(url)
        opened, kwargs = _pinned(url, meta, s3_endpoint)
        fs, path = opened or (fs, path)
        stream = fs.open(path, "rb", block_size=_READ_AHEAD, cache_type="readahead", **kwargs)
        details = stream.details if url.startswith("s3://") else meta  # type: ignore[attr-defined]
        current = _remote_version(details)
    if current != version:
        stream.close()
        raise _changed(url)
    return stream


def _pinned(
    url: str, meta: Mapping[str, Any], s3_endpoint: str | None
) -> tuple[tuple[Any, str] | None, dict[str, Any]]:
    """What makes fsspec's reads of a shard fail once it is not ``meta``'s version (and
    the filesystem and path to open, when they differ): an HTTP ``If-Match`` (a strong
    ETag); a GCS generation, in the path of a version-aware filesystem (gcsfs's file
    reads the path's generation; a ``generation=`` argument it keeps but never sends)."""
    tag = meta.get("ETag")
    if url.startswith(("http://", "https://")) and isinstance(tag, str) and tag.startswith('"'):
        return None, {"headers": {"If-Match": tag}}
    if url.startswith(("gs://", "gcs://")) and meta.get("generation"):
        options = {**endpoint_options(url, s3_endpoint), "version_aware": True}
        fs, path = storage.filesystem(url, storage.Access(options))
        return (fs, f"{path}#{meta['generation']}"), {}
    return None, {}
