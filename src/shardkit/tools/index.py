"""``index``: a per-shard index of sample offsets, for exact counts and random access.

The index of ``data/shard-000000.tar`` is ``data/shard-000000.tar.idx`` (its format:
:mod:`shardkit.formats.index`). With an uncompressed shard, ``read_indexed_sample`` seeks
to one sample and reads just its bytes. An index is only written for a shard without
problems (as ``verify`` sees them).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

from .. import storage
from ..errors import FormatError, StorageError
from ..formats.index import ShardIndex, index_url
from ..formats.names import Format
from .verify import scan_shard

__all__ = ["build_index", "read_indexed_sample", "write_index", "write_indexes"]


def build_index(
    url: str, *, sha256: bool = False, storage_options: dict[str, Any] | None = None
) -> ShardIndex:
    """Scan one shard and return its index; FormatError if the shard has a problem."""
    from ._inputs import ShardRef

    ref = ShardRef(*_detect(url))
    check, seen = scan_shard(ref, sha256=sha256, storage_options=storage_options)
    if check.problems:
        first = check.problems[0]
        raise FormatError(
            f"not indexed, the shard has problems (see shardkit verify): {first.message}",
            url=url,
            key=first.key,
            offset=first.offset,
        )
    return ShardIndex(
        storage.basename(url),
        ref.format,
        ref.gzip,
        check.bytes,
        tuple(seen.keys),
        tuple(seen.offsets),
        tuple(seen.sizes),
        check.sha256,
    )


def _detect(url: str) -> tuple[str, Format, bool]:
    from ..reader import detect_format

    kind, gz = detect_format(url)
    return url, kind, gz


def write_index(
    url: str, *, sha256: bool = False, storage_options: dict[str, Any] | None = None
) -> ShardIndex:
    """Build the index of one shard and write it next to the shard (atomically)."""
    if url == "-":
        raise StorageError("cannot index stdin: index a shard file", url=url)
    index = build_index(url, sha256=sha256, storage_options=storage_options)
    with storage.open_atomic(index_url(url), storage_options=storage_options) as file:
        file.write(index.to_json())
    return index


def write_indexes(
    urls: Sequence[str],
    *,
    sha256: bool = False,
    storage_options: dict[str, Any] | None = None,
    on_shard: Callable[[str, ShardIndex], None] | None = None,
) -> list[ShardIndex]:
    """:func:`write_index` for each shard URL."""
    done = []
    for url in urls:
        index = write_index(url, sha256=sha256, storage_options=storage_options)
        done.append(index)
        if on_shard is not None:
            on_shard(url, index)
    return done


def read_indexed_sample(
    shard_url: str,
    index: ShardIndex,
    i: int,
    *,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Sample ``i`` of an uncompressed shard, reading only its bytes."""
    from ..formats.tar import span_sample
    from ..reader import iter_stream_samples

    if index.compressed:
        raise StorageError("random access needs an uncompressed shard", url=shard_url)
    if not -index.samples <= i < index.samples:
        raise IndexError(f"sample {i} of a shard with {index.samples}")
    offset, size = index.offsets[i], index.sizes[i]
    with storage.open_read(shard_url, storage_options=storage_options) as stream:
        stream.seek(offset)
        data = stream.read(size)
    fmt = index.shard_format
    if fmt == "tar":  # the span must be exactly the indexed sample
        sample = span_sample(data, 0, len(data), base=offset, url=shard_url)
    else:
        found = next(iter_stream_samples(io.BytesIO(data), url=shard_url, format=fmt), None)
        if found is None:
            raise FormatError("no sample at the indexed offset", url=shard_url, offset=offset)
        sample = found
    sample["__offset__"] = offset
    sample["__key__"] = index.keys[i]  # TFRecords without __key__: the record number
    return sample
