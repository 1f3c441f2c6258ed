"""Read one shard (tar or TFRecord, optionally gzipped) from any URL as raw samples.

The reading pipeline, the tools and the build's re-shard source turn a shard URL into
samples here (and a manifest URL into shard URLs).
Samples are dicts of raw bytes fields plus ``__key__``, ``__url__`` and ``__offset__``
(the byte offset where the sample starts in the uncompressed stream). TFRecord samples
are their Example's features, mapped as :mod:`shardkit.formats.example` documents.

A local uncompressed tar shard is memory-mapped: with an index that has a member table
(:mod:`shardkit.formats.members`) its samples are slices of the mapping, no header
parsed; without one it is parsed over the mapping by the same parser
(:func:`shardkit.formats.tar.buffer_samples`), with the same samples and errors. A local
uncompressed TFRecord shard is mapped too, its records sliced out
(:func:`shardkit.formats.tfrecord.buffer_records`, CRCs checked). Every other shard is
read as a stream.

Untrusted shards are safe to read: every malformed input ends in a
:class:`~shardkit.errors.FormatError` (or a subclass), members and records are read
whole only up to the budget's ``member`` and ``record`` limits (:mod:`shardkit.budget`:
1 GiB and 256 MiB by default, ``SHARDKIT_MAX_MEMBER`` and ``SHARDKIT_MAX_RECORD`` raise
them) or ``max_member_size`` where it is given (the header says the size before anything
is read), and a gzipped shard is decompressed as a stream, never whole. Once
the samples are read, the rest of a gzip stream (a few KiB of tar padding) is read too,
so that its CRC and length are checked.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import logging
import mmap
import zlib
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from . import storage
from .errors import DataError, FormatError
from .formats.limits import MAX_RECORD_LENGTH
from .formats.manifest import ManifestContents, parse_manifest
from .formats.names import Format, format_from_name
from .handlers import Handler, reraise
from .storage import LOCAL, Access, StorageOptions

if TYPE_CHECKING:
    from .formats.members import MemberTable
    from .formats.tar import TableNotes

# The supported API is read_shard; the other functions here are shardkit's own (the
# pipeline, the tools): importable, not in __all__.
__all__ = ["read_shard"]

logger = logging.getLogger(__name__)

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)
# After the last sample, at most this much of a gzip stream is read to reach its trailer.
_GZIP_TAIL = 1 << 20
# A mapped shard's pages are let go from the resident set in steps of this many bytes.
_RELEASE = 1 << 22
# Read by a member table, samples are sliced this many bytes' worth at a time.
_SLICED = 1 << 20
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)


def detect_format(url: str, format: Format | None = None) -> tuple[Format, bool]:
    """(format, gzip) for a shard URL; ``format`` overrides the name's extension."""
    implied, gz = format_from_name(url.split("?", 1)[0])
    return (format or implied), gz


