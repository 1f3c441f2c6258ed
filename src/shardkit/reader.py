"""Read one shard (tar or TFRecord, optionally gzipped) from any URL as raw samples.

This is the one place that turns a URL into samples; the reading pipeline, the tools and
the build's re-shard source all use it. Samples are dicts of raw bytes fields plus
``__key__``, ``__url__`` and ``__offset__`` (the byte offset where the sample starts in
the uncompressed stream). TFRecord samples are their Example's features, mapped as
:mod:`shardkit.formats.example` documents.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from . import storage
from .errors import DataError, FormatError
from .handlers import Handler, reraise
from .writer import Format, format_from_name

__all__ = ["detect_format", "iter_stream_samples", "read_shard"]

_GZIP_MAGIC = b"\x1f\x8b"


def detect_format(url: str, format: Format | None = None) -> tuple[Format, bool]:  # noqa: A002
    """(format, gzip) for a shard URL; ``format`` overrides the name's extension."""
    implied, gz = format_from_name(url.split("?", 1)[0])
    return (format or implied), gz


def iter_stream_samples(
    stream: BinaryIO,
    *,
    url: str,
    format: Format = "tar",  # noqa: A002
    handler: Handler = reraise,
    verify: bool = True,
) -> Iterator[dict[str, Any]]:
    """Samples of one already-open, already-decompressed shard stream."""
    if format == "tar":
        from .formats.tar import iter_samples

        yield from iter_samples(stream, url=url, handler=handler)
        return
    from .formats.example import decode_example, example_to_sample
    from .formats.tfrecord import iter_records

    for index, (offset, record) in enumerate(iter_records(stream, url=url, verify=verify)):
        try:
            features = decode_example(record, url=url, offset=offset)
        except DataError as exc:
            if not handler(exc):
                return
            continue
        sample = example_to_sample(features, key=f"{index:08d}", url=url)
        sample["__offset__"] = offset
        yield sample


def read_shard(
    url: str,
    *,
    format: Format | None = None,  # noqa: A002
    handler: Handler = reraise,
    verify: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> Iterator[dict[str, Any]]:
    """Open ``url`` and yield its samples; the stream is closed when iteration ends.

    Structural errors (truncation, bad checksums) are passed to ``handler`` too: a handler
    that returns True skips the rest of that shard (nothing after a broken record can be
    trusted), one that raises propagates the error.
    """
    kind, gz = detect_format(url, format)
    stream = storage.open_read(url, storage_options=storage_options)
    try:
        source: BinaryIO = stream
        if gz or _peek_gzip(stream):
            source = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
        try:
            yield from iter_stream_samples(
                source, url=url, format=kind, handler=handler, verify=verify
            )
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            handler(FormatError(f"corrupt gzip stream: {exc}", url=url))
        except FormatError as exc:
            handler(exc)
    finally:
        stream.close()


def _peek_gzip(stream: BinaryIO) -> bool:
    peek = getattr(stream, "peek", None)
    if peek is None:
        return False
    try:
        return bytes(peek(2)[:2]) == _GZIP_MAGIC
    except (OSError, ValueError):
        return False
