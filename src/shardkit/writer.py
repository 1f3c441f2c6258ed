"""ShardWriter: write samples to numbered shards, rotating by sample count and by bytes.

Each shard is written under a temporary name and committed (renamed, or its upload
completed) only when it is full or the writer closes: no partial file ever carries a final
name, and no empty trailing shard is ever written. ``max_size`` is the real file size,
headers and padding included (the compressed size for gzip shards): a shard never exceeds
it unless one sample alone does, and that sample then stands alone in its shard.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from . import storage
from .errors import ConfigError, EncodeError, StorageError
from .formats import tar
from .formats.names import FORMATS, Format, check_pattern, format_from_name, shard_name
from .units import parse_size

__all__ = ["Format", "ShardInfo", "ShardWriter", "format_from_name", "shard_name"]


@dataclass(frozen=True)
class ShardInfo:
    """A committed shard: where it is, how many samples, its size and sha256."""

    url: str
    samples: int
    bytes: int
    sha256: str
    index: int

    @property
    def name(self) -> str:
        return storage.basename(self.url)


class _Sink:
    """One open shard: counts exact bytes on disk and hashes them as they go."""

    def __init__(self, stream: BinaryIO, gzip: bool) -> None:
        self.stream = stream
        self.hash = hashlib.sha256()
        self.size = 0
        self._gz: Any = None
        self._crc = 0
        self._raw = 0
        if gzip:
            # A fixed header (mtime 0, no name, OS 255) keeps gzip shards reproducible.
            self._emit(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
            self._gz = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)

    def _emit(self, data: bytes) -> None:
        if data:
            self.stream.write(data)
            self.hash.update(data)
            self.size += len(data)

    def trial(self, data: bytes, trailer: bytes) -> tuple[bytes, int, Any]:
        """(bytes to emit for ``data``, final size if we closed right after, compressor)."""
        if self._gz is None:
            return data, self.size + len(data) + len(trailer), None
        comp = self._gz.copy()
        out = comp.compress(data) + comp.flush(zlib.Z_SYNC_FLUSH)
        end = comp.copy()
        final = end.compress(trailer) + end.flush(zlib.Z_FINISH)
        return out, self.size + len(out) + len(final) + 8, comp

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
    given: Mapping[str, Any], max_count: int | None, max_size: int | str | None, start: int
) -> tuple[Any, Any, Any]:
    """``ShardWriter(maxcount=, maxsize=, start_shard=)``: webdataset's names."""
    ours: dict[str, Any] = {"max_count": max_count, "max_size": max_size, "start_index": start}
    defaults = {"max_count": 100_000, "max_size": 3 << 30, "start_index": 0}
    for name, value in given.items():
        if name in _WEBDATASET_WAYS:
            raise ConfigError(f"ShardWriter() has no {name}= argument: {_WEBDATASET_WAYS[name]}")
        if name not in _WEBDATASET_NAMES:
            raise ConfigError(f"ShardWriter() has no {name}= argument")
        own = _WEBDATASET_NAMES[name]
        if ours[own] != defaults[own]:
            raise ConfigError(f"ShardWriter() takes one of {own}= and {name}=, not both")
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # webdataset's maxsize=3e9
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
    ``on_shard`` is called with a :class:`ShardInfo` as each shard is committed.
    webdataset's ``maxcount=``, ``maxsize=`` and ``start_shard=`` are the same options.
    """

    def __init__(
        self,
        pattern: str,
        *,
        max_count: int | None = 100_000,
        max_size: int | str | None = 3 << 30,
        start_index: int = 0,
        format: Format | None = None,
        compress: bool | None = None,
        encode: bool = True,
        storage_options: dict[str, Any] | None = None,
        on_shard: Callable[[ShardInfo], None] | None = None,
        **webdataset: Any,
    ) -> None:
        if webdataset:
            max_count, max_size, start_index = _webdataset_options(
                webdataset, max_count, max_size, start_index
            )
        if max_count is not None and max_count < 1:
            raise ConfigError(f"max_count must be at least 1, not {max_count}")
        if max_size is not None:
            max_size = parse_size(max_size, name="max_size")
        if start_index < 0:
            raise ConfigError(f"start_index must be >= 0, not {start_index}")
        check_pattern(pattern, option="pattern")
        implied, gz = format_from_name(pattern)
        if format is not None and format not in FORMATS:
            raise ConfigError(f"format must be 'tar' or 'tfrecord', not {format!r}")
        self.pattern = pattern
        self.format: Format = format or implied
        self.compress = gz if compress is None else compress
        self.max_count = max_count
        self.max_size = max_size
        self.encode = encode
        self.storage_options = storage_options
        self.on_shard = on_shard
        self.shards: list[ShardInfo] = []
        self._index = start_index
        self._stack: contextlib.ExitStack | None = None
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
        if storage.is_local(self._url) and self._url != "-":
            folder = os.path.dirname(os.path.abspath(storage.local_path(self._url)))
            try:
                os.makedirs(folder, exist_ok=True)  # a fresh out/ folder, as build does
            except OSError as exc:
                raise StorageError(f"cannot create the folder: {exc}", url=self._url) from exc
        self._stack = contextlib.ExitStack()
        stream = self._stack.enter_context(
            storage.atomic_write(self._url, storage_options=self.storage_options)
        )
        self._sink = _Sink(stream, self.compress)
        self._count = 0
        return self._sink

    def _commit(self) -> None:
        sink, stack = self._sink, self._stack
        if sink is None or stack is None:
            return
        with self._io():
            sink.finish(self._trailer)
            self._sink = self._stack = None
            stack.close()  # renames the temporary file / completes the upload
        info = ShardInfo(self._url, self._count, sink.size, sink.hash.hexdigest(), self._index)
        self.shards.append(info)
        self._index += 1
        if self.on_shard is not None:
            self.on_shard(info)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add one sample, starting a new shard first when this one is full."""
        if self._closed:
            raise ConfigError("write() on a closed ShardWriter")
        key, data = self._encode(sample)
        sink = self._sink
        if sink is not None and self.max_count is not None and self._count >= self.max_count:
            self._commit()
            sink = None
        if sink is None:
            sink = self._open()
        out, final_size, comp = sink.trial(data, self._trailer)
        if self.max_size is not None and final_size > self.max_size and self._count > 0:
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
        stack, self._stack, self._sink = self._stack, None, None
        if stack is not None:
            # OSError: the temporary file's unflushed tail (a full disk); it is removed.
            with contextlib.suppress(_Abort, OSError):
                stack.__exit__(_Abort, _Abort(), None)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __iter__(self) -> Iterator[ShardInfo]:
        return iter(self.shards)


class _Abort(Exception):
    """Raised into a shard's context to make it discard its temporary file."""
