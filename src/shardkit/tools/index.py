"""``index``: a per-shard index of sample offsets, for exact counts and random access.

The index of ``data/shard-000000.tar`` is ``data/shard-000000.tar.idx`` (its format:
:mod:`shardkit.formats.index`). With an uncompressed shard, ``read_indexed_sample`` seeks
to one sample and reads just its bytes. An index is only written for a shard without
problems (as ``verify`` sees them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import storage
from ..errors import ConfigError, FormatError, StorageError
from ..formats.index import ShardIndex, index_url, indexed_sample
from ..formats.members import MemberTable, TableBuilder
from ..formats.names import INDEX_SUFFIX, Format
from ..formats.tar import read_exact
from ..storage import Access, StorageOptions
from ._settings import ToolOptions, ToolRun
from .verify import scan_shard

_GZIP_MAGIC = b"\x1f\x8b"

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["build_index", "read_indexed_sample", "write_index", "write_indexes"]


def build_index(
    url: str, *, sha256: bool = False, storage_options: Access | StorageOptions | None = None
) -> ShardIndex:
    """Scan one shard and return its index; FormatError if the shard has a problem."""
    from ._inputs import ShardRef

    if url.endswith(INDEX_SUFFIX):
        raise ConfigError(f"{url} is an index file, not a shard: name the shard it indexes")
    access = Access.of(storage_options)
    ref = ShardRef(*_detect(url, access), access=access)
    check, seen = scan_shard(ref, sha256=sha256)
    if check.problems:
        first = check.problems[0]
        raise FormatError(
            f"not indexed, the shard has problems (see shardkit verify): {first.message}",
            url=url,
            key=first.key,
            offset=first.offset,
        )
    table = None
    if ref.format == "tar" and not ref.gzip:
        table = _member_table(url, seen.keys, seen.offsets, seen.sizes, access)
    return ShardIndex(
        storage.basename(url),
        ref.format,
        ref.gzip,
        check.bytes,
        tuple(seen.keys),
        tuple(seen.offsets),
        tuple(seen.sizes),
        check.sha256,
        table,
    )


def _member_table(
    url: str,
    keys: Sequence[str],
    offsets: Sequence[int],
    sizes: Sequence[int],
    access: Access,
) -> MemberTable | None:
    """The member table of a scanned shard (None where its members are not all plain):
    one more pass over it, each sample's span read on its own."""
    builder: TableBuilder | None = TableBuilder()
    with storage.open_read(url, access=access) as stream:
        pos = 0
        for key, offset, size in zip(keys, offsets, sizes, strict=True):
            read_exact(stream, offset - pos)  # the bytes between spans (none, as a rule)
            data = read_exact(stream, size)
            pos = offset + size
            builder = builder.add(key, data) if builder is not None else None
            if builder is None:
                return None
    return builder.build() if builder is not None else None


def _detect(url: str, access: Access) -> tuple[str, Format, bool]:
    """(url, format, gzip) of a shard; gzip from its bytes too: a gzipped TFRecord named
    ``.tfrecord`` (what TensorFlow's ``options="GZIP"`` writes) gets an index of its
    uncompressed stream, marked compressed, which counts its samples and is refused for
    random access, instead of offsets that a reader would check against the compressed
    size."""
    from ..reader import detect_format

    kind, gz = detect_format(url)
    if not gz:
        with storage.open_read(url, access=access) as stream:
            gz = stream.read(2) == _GZIP_MAGIC
    return url, kind, gz


def write_index(
    url: str, *, sha256: bool = False, storage_options: Access | StorageOptions | None = None
) -> ShardIndex:
    """Build the index of one shard and write it next to the shard (atomically)."""
    if url == "-":
        raise StorageError("cannot index stdin: index a shard file", url=url)
    access = Access.of(storage_options)
    index = build_index(url, sha256=sha256, storage_options=access)
    with storage.open_atomic(index_url(url), access=access) as file:
        file.write(index.to_json())
    return index


def write_indexes(
    urls: Sequence[str],
    *,
    sha256: bool = False,
    on_shard: Callable[[str, ShardIndex], None] | None = None,
    **options: Unpack[ToolOptions],
) -> list[ShardIndex]:
    """:func:`write_index` for each shard URL; ``progress`` hears of each shard done
    (``storage_options``, ``progress``: :class:`~shardkit.tools._settings.ToolOptions`)."""
    run = ToolRun.of("write_indexes", options, writes=False)
    done = []
    for url in run.track(urls):
        index = write_index(url, sha256=sha256, storage_options=run.access)
        done.append(index)
        if on_shard is not None:
            on_shard(url, index)
    return done


def read_indexed_sample(
    shard_url: str,
    index: ShardIndex,
    i: int,
    *,
    storage_options: Access | StorageOptions | None = None,
) -> dict[str, Any]:
    """Sample ``i`` of an uncompressed shard, reading only its bytes (which must hold
    exactly that sample: :func:`shardkit.formats.index.indexed_sample`)."""
    if index.compressed:
        raise StorageError("random access needs an uncompressed shard", url=shard_url)
    if not -index.samples <= i < index.samples:
        raise IndexError(f"sample {i} of a shard with {index.samples}")
    offset, size = index.offsets[i], index.sizes[i]
    with storage.open_read(shard_url, access=Access.of(storage_options)) as stream:
        stream.seek(offset)
        data = stream.read(size)
    return indexed_sample(
        data,
        0,
        size,
        format=index.shard_format,
        key=index.keys[i],
        offset=offset,
        base=offset,
        url=shard_url,
    )