def iter_stream_samples(
    stream: BinaryIO,
    *,
    url: str,
    format: Format = "tar",
    handler: Handler = reraise,
    verify: bool = True,
    max_member_size: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Samples of one already-open, already-decompressed shard stream.

    ``max_member_size`` bounds a tar member (in place of the budget's ``member`` limit)
    or a TFRecord record (see :func:`shardkit.formats.tar.iter_members`).
    """
    if format == "tar":
        from .formats.tar import iter_samples

        yield from iter_samples(stream, url=url, handler=handler, max_member_size=max_member_size)
        return
    from .formats.tfrecord import iter_records

    length = MAX_RECORD_LENGTH if max_member_size is None else max_member_size
    records = iter_records(stream, url=url, verify=verify, max_record_length=length)
    for _, sample in _record_samples(records, url, handler):
        yield sample


def _record_samples(
    records: Iterator[tuple[int, bytes]], url: str, handler: Handler
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each TFRecord record as a sample (its Example's features, keyed by its index) with its
    offset; a record that is bad data goes to ``handler``, which may stop the stream."""
    from .formats.example import decode_example, example_to_sample

    for index, (offset, record) in enumerate(records):
        try:
            features = decode_example(record, url=url, offset=offset)
            sample = example_to_sample(features, key=f"{index:08d}", url=url)
        except DataError as exc:
            if not handler(exc):
                return
            continue
        sample["__offset__"] = offset
        yield offset, sample


def iter_shard_samples(
    stream: BinaryIO,
    *,
    url: str,
    format: Format = "tar",
    gzipped: bool | None = None,
    handler: Handler = reraise,
    verify: bool = True,
    max_member_size: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Samples of one opened shard stream, as :func:`read_shard` yields them.

    The stream is gunzipped when ``gzipped`` is True, or when it is None and the stream
    starts with the gzip magic bytes (which needs ``peek``). Structural errors, corrupt
    gzip data included, go to ``handler`` as :class:`FormatError`; whatever the handler
    returns, nothing after them is read. ``verify`` checks TFRecord data CRCs and, after
    the last sample, the gzip CRC (a corrupt gzip stream can inflate without an error;
    that FormatError then comes after the samples). The caller closes ``stream``.
    """
    source: BinaryIO = stream
    if gzipped or (gzipped is None and _peek_gzip(stream)):
        source = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    try:
        yield from iter_stream_samples(
            source,
            url=url,
            format=format,
            handler=handler,
            verify=verify,
            max_member_size=max_member_size,
        )
        if verify and source is not stream:
            _read_gzip_tail(source, url)
    except _GZIP_ERRORS as exc:
        error = FormatError(f"corrupt gzip stream: {exc}", url=url)
        error.withheld = getattr(exc, "withheld", ())
        handler(error)
    except FormatError as exc:
        handler(exc)


def read_shard(
    url: str,
    *,
    format: Format | None = None,
    handler: Handler = reraise,
    verify: bool = True,
    storage_options: Access | StorageOptions | None = None,
    max_member_size: int | None = None,
    cache_dir: str | None = None,
    cache_limit: int | None = None,
    copy: bool = True,
    members: MemberTable | None = None,
    on_table: Callable[[TableNotes], object] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Open ``url`` and yield its samples; the stream is closed when iteration ends.

    Structural errors (truncation, bad checksums, corrupt gzip data) are passed to
    ``handler`` too: a handler that returns True skips the rest of that shard (nothing
    after a broken record can be trusted), one that raises propagates the error. A tar
    member over the budget's ``member`` limit (or ``max_member_size`` bytes, where it is
    given) or a TFRecord record over its limits is such an error.
    ``cache_dir`` / ``cache_limit``: the local copy of a remote shard, as
    :func:`shardkit.storage.open_read` keeps it (proven whole before it is kept).

    An uncompressed tar shard in a local file (or a local cache copy) is read in place:
    memory-mapped and parsed by the same parser over the mapping
    (:func:`shardkit.formats.tar.buffer_samples`), without a read call or a buffer
    refill; the samples, errors and limits are the stream's. There ``copy=False``
    makes the fields memoryviews of the mapping instead of ``bytes`` (no copy; each
    view keeps the mapping alive); elsewhere fields are ``bytes`` either way.

    ``members``: the member table of the shard's checked index
    (:mod:`shardkit.formats.members`, through :func:`shardkit.pipeline._idxfiles.load_index`).
    Where the shard mapped has the size the table was made for, no header is parsed: the
    table is checked once against the shard's bytes
    (:func:`~shardkit.formats.members.verify_members`; the verdict is kept on the table)
    and each sample is slices of the mapping. Without a table (no index, or an older
    one) the shard is parsed; ``on_table`` is then called with what makes the table
    the parse found for it, if any (:func:`shardkit.formats.tar.buffer_samples`), to
    be passed as ``members`` next time.
    """
    kind, gz = detect_format(url, format)
    check = functools.partial(holds_whole_shard, format=kind) if cache_dir is not None else None
    stream = storage.open_read(
        url,
        access=Access.of(storage_options),
        cache_dir=cache_dir,
        cache_limit=cache_limit,
        cache_check=check,
    )
    try:
        mapped = _map_file(url, stream) if kind == "tar" and not gz else None
        if kind == "tfrecord" and not gz:
            records = _map_file(url, stream)  # a local file (or cache copy): sliced
            if records is not None:
                length = MAX_RECORD_LENGTH if max_member_size is None else max_member_size
                yield from _mapped_records(records, url, handler, verify, length)
                return
        if mapped is not None:
            from .formats.tar import member_limit

            if (
                members is not None
                and members.shard_bytes == len(mapped)
                and members.largest <= member_limit(max_member_size)
            ):  # else parsed: a member over the limit is refused as the parse refuses it
                yield from _sliced_samples(mapped, members, url, handler, copy)
                return
            yield from _mapped_samples(mapped, url, handler, max_member_size, copy, on_table)
            return
        yield from iter_shard_samples(
            stream,
            url=url,
            format=kind,
            gzipped=True if gz else None,
            handler=handler,
            verify=verify,
            max_member_size=max_member_size,
        )
    finally:
        stream.close()


def _mapped_records(
    mapped: mmap.mmap, url: str, handler: Handler, verify: bool, max_record_length: int
) -> Iterator[dict[str, Any]]:
    """The samples of a mapped TFRecord shard: its records sliced out of the mapping
    (:func:`shardkit.formats.tfrecord.buffer_records`, CRCs checked), decoded as
    :func:`iter_stream_samples` decodes them, pages behind the reader let go."""
    from .formats.tfrecord import buffer_records

    released = 0
    try:
        records = buffer_records(
            mapped, url=url, verify=verify, max_record_length=max_record_length
        )
        for offset, sample in _record_samples(records, url, handler):
            yield sample
            done = offset - offset % mmap.PAGESIZE
            if done - released >= _RELEASE and _DONTNEED is not None:
                mapped.madvise(_DONTNEED, released, done - released)
                released = done
    except FormatError as exc:
        handler(exc)
    finally:
        mapped.close()


def _map_file(url: str, stream: BinaryIO) -> mmap.mmap | None:
    """The mapping of a shard opened from a local file at its start, unless it is empty
    or gzipped (by its magic bytes); None for any other stream."""
    if url == "-":
        return None
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    mapped = storage.map_file(fd)
    if mapped is not None and mapped[:2] == _GZIP_MAGIC:
        mapped.close()
        return None
    return mapped


def _mapped_samples(
    mapped: mmap.mmap,
    url: str,
    handler: Handler,
    max_member_size: int | None,
    copy: bool,
    on_table: Callable[[TableNotes], object] | None = None,
) -> Iterator[dict[str, Any]]:
    """The samples of a mapped tar shard, with :func:`iter_shard_samples`'s handling of
    structural errors; the mapping is closed at the end (by its last view, if any)."""
    from .formats.tar import buffer_samples

    samples = buffer_samples(
        mapped,
        url=url,
        handler=handler,
        max_member_size=max_member_size,
        copy=copy,
        on_table=on_table,
    )
    released = 0
    try:
        for sample in samples:
            yield sample
            # Pages behind the reader leave this process's resident set (they stay in the
            # page cache; a view that is still read faults them back in).
            done = sample["__offset__"] - sample["__offset__"] % mmap.PAGESIZE
            if done - released >= _RELEASE and _DONTNEED is not None:
                mapped.madvise(_DONTNEED, released, done - released)
                released = done
    except FormatError as exc:
        handler(exc)
    finally:
        with contextlib.suppress(BufferError):  # views are out: it closes with the last
            mapped.close()


def _sliced_samples(
    mapped: mmap.mmap,
    table: MemberTable,
    url: str,
    handler: Handler,
    copy: bool,
) -> Iterator[dict[str, Any]]:
    """The samples of a mapped tar shard as slices, from its index's member table; pages
    behind the reader leave the resident set as in :func:`_mapped_samples`."""
    from .formats.members import check_end, slice_samples, verify_members

    offsets, total = table.offsets, len(table.offsets)
    verified = table.verified
    try:
        # ~_SLICED bytes of samples at a time (checked against the bytes on the first
        # pass of this process), then their pages are let go
        step = max(1, total * _SLICED // max(len(mapped), 1))
        released = 0
        if not verified and not total:  # an index of no sample: the shard holds none
            check_end(mapped, table, url=url)
        for first in range(0, total, step):
            last = min(first + step, total)
            if not verified:
                verify_members(mapped, table, first, last, url=url)
                if last == total:  # every sample checked: said before the last are read
                    check_end(mapped, table, url=url)
                    table.verified = True  # (a Loader's worker tells its parent then)
            yield from slice_samples(mapped, table, first, last, url=url, copy=copy)
            if last < total and _DONTNEED is not None:
                done = offsets[last] - offsets[last] % mmap.PAGESIZE
                if done > released:
                    mapped.madvise(_DONTNEED, released, done - released)
                    released = done
        table.verified = True
    except FormatError as exc:
        handler(exc)
    finally:
        with contextlib.suppress(BufferError):  # views are out: it closes with the last
            mapped.close()


def load_manifest(url: str, *, access: Access = LOCAL) -> tuple[ManifestContents, tuple[str, ...]]:
    """A manifest (:func:`shardkit.formats.manifest.parse_manifest`) and the URL of each
    shard it names: relative names are joined to the manifest's folder.

    A manifest is data: a shard it names that would run a command (``pipe:``) is a
    :class:`~shardkit.errors.ConfigError` (:func:`shardkit.storage.check_data_url`)."""
    data = storage.read_document(url, access=access, what="manifest")
    contents = parse_manifest(data, url=url)
    base = url.rsplit("/", 1)[0] if "/" in url else ""
    return contents, manifest_urls(contents, base=base, found_in=f"manifest {url}")


def manifest_urls(contents: ManifestContents, *, base: str, found_in: str) -> tuple[str, ...]:
    """The URL of each shard of a manifest whose folder is ``base`` (see
    :func:`load_manifest`); URLs and absolute paths are kept as they are."""
    urls = []
    for shard in contents.shards:
        storage.check_data_url(shard.name, found_in=found_in)
        absolute = not storage.is_local(shard.name) or shard.name.startswith(("/", "file:"))
        urls.append(shard.name if absolute or not base else storage.join(base, shard.name))
    return tuple(urls)


def holds_whole_shard(stream: BinaryIO, *, format: Format) -> bool:
    """Whether ``stream`` (a seekable file, at its start) provably holds a whole shard.

    A tar archive must parse to its end-of-archive blocks (both zero blocks, then only
    zeros); a TFRecord file must end right after a complete record; a gzipped shard
    must also reach its gzip trailer. This decides whether a cached copy is complete
    (:func:`shardkit.storage.open_read`). A tar cut at a member boundary fails it,
    although readers accept such a stream; a plain TFRecord file cut exactly at a
    record boundary cannot be told from a whole one (only a known length can).
    """
    source: BinaryIO = stream
    if stream.read(2) == _GZIP_MAGIC:
        source = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    stream.seek(0)
    try:
        if format == "tar":
            from .formats.tar import TarScanner

            scanner = TarScanner(source, readahead=False)
            for _ in scanner:  # member data is skipped, a cut inside it raises
                pass
            if scanner.end_blocks != 2:
                return False
            while rest := source.read(1 << 16):  # then padding: zeros only
                if rest.count(0) != len(rest):
                    return False
            return True
        from .formats.tfrecord import iter_records

        for _ in iter_records(source, verify=False):
            pass
        while source.read(1 << 16):  # a gzip stream must reach its trailer
            pass
        return True
    except (DataError, *_GZIP_ERRORS):
        return False


def _peek_gzip(stream: BinaryIO) -> bool:
    peek = getattr(stream, "peek", None)
    if peek is None:
        return False
    try:
        return bytes(peek(2)[:2]) == _GZIP_MAGIC
    except (OSError, ValueError):
        return False


def _read_gzip_tail(source: BinaryIO, url: str) -> None:
    """Read the rest of a gzip stream after the last sample, so that its CRC is checked.

    A tar archive ends before its gzip stream does (padding follows the end-of-archive
    blocks), and a corrupt stream can inflate without error: only the CRC catches it.
    Bytes that are not gzip after a complete member are ignored, as tar does; a stream
    that goes on for more than 1 MiB after the archive is left unchecked.
    """
    left = _GZIP_TAIL
    try:
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                return
            left -= len(chunk)
    except gzip.BadGzipFile as exc:
        if str(exc).startswith("Not a gzipped file"):
            logger.debug("%s: ignoring non-gzip bytes after the last gzip member", url)
            return
        raise
    logger.debug("%s: over %d bytes after the archive; gzip CRC not checked", url, _GZIP_TAIL)
