"""The ``.idx`` index file of a shard: its on-disk encoding, reading and writing one.

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
      "sizes": [5120, 3584, ...],      # its bytes: all its members, padding included
      "members": {...}                 # optional (uncompressed tar): the member table
    }

The member table (:mod:`shardkit.formats.members`) says what each span holds, so that a
reader slices a sample's fields out of the mapped shard without parsing its headers. An
index without one (written before it existed, or of a shard whose members are not all
plain) is read as before: the shard's headers are parsed.

A reader trusts an index only while ``bytes`` matches the shard's size. Building, loading
and using indexes is :mod:`shardkit.tools.index`'s job.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError
from . import example, tar, tfrecord
from ._tarparse import Buffer
from .jsondoc import load_json
from .limits import MAX_MEMBER_SIZE, MAX_RECORD_LENGTH
from .members import MemberTable
from .names import INDEX_SUFFIX, Format, decode_name, encode_name
from .tfrecord import RECORD_OVERHEAD

__all__ = [
    "ShardIndex",
    "check_index",
    "check_key",
    "check_shard_size",
    "compare_index",
    "index_url",
    "indexed_sample",
    "prepared_members",
    "renamed_index",
]

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
    members: MemberTable | None = None

    @property
    def samples(self) -> int:
        return len(self.keys)

    def to_json(self) -> bytes:
        doc = {
            "format": _FORMAT,
            "version": 1,
            "shard": encode_name(self.shard),
            "shard_format": self.shard_format,
            "compressed": self.compressed,
            "bytes": self.shard_bytes,
            "sha256": self.sha256,
            "keys": [encode_name(key) for key in self.keys],
            "offsets": list(self.offsets),
            "sizes": list(self.sizes),
        }
        if self.members is not None:
            doc["members"] = self.members.to_doc()
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes, *, url: str | None = None) -> ShardIndex:
        try:
            doc = load_json(data, url=url, what="index file")
            if doc.get("format") != _FORMAT or doc.get("version") != 1:
                raise ValueError("not a shardkit index (format/version)")
            keys, offsets, sizes = doc["keys"], doc["offsets"], doc["sizes"]
            if not len(keys) == len(offsets) == len(sizes):
                raise ValueError("keys, offsets and sizes differ in length")
            return cls(
                decode_name(str(doc["shard"])),
                "tfrecord" if doc["shard_format"] == "tfrecord" else "tar",
                bool(doc["compressed"]),
                doc.get("bytes"),
                tuple(decode_name(str(key)) for key in keys),
                tuple(map(int, offsets)),
                tuple(map(int, sizes)),
                doc.get("sha256"),
                None if doc.get("members") is None else MemberTable.from_doc(doc["members"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"bad index file: {exc}", url=url) from exc


def renamed_index(data: bytes, shard: str, new: str) -> bytes | None:
    """``data``, the index of ``shard`` as :meth:`ShardIndex.to_json` writes it, naming
    the shard ``new`` instead: the bytes that parsing it, renaming it and writing it again
    give, without the parse (a build names each shard's index this way as it commits the
    shard). None when ``data`` does not start as ``to_json`` starts the index of ``shard``."""
    head = _head(shard)
    return _head(new) + data[len(head) :] if data.startswith(head) else None


def _head(shard: str) -> bytes:
    """How :meth:`ShardIndex.to_json` starts the index of ``shard``, up to its name."""
    name = json.dumps(encode_name(shard), ensure_ascii=False)
    return f'{{"format":"{_FORMAT}","version":1,"shard":{name},'.encode()


def index_url(shard_url: str) -> str:
    """Where the index of ``shard_url`` lives."""
    return shard_url + INDEX_SUFFIX


def check_shard_size(shard_url: str, indexed: int, actual: int) -> None:
    """FormatError (naming the index file) unless the index was made for a shard of the
    size the shard has now."""
    if indexed != actual:
        raise FormatError(
            f"stale index: made for a shard of {indexed} bytes, the shard has {actual}; "
            "run `shardkit index` again",
            url=index_url(shard_url),
        )


def check_key(listed: str, found: str, *, url: str, offset: int) -> None:
    """FormatError unless the sample an index lists at ``offset`` has the key it lists."""
    if found != listed:
        raise FormatError(
            f"the index says sample {listed!r}, the shard has {found!r} here (stale index?)",
            url=url,
            offset=offset,
        )


def compare_index(
    index: ShardIndex, keys: Sequence[str], offsets: Sequence[int]
) -> Iterator[tuple[str | None, int | None, str]]:
    """(key, offset, message) for each way ``index`` disagrees with what a scan saw."""
    if index.samples != len(keys):
        yield None, None, f"index lists {index.samples} samples, the shard has {len(keys)}"
    for i, (key, offset) in enumerate(zip(keys, offsets, strict=False)):
        if i >= index.samples:
            break
        if index.keys[i] != key or index.offsets[i] != offset:
            yield key, offset, f"index entry {i} is {index.keys[i]!r} at {index.offsets[i]}"
            return


def check_index(index: ShardIndex, shard_name: str, *, url: str) -> None:
    """FormatError (naming the index file) unless ``index`` is whole and bounded: it names
    this shard, lists each key once, its spans are in order and do not overlap, each lies
    inside the shard (its uncompressed stream, for a gzipped one) and within the reader's
    limits; its member table, if any, is whole
    (:meth:`~shardkit.formats.members.MemberTable.check`; that its members fill each
    span exactly, :func:`prepared_members` checks before a reader slices by it). Every
    consumer of an index (``Dataset``'s counts and reads, ``IndexedDataset``, the build
    from shards) loads it through this check; what it cannot see without reading the
    shard (a span holding two samples) is :func:`span_sample`'s to refuse, or, with a
    member table, :func:`~shardkit.formats.members.verify_members`'s."""
    size = index.shard_bytes
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise FormatError(f"bad index: shard size {size!r}", url=url)
    if index.shard != shard_name:
        raise FormatError(f"index of another shard ({index.shard!r})", url=url)
    # A gzipped shard's offsets are in its uncompressed stream, which has no known end.
    end = None if index.compressed else size
    # A sample is read whole: at most what the reader holds of one record or member.
    limit = MAX_MEMBER_SIZE
    if index.shard_format == "tfrecord":
        limit = MAX_RECORD_LENGTH + RECORD_OVERHEAD
    previous_end = 0
    for i, (offset, length) in enumerate(zip(index.offsets, index.sizes, strict=True)):
        if offset < 0 or length <= 0 or (end is not None and offset + length > end):
            where = "uncompressed stream" if index.compressed else f"{size} bytes"
            raise FormatError(
                f"bad index: entry {i} ({length} bytes at {offset}) is outside the shard's {where}",
                url=url,
            )
        if length > limit:
            raise FormatError(
                f"bad index: entry {i} is {length} bytes, over the reader's {limit}-byte limit",
                url=url,
            )
        if offset < previous_end:
            raise FormatError(
                f"bad index: entry {i} (at {offset}) overlaps or comes before the span "
                f"of entry {i - 1} (which ends at {previous_end})",
                url=url,
            )
        previous_end = offset + length
    if len(set(index.keys)) != len(index.keys):
        first = _first_repeat(index.keys)
        raise FormatError(f"bad index: it lists sample {first!r} more than once", url=url)
    if index.members is not None:
        if index.compressed or index.shard_format != "tar":
            raise FormatError("bad index: a member table for a gzipped or TFRecord shard", url=url)
        index.members.check(index.samples, url=url)


