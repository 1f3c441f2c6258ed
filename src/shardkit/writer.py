"""ShardWriter: write samples to numbered shards, rotating by sample count and by bytes.

Each shard is written under a temporary name and committed (renamed, or its upload
completed) only when it is full or the writer closes: no partial file ever carries a final
name, and no empty trailing shard is ever written. ``max_size`` is the real file size,
headers and padding included (the compressed size for gzip shards): a shard never exceeds
it unless one sample alone does, and that sample then stands alone in its shard.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import storage
from .digest import DEFAULT_HASH, HashName, check_hash
from .errors import ConfigError, EncodeError, StorageError
from .formats import tar
from .formats.cut import WRITER_MAX_COUNT, WRITER_MAX_SIZE, Cut
from .formats.names import FORMATS, Format, check_pattern, format_from_name, shard_name
from .units import Size

__all__ = ["Format", "ShardInfo", "ShardWriter", "format_from_name", "shard_name"]


@dataclass(frozen=True)
class ShardInfo:
    """A committed shard: where it is, how many samples, its size and its digest
    (``ALGO:HEX``, :mod:`shardkit.digest`; ``""`` when written with ``hash="none"``)."""

    url: str
    samples: int
    bytes: int
    digest: str
    index: int

    @property
    def name(self) -> str:
        return storage.basename(self.url)


class _Sink:
    """One open shard (an atomic file that counts and hashes its bytes), gzip-framed when
    ``gzip``: :meth:`trial` projects the file's final size before a sample is written."""

    def __init__(self, file: storage.AtomicFile, gzip: bool) -> None:
        self.file = file
        self._gz: Any = None
        self._crc = 0
        self._raw = 0
        if gzip:
            # A fixed header (mtime 0, no name, OS 255) keeps gzip shards reproducible.
            file.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
            self._gz = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)

    def _emit(self, data: bytes) -> None:
        if data:
            self.file.write(data)

    def trial(self, data: bytes, trailer: bytes) -> tuple[bytes, int, Any]:
        """(bytes to emit for ``data``, final size if we closed right after, compressor)."""
        if self._gz is None:
            return data, self.file.size + len(data) + len(trailer), None
        comp = self._gz.copy()
        out = comp.compress(data) + comp.flush(zlib.Z_SYNC_FLUSH)
        end = comp.copy()
        final = end.compress(trailer) + end.flush(zlib.Z_FINISH)
        return out, self.file.size + len(out) + len(final) + 8, comp

    def commit(self, data: bytes, out: bytes, comp: Any) -> None:
        if comp is not None:
            self._gz = comp
            self._crc = zlib.crc32(data, self._crc)
            self._raw += len(data)
        self._emit(out)

    def finish(self, trailer: bytes) -> None:
        if self._gz is None:
            self._emit(trailer)
            return
        self._crc = zlib.crc32(trailer, self._crc)
        self._raw += len(trailer)
        self._emit(self._gz.compress(trailer) + self._gz.flush(zlib.Z_FINISH))
        self._emit(self._crc.to_bytes(4, "little") + (self._raw & 0xFFFFFFFF).to_bytes(4, "little"))


_WEBDATASET_NAMES = {"maxcount": "max_count", "maxsize": "max_size", "start_shard": "start_index"}
_WEBDATASET_WAYS = {
    "post": "pass on_shard=fn: it gets a ShardInfo (url, samples, bytes, sha256) per shard",
    "opener": "pass a URL (s3://, gs://, ...) and storage_options=",
    "verbose": "shardkit logs through logging.getLogger('shardkit')",
}


def _webdataset_options(
    given: Mapping[str, Any], max_count: int | None, max_size: Size | None, start: int
) -> tuple[Any, Any, Any]:
    """``ShardWriter(maxcount=, maxsize=, start_shard=)``: webdataset's names."""
    ours: dict[str, Any] = {"max_count": max_count, "max_size": max_size, "start_index": start}
    defaults = {"max_count": WRITER_MAX_COUNT, "max_size": WRITER_MAX_SIZE, "start_index": 0}
    for name, value in given.items():
        if name in _WEBDATASET_WAYS:
            raise ConfigError(f"ShardWriter() has no {name}= argument: {_WEBDATASET_WAYS[name]}")
        if name not in _WEBDATASET_NAMES:
            raise ConfigError(f"ShardWriter() has no {name}= argument")
        own = _WEBDATASET_NAMES[name]
        if ours[own] != defaults[own]:
            raise ConfigError(f"ShardWriter() takes one of {own}= and {name}=, not both")
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # webdataset's maxcount=1e5 (a size takes floats anyway)
        ours[own] = value
    return ours["max_count"], ours["max_size"], ours["start_index"]


