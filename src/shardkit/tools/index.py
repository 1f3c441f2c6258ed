"""``index``: a per-shard index of sample offsets, for exact counts and random access.

The index of ``data/shard-000000.tar`` is ``data/shard-000000.tar.idx``, a JSON object::

    {
      "format": "shardkit.index", "version": 1,
      "shard": "shard-000000.tar",     # the shard's file name
      "shard_format": "tar",           # or "tfrecord"
      "compressed": false,             # gzip: offsets are in the uncompressed stream
      "bytes": 1234176,                # the shard's size on disk when indexed
      "sha256": null,                  # its sha256, when indexed with sha256=True
      "keys": ["a/0001", ...],         # one entry per sample, in order
      "offsets": [0, 5120, ...],       # where the sample starts (first header / record)
      "sizes": [5120, 3584, ...]       # its bytes: all its members, padding included
    }

A reader trusts an index only while ``bytes`` matches the shard's size. With an
uncompressed shard, ``read_indexed_sample`` seeks to one sample and reads just its bytes.
An index is only written for a shard without problems (as ``verify`` sees them).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import storage
from ..errors import FormatError, StorageError
from ..writer import Format
from .verify import compare_index, scan_shard

__all__ = [
    "INDEX_SUFFIX",
    "ShardIndex",
    "build_index",
    "compare_index",
    "index_url",
    "load_index",
    "read_indexed_sample",
    "write_index",
    "write_indexes",
]

INDEX_SUFFIX = ".idx"
_FORMAT = "shardkit.index"


@dataclass(frozen=True)
class ShardIndex:
    """A shard's index: its samples' keys, offsets and sizes (see the module docs)."""

    shard: str
    shard_format: Format
    compressed: bool
    shard_bytes: int | None
    keys: tuple[str, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    sha256: str | None = None

    @property
    def samples(self) -> int:
        return len(self.keys)

    def to_json(self) -> bytes:
        doc = {
            "format": _FORMAT,
            "version": 1,
            "shard": self.shard,
            "shard_format": self.shard_format,
            "compressed": self.compressed,
            "bytes": self.shard_bytes,
            "sha256": self.sha256,
            "keys": list(self.keys),
            "offsets": list(self.offsets),
            "sizes": list(self.sizes),
        }
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, url: str | None = None) -> ShardIndex:
        try:
            doc = json.loads(data)
            if doc.get("format") != _FORMAT or doc.get("version") != 1:
                raise ValueError("not a shardkit index (format/version)")
            keys, offsets, sizes = doc["keys"], doc["offsets"], doc["sizes"]
            if not len(keys) == len(offsets) == len(sizes):
                raise ValueError("keys, offsets and sizes differ in length")
            return cls(
                str(doc["shard"]),
                "tfrecord" if doc["shard_format"] == "tfrecord" else "tar",
                bool(doc["compressed"]),
                doc.get("bytes"),
                tuple(map(str, keys)),
                tuple(map(int, offsets)),
                tuple(map(int, sizes)),
                doc.get("sha256"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"bad index file: {exc}", url=url) from exc


def index_url(shard_url: str) -> str:
    """Where the index of ``shard_url`` lives."""
    return shard_url + INDEX_SUFFIX


def load_index(
    shard_url: str, *, storage_options: dict[str, Any] | None = None
) -> ShardIndex | None:
    """The index of a shard, or None when it has none."""
    url = index_url(shard_url)
    if not storage.url_exists(url, storage_options):
        return None
    with storage.open_read(url, storage_options=storage_options) as stream:
        return ShardIndex.from_json(stream.read(), url=url)


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
    samples = iter_stream_samples(io.BytesIO(data), url=shard_url, format=fmt)
    sample = next(samples, None)
    if sample is None:
        raise FormatError("no sample at the indexed offset", url=shard_url, offset=offset)
    sample["__offset__"] = offset
    sample["__key__"] = index.keys[i]  # TFRecords without __key__: the record number
    return sample