def prepared_members(index: ShardIndex, *, url: str) -> MemberTable | None:
    """The member table of a checked index, prepared for reading (each member's place,
    checked to fill its sample's span exactly: a FormatError naming the index ``url``
    otherwise); None when the index has none."""
    table = index.members
    if table is not None:
        table.prepare(index.keys, index.offsets, index.sizes, index.shard_bytes or 0, url=url)
    return table


def _first_repeat(keys: Sequence[str]) -> str:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return ""


def indexed_sample(
    buffer: Buffer,
    start: int,
    end: int,
    *,
    format: Format,
    key: str,
    offset: int,
    base: int = 0,
    url: str,
    copy: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """The sample an index lists with ``key`` at shard offset ``offset``, from the bytes
    of its span (``buffer[start:end]``; ``base`` is the shard offset of ``buffer[0]``): the
    one rule every index consumer applies. The span must hold exactly that one sample (a tar
    span: :func:`shardkit.formats.tar.span_sample`; a TFRecord span: exactly one whole
    record) with the key the index lists (:func:`check_key`), else a FormatError naming
    the shard offset. ``__key__`` is the listed key; ``__offset__`` its offset."""
    if format == "tar":
        sample = tar.span_sample(buffer, start, end, base=base, url=url, copy=copy)
    else:
        data = bytes(buffer[start:end])
        sample = _span_record(data, key=key, url=url, offset=offset, verify=verify)
    check_key(key, sample["__key__"], url=url, offset=offset)
    sample["__offset__"] = offset
    return sample


def _span_record(data: bytes, *, key: str, url: str, offset: int, verify: bool) -> dict[str, Any]:
    """The sample of a TFRecord span that holds exactly one record."""
    records = tfrecord.iter_records(io.BytesIO(data), url=url, verify=verify)
    try:
        found = next(records, None)
        other = next(records, None)
    except FormatError as exc:  # the offsets of the span's bytes, made the shard's
        raise type(exc)(exc.message, url=url, offset=offset + (exc.offset or 0)) from exc
    if found is None:
        raise FormatError("no sample at the indexed offset", url=url, offset=offset, key=key)
    if other is not None:
        raise FormatError(
            f"the indexed span holds another record too (at offset {offset + other[0]})",
            url=url,
            offset=offset,
            key=key,
        )
    features = example.decode_example(found[1], url=url, offset=offset)
    return example.example_to_sample(features, key=key, url=url)