class ShardWriter:
    """Write samples to ``pattern % index`` shards (tar or TFRecord, optionally gzipped).

    >>> with ShardWriter("out/shard-%06d.tar", max_count=10_000, max_size=1 << 30) as sink:
    ...     for sample in samples:
    ...         sink.write(sample)

    ``encode=True`` (the default) runs :func:`shardkit.codecs.encode_sample` on each sample,
    so values may be ints, str, dicts (json), numpy arrays and images as well as bytes. For
    TFRecord, bytes, str, numbers and lists become features as they are (an int is an int64
    feature: :mod:`shardkit.formats.example`); only the other values, and fields ending in
    ``.gz``, go through the codecs.
    ``on_shard`` is called with a :class:`ShardInfo` as each shard is committed; ``hash``
    names the algorithm of its digest (:mod:`shardkit.digest`, ``"none"`` to skip it).
    webdataset's ``maxcount=``, ``maxsize=`` and ``start_shard=`` are the same options.
    """

    def __init__(
        self,
        pattern: str,
        *,
        max_count: int | None = WRITER_MAX_COUNT,
        max_size: Size | None = WRITER_MAX_SIZE,
        start_index: int = 0,
        format: Format | None = None,
        compress: bool | None = None,
        encode: bool = True,
        storage_options: dict[str, Any] | None = None,
        on_shard: Callable[[ShardInfo], None] | None = None,
        hash: HashName = DEFAULT_HASH,
        **webdataset: Any,
    ) -> None:
        if webdataset:
            max_count, max_size, start_index = _webdataset_options(
                webdataset, max_count, max_size, start_index
            )
        self.cut = Cut(max_count, max_size)  # the trailer is in each size projected
        self.hash = check_hash(hash)
        if start_index < 0:
            raise ConfigError(f"start_index must be >= 0, not {start_index}")
        check_pattern(pattern, option="pattern")
        implied, gz = format_from_name(pattern)
        if format is not None and format not in FORMATS:
            raise ConfigError(f"format must be 'tar' or 'tfrecord', not {format!r}")
        self.pattern = pattern
        self.format: Format = format or implied
        self.compress = gz if compress is None else compress
        self.max_count = self.cut.max_count
        self.max_size = self.cut.max_size
        self.encode = encode
        self.storage_options = storage_options
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self._index = start_index
        self._sink: _Sink | None = None
        self._url = ""
        self._count = 0
        self._last_key: str | None = None
        self._trailer = tar.END_OF_ARCHIVE if self.format == "tar" else b""
        self._closed = False

    # -- encoding
    def _encode(self, sample: Mapping[str, Any]) -> tuple[str, bytes]:
        if not isinstance(sample, Mapping):
            raise EncodeError(f"a sample must be a dict, not {type(sample).__name__}")
        key = sample.get("__key__")
        if self.format == "tar":
            if self.encode:
                from .codecs import encode_sample

                sample = encode_sample(sample)
            data = tar.encode_sample(sample)
        else:
            from .formats import tfrecord
            from .formats.example import encode_other_values, sample_to_example

            if self.encode:
                from .codecs import encode_sample

                sample = encode_other_values(sample, encode_sample)
            if not isinstance(key, str) or not key:
                raise EncodeError("every sample needs a non-empty str __key__")
            data = tfrecord.frame_record(sample_to_example(sample))
        tar.check_key_order(self._last_key, str(key))
        return str(key), data

    # -- shard lifecycle
    def _open(self) -> _Sink:
        self._url = shard_name(self.pattern, self._index)
        # A fresh out/ folder is created, as build does (AtomicFile makes a file's folder).
        file = storage.open_atomic(self._url, storage_options=self.storage_options, hash=self.hash)
        self._sink = _Sink(file, self.compress)
        self._count = 0
        return self._sink

    def _commit(self) -> None:
        sink = self._sink
        if sink is None:
            return
        with self._io():
            sink.finish(self._trailer)
            sink.file.commit()  # renames the temporary file / completes the upload
            self._sink = None
        file = sink.file
        info = ShardInfo(self._url, self._count, file.size, file.digest, self._index)
        self.shards.append(info)
        self._index += 1
        if self.on_shard is not None:
            self.on_shard(info)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add one sample, starting a new shard first when this one is full."""
        if self._closed:
            raise ConfigError("write() on a closed ShardWriter")
        key, data = self._encode(sample)
        sink = self._sink if self._sink is not None else self._open()
        out, final_size, comp = sink.trial(data, self._trailer)
        if self.cut.full(self._count, final_size, 0):
            self._commit()
            sink = self._open()
            out, final_size, comp = sink.trial(data, self._trailer)
        with self._io():
            sink.commit(data, out, comp)
        self._count += 1
        self._last_key = key

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """An OSError while writing (a full disk) drops the shard in progress and closes
        the writer: it raises a StorageError naming the shard; committed shards stay."""
        try:
            yield
        except OSError as exc:
            self.abort()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=self._url) from exc

    def close(self) -> list[ShardInfo]:
        """Commit the last shard; returns every shard written."""
        if not self._closed:
            self._closed = True
            self._commit()
        return self.shards

    def abort(self) -> None:
        """Discard the shard in progress (it never appears under its name)."""
        self._closed = True
        sink, self._sink = self._sink, None
        if sink is not None:
            sink.file.discard()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __iter__(self) -> Iterator[ShardInfo]:
        return iter(self.shards)
