"""The shard file, and ShardWriter: samples to numbered shards, rotated by count and bytes.

:class:`ShardFile` is one shard being written, the one object every writer of shards
composes (``ShardWriter``, ``map_shards``, the tools' outputs, ``split``'s byte copy, the
build's part writer): so the same samples give the same bytes from every entry point, and
each refuses what a reader would refuse.

Each shard is written under a temporary name and committed (renamed, or its upload
completed) only when it is full or the writer closes: no partial file ever carries a final
name, and no empty trailing shard is ever written. ``max_size`` is the real file size,
headers and padding included (the compressed size for gzip shards): a shard never exceeds
it unless one sample alone does, and that sample then stands alone in its shard.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import eq
from typing import Any

from . import storage
from .digest import DEFAULT_HASH, HashName, check_hash
from .errors import ConfigError, EncodeError, StorageError
from .formats import tar
from .formats.cut import WRITER_MAX_COUNT, WRITER_MAX_SIZE, Cut
from .formats.gzframe import HEADER as GZIP_HEADER
from .formats.gzframe import Deflate
from .formats.index import ShardIndex, index_url
from .formats.members import TableBuilder
from .formats.names import FORMATS, Format, check_pattern, format_from_name, shard_name
from .formats.record import ShardInfo
from .storage import LOCAL, Access, StorageOptions
from .units import Size

__all__ = ["Rotation", "ShardFile", "ShardWriter", "copy_samples", "encode_sample"]


def encode_sample(
    sample: Mapping[str, Any], format: Format, *, codecs: bool = False
) -> tuple[str, bytes]:
    """(key, the bytes of ``sample`` in a shard of ``format``), refused (EncodeError) as a
    reader would refuse it. ``codecs=True`` first runs :func:`shardkit.codecs.encode_sample`
    (for TFRecord only on values that are not features as they are)."""
    if not isinstance(sample, Mapping):
        raise EncodeError(f"a sample must be a dict, not {type(sample).__name__}")
    if format == "tar":
        if codecs:
            from .codecs import encode_sample as encode_fields

            sample = encode_fields(sample)
        data = tar.encode_sample(sample)
        return str(sample["__key__"]), data
    from .formats import tfrecord
    from .formats.example import encode_other_values, sample_to_example

    if codecs:
        from .codecs import encode_sample as encode_fields

        sample = encode_other_values(sample, encode_fields)
    key = _checked_key(sample.get("__key__"))
    return key, tfrecord.frame_record(sample_to_example(sample))


def _checked_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise EncodeError("every sample needs a non-empty str __key__")
    return key


def _distinct_run(keys: Sequence[str]) -> bool:
    """Whether each of ``keys`` is a non-empty str other than the one before it (the key
    rule within a run, checked in bulk: no Python per key)."""
    if "" in keys or set(map(type, keys)) != {str}:
        return False
    return not any(map(eq, itertools.islice(keys, 1, None), keys))


_NO_CUT = Cut()


class ShardFile(storage.CommitOrDiscard):
    """One shard file being written: the one object every writer of shards composes.

    It owns, for one file: the encoding by format (:meth:`write_sample`), the key rule (the
    same ``__key__`` twice in a row is refused, :func:`shardkit.formats.tar.check_key_order`,
    also across a rotation: ``last_key``), the gzip framing
    (:mod:`shardkit.formats.gzframe`, the one framing), the trailer (a tar's end-of-archive
    blocks), the size cut (:meth:`full`, :class:`~shardkit.formats.cut.Cut`), the atomic
    commit (:class:`shardkit.storage.AtomicFile`) and, with ``index=True``, the shard's
    ``.idx`` file (:mod:`shardkit.formats.index`), written beside it once it is committed.
    ``trailer=False``: a run of whole samples that another step closes (a build's chunk).
    """

    def __init__(
        self,
        file: storage.AtomicFile,
        format: Format = "tar",
        *,
        gzip: bool = False,
        cut: Cut = _NO_CUT,
        trailer: bool = True,
        index: bool = False,
        last_key: str | None = None,
        access: Access = LOCAL,
    ) -> None:
        self.file = file
        self.format: Format = format
        self.cut = cut
        self.trailer = tar.END_OF_ARCHIVE if format == "tar" and trailer else b""
        self.gzip = gzip
        self.count = 0
        self.last_key = last_key
        self._offset = 0  # where the next sample starts in the (uncompressed) stream
        self._gz = Deflate() if gzip else None
        self._trial: tuple[bytes, bytes, Any] | None = None  # data, its bytes, compressor
        self._index: tuple[list[str], list[int], list[int]] | None = None
        self._members: TableBuilder | None = None
        if index:
            self._index = ([], [], [])
            if format == "tar" and not gzip:
                self._members = TableBuilder()
        self._access = access
        self._copy_write = file.write  # one bound method: a scanner batches by its identity
        if gzip:
            file.write(GZIP_HEADER)

    @classmethod
    def open(
        cls,
        url: str,
        format: Format = "tar",
        *,
        gzip: bool = False,
        cut: Cut = _NO_CUT,
        index: bool = False,
        last_key: str | None = None,
        access: Access = LOCAL,
        hash: str = DEFAULT_HASH,
    ) -> ShardFile:
        """A new shard file at ``url`` (its folder is created, as build makes its output)."""
        file = storage.open_atomic(url, access=access, hash=hash)
        return cls(
            file,
            format,
            gzip=gzip,
            cut=cut,
            index=index,
            last_key=last_key,
            access=access,
        )

    @property
    def url(self) -> str:
        return self.file.url

    def check_key(self, key: object) -> str:
        """``key``, refused unless a non-empty str other than the previous sample's."""
        return tar.check_key_order(self.last_key, _checked_key(key))

    def full(self, sample: bytes | int) -> bool:
        """Whether the shard must be closed before ``sample`` (its bytes, or for an
        uncompressed shard its size) joins it: the cut rule on the closed file's size."""
        if not self.count:
            return False
        if self._gz is None:
            size = sample if isinstance(sample, int) else len(sample)
            return self.cut.over(self.count, self._offset + size + len(self.trailer))
        if isinstance(sample, int):
            raise TypeError("a gzip shard projects its size from the sample's bytes")
        if self.cut.max_size is None:
            return self.cut.over(self.count, 0)
        out, tail, comp = self._gz.project(sample, self.trailer)
        self._trial = (sample, out, comp)
        return self.cut.over(self.count, self.file.size + len(out) + tail)

    def write(self, key: str, data: bytes, *, checked: bool = False) -> None:
        """Append one encoded sample (``checked``: as for :meth:`copy`)."""
        if not checked:
            self.check_key(key)
        self._note(key, len(data))
        if self._members is not None:
            self._members = self._members.add(key, data)
        if self._gz is None:
            self.file.write(data)
            return
        trial, self._trial = self._trial, None
        if trial is not None and trial[0] is data:
            self._gz.take(data, trial[2])
            out = trial[1]
        else:
            out = self._gz.sample(data)
        if out:
            self.file.write(out)

    def write_sample(self, sample: Mapping[str, Any], *, codecs: bool = False) -> None:
        """Encode ``sample`` for this shard's format and append it."""
        self.write(*encode_sample(sample, self.format, codecs=codecs))

    def writev(
        self,
        key: str,
        chunks: list[bytes],
        size: int,
        members: tuple[Sequence[str], Sequence[int]] | None = None,
    ) -> None:
        """Append one encoded sample given as chunks (``size`` bytes in all), with one
        ``writev`` when the shard is uncompressed. ``members``: the extensions and data
        sizes of its members, when they are plain members named ``KEY.EXT``
        (:func:`shardkit.formats.tar.tar_sample` says): the member table takes them as
        they are instead of parsing the bytes."""
        if self._gz is not None:
            self.write(key, b"".join(chunks))
            return
        self.check_key(key)
        self._note(key, size)
        if self._members is not None:
            if members is not None:
                self._members = self._members.add_fields(key, *members)
            else:
                self._members = self._members.add(key, b"".join(chunks))
        self.file.writev(chunks, size)

    def copy(
        self, key: str, size: int, emit: Callable[[tar.Write], None], *, checked: bool = False
    ) -> None:
        """Append one sample of ``size`` bytes that ``emit(write)`` copies (uncompressed
        shards; the caller sends a pending copy out before :meth:`commit`). ``checked``:
        the key rule was checked for ``key`` against this shard's last key already
        (:meth:`Rotation.shard` does)."""
        if self._gz is not None:
            raise TypeError("raw copies go to uncompressed shards")
        if not checked:
            self.check_key(key)
        self._note(key, size)
        self._members = None  # bytes it does not see: the index goes without a table
        emit(self._copy_write)

    def copy_run(
        self, keys: Sequence[str], sizes: Sequence[int], emit: Callable[[tar.Write], None]
    ) -> None:
        """Append a run of whole samples, ``keys`` with ``sizes`` bytes each, back to back,
        that ``emit(write)`` copies as they are (uncompressed shards): what :meth:`copy`
        does for each, with the key rule checked for the run at once (each key a
        non-empty str other than the one before it) and one call to ``emit``."""
        if self._gz is not None:
            raise TypeError("raw copies go to uncompressed shards")
        if not keys:
            return
        self.check_key(keys[0])
        if not _distinct_run(keys):
            for before, key in itertools.pairwise(keys):  # find it, and say what it is
                tar.check_key_order(before, _checked_key(key))
        if self._index is not None:
            names, offsets, spans = self._index
            names.extend(keys)
            offsets.extend(itertools.accumulate(sizes[:-1], initial=self._offset))
            spans.extend(sizes)
        self._offset += sum(sizes)
        self.count += len(keys)
        self.last_key = keys[-1]
        self._members = None  # bytes it does not see: the index goes without a table
        emit(self._copy_write)

    def room(self, ends: Sequence[int], first: int, stop: int) -> int:
        """Where a run of samples that this shard just let in the first of (``first``,
        :meth:`full` said so) must be cut: the end of those of samples ``first`` to
        ``stop`` that join it by the cut rule, given ``ends``, the running total of their
        sizes (sample ``i`` is ``ends[i]`` to ``ends[i + 1]``). The rule is
        :meth:`full`'s, asked of the run at once: at most ``max_count`` samples, and a
        closed size (trailer included) within ``max_size``."""
        end = stop
        max_count, max_size = self.cut.max_count, self.cut.max_size
        if max_count is not None:
            end = min(end, first + max(1, max_count - self.count))
        if max_size is not None:
            if self._gz is not None:
                raise TypeError("a gzip shard projects its size from the sample's bytes")
            limit = max_size - self._offset - len(self.trailer) + ends[first]
            end = min(end, bisect_right(ends, limit, first + 1, stop + 1) - 1)
        return max(end, first + 1)

    def start_copy(self, key: str) -> None:
        """Start a sample whose members the caller copies to :attr:`file` itself, its size
        not known ahead (an uncompressed shard without a size cut or an index)."""
        if self._gz is not None or self._index is not None or self.cut.max_size is not None:
            raise TypeError("copies of unknown size go to plain shards without cut or index")
        self.check_key(key)
        self.count += 1
        self.last_key = key

    def _note(self, key: str, size: int) -> None:
        if self._index is not None:
            self._index[0].append(key)
            self._index[1].append(self._offset)
            self._index[2].append(size)
        self._offset += size
        self.count += 1
        self.last_key = key

    def commit(self, number: int = 0) -> ShardInfo:
        """End the file (trailer, gzip end) and commit it, with its index; returns it as
        shard ``number``. The index is written before the shard is committed and committed
        right after it: a full disk fails the shard, never leaves it without its index."""
        file = self.file
        if self._gz is None:
            if self.trailer:
                file.write(self.trailer)
        else:
            file.write(self._gz.finish(self.trailer))
        index = self._write_index() if self._index is not None else None
        try:
            file.commit()  # renames the temporary file / completes the upload
        except BaseException:
            if index is not None:
                index.discard()
            raise
        if index is not None:
            index.commit()
        return ShardInfo.at(file.url, self.count, file.size, file.digest, number)

    def _write_index(self) -> storage.AtomicFile:
        """The shard's ``.idx`` file, written but not committed."""
        keys, offsets, sizes = self._index or ([], [], [])
        url = self.file.url
        index = ShardIndex(
            storage.basename(url),
            self.format,
            self.gzip,
            self.file.size,
            tuple(keys),
            tuple(offsets),
            tuple(sizes),
            members=None if self._members is None else self._members.build(),
        )
        out = storage.open_atomic(index_url(url), access=self._access)
        try:
            out.write(index.to_json())
        except BaseException:
            out.discard()
            raise
        return out

    def discard(self) -> None:
        """Drop the file: it never appears under its name."""
        self.file.discard()


class Rotation(storage.CommitOrDiscard):
    """Numbered shard files, one :class:`ShardFile` at a time: the one rotation that every
    writer of numbered shards composes (:class:`ShardWriter`, ``split``'s byte copy, the
    build's parts).

    :meth:`shard` gives the file a sample goes into: the open one, or, when the cut says
    it is full (:meth:`ShardFile.full`), the next one after this one is committed. The last
    key is carried from each shard to the next (the key rule holds across a cut), each
    committed shard is reported (:attr:`shards`, ``on_shard``) and, once ``max_shards`` are
    committed, :attr:`full` is set and no shard is opened. ``open_file(n)`` makes the
    atomic file of shard ``n`` (numbers start at ``start``); the other arguments are each
    shard's (:class:`ShardFile`). ``before_commit`` runs before a shard is committed (a
    pending copy goes out first).
    """

    def __init__(
        self,
        open_file: Callable[[int], storage.AtomicFile],
        format: Format = "tar",
        *,
        gzip: bool = False,
        cut: Cut = _NO_CUT,
        trailer: bool = True,
        index: bool = False,
        access: Access = LOCAL,
        start: int = 0,
        max_shards: int | None = None,
        on_shard: Callable[[ShardInfo], None] | None = None,
    ) -> None:
        if max_shards is not None and max_shards < 1:
            raise ConfigError(f"max_shards must be at least 1, not {max_shards}")
        self.open_file = open_file
        self.format: Format = format
        self.gzip = gzip
        self.cut = cut
        self.trailer = trailer
        self.index = index
        self.access = access
        self.number = start
        self.max_shards = max_shards
        self.on_shard = on_shard
        self.before_commit: Callable[[], None] | None = None
        self.shards: list[ShardInfo] = []
        self.full = False  # max_shards committed: nothing more is written
        self.current: ShardFile | None = None
        self.last_key: str | None = None  # of the shards committed

    def shard(self, key: str, sample: bytes | int) -> ShardFile | None:
        """The shard that the sample ``key`` (its bytes, or its size for an uncompressed
        shard) goes into, a new one when the open one is full; None once ``max_shards``
        are committed. The key rule is checked first (so that :meth:`ShardFile.copy` and
        :meth:`ShardFile.write` need not check it again: ``checked=True``)."""
        shard = self.current
        if shard is not None:
            shard.check_key(key)
            if not shard.full(sample):
                return shard
            self.cut_here()
        elif not self.full:
            tar.check_key_order(self.last_key, _checked_key(key))
        if self.full:
            return None
        self.current = ShardFile(
            self.open_file(self.number),
            self.format,
            gzip=self.gzip,
            cut=self.cut,
            trailer=self.trailer,
            index=self.index,
            last_key=self.last_key,
            access=self.access,
        )
        return self.current

    def cut_here(self) -> None:
        """Commit the open shard (if any) and report it; the next sample opens the next."""
        shard = self.current
        if shard is None:
            return
        if self.before_commit is not None:
            self.before_commit()
        info = shard.commit(self.number)
        self.current = None
        self.last_key = shard.last_key
        self.shards.append(info)
        self.number += 1
        if self.on_shard is not None:
            self.on_shard(info)
        if self.max_shards is not None and len(self.shards) >= self.max_shards:
            self.full = True

    def copy_run(
        self, keys: Sequence[str], sizes: Sequence[int], copy: Callable[[int, int, tar.Write], None]
    ) -> bool:
        """Add a run of whole samples of an uncompressed shard, ``keys`` with ``sizes``
        bytes each, back to back: ``copy(i, j, write)`` writes the bytes of samples ``i``
        to ``j`` of the run. The samples go where :meth:`shard` would put each (the same
        key rule, cut and ``max_shards``), each part of the run that one shard takes in
        one call (:meth:`ShardFile.room`, :meth:`ShardFile.copy_run`); False once
        ``max_shards`` are committed (the rest is not copied)."""
        ends = list(itertools.accumulate(sizes, initial=0))
        first, stop = 0, len(keys)
        while first < stop:
            shard = self.shard(keys[first], sizes[first])
            if shard is None:
                return False
            end = shard.room(ends, first, stop)
            shard.copy_run(keys[first:end], sizes[first:end], functools.partial(copy, first, end))
            first = end
        return True

    def commit(self) -> list[ShardInfo]:
        """Commit the last shard; returns every shard committed."""
        self.cut_here()
        return self.shards

    def discard(self) -> None:
        """Drop the shard in progress (it never appears under its name); those committed
        stay."""
        shard, self.current = self.current, None
        if shard is not None:
            shard.discard()


def copy_samples(members: tar.TarScanner, sink: Rotation) -> bool:
    """Copy the samples of one tar stream into ``sink``'s shards, member bytes as they are
    (with the reader's checks); False once the sink is full. A pending copy goes out
    before each commit (``sink.before_commit``) and after the stream (the caller's
    ``members.flush_copy()``)."""
    key: str | None = None
    start = end = 0

    def add(key: str, start: int, end: int) -> bool:
        shard = sink.shard(key, end - start)  # (the key rule: checked there, once)
        if shard is None:
            return False
        emit = functools.partial(members.copy_range, start, end)
        shard.copy(key, end - start, emit, checked=True)
        return True

    for member, prefix, _ext, new in tar.Grouping(members.url)(members):
        if new:
            if key is not None and not add(key, start, end):
                return False
            key, start = prefix, member.start
            members.keep_from(start)
        end = member.end
    return key is None or add(key, start, end)


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


class ShardWriter(storage.CommitOrDiscard):
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
    ``index=True`` (the default) writes each shard's ``.idx`` file beside it as the shard is
    committed (what ``shardkit index`` would write), so ``len()``, equal ranks and
    :func:`shardkit.mix` work on the output at once. With ``max_shards``, :meth:`write`
    returns False (and writes nothing) once that many shards are committed.
    The rotation is :class:`Rotation`'s.
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
        storage_options: Access | StorageOptions | None = None,
        on_shard: Callable[[ShardInfo], None] | None = None,
        hash: HashName = DEFAULT_HASH,
        index: bool = True,
        max_shards: int | None = None,
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
        self.access = Access.of(storage_options)
        self.index = index
        self._closed = False
        self._rotation = Rotation(
            self._open_file,
            self.format,
            gzip=self.compress,
            cut=self.cut,
            index=index,
            access=self.access,
            start=start_index,
            max_shards=max_shards,
            on_shard=on_shard,
        )

    def _open_file(self, number: int) -> storage.AtomicFile:
        url = shard_name(self.pattern, number)
        return storage.open_atomic(url, access=self.access, hash=self.hash)

    @property
    def shards(self) -> list[ShardInfo]:
        """The shards committed so far."""
        return self._rotation.shards

    @property
    def full(self) -> bool:
        """Whether ``max_shards`` shards are committed (nothing more is written)."""
        return self._rotation.full

    def write(self, sample: Mapping[str, Any]) -> bool:
        """Add one sample, starting a new shard first when this one is full; False (the
        sample not written) once ``max_shards`` shards are committed."""
        if self._closed:
            raise ConfigError("write() on a closed ShardWriter")
        key, data = encode_sample(sample, self.format, codecs=self.encode)
        with self._io():
            shard = self._rotation.shard(key, data)
            if shard is None:
                return False
            shard.write(key, data, checked=True)
        return True

    @contextlib.contextmanager
    def _io(self) -> Iterator[None]:
        """An OSError while writing (a full disk) drops the shard in progress and closes
        the writer: it raises a StorageError naming the shard; committed shards stay."""
        try:
            yield
        except OSError as exc:
            url = shard_name(self.pattern, self._rotation.number)
            self.discard()
            if isinstance(exc, StorageError):
                raise
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=url) from exc

    def commit(self) -> list[ShardInfo]:
        """Commit the last shard; returns every shard written."""
        if not self._closed:
            self._closed = True
            with self._io():
                self._rotation.commit()
        return self.shards

    def discard(self) -> None:
        """Discard the shard in progress (it never appears under its name)."""
        self._closed = True
        self._rotation.discard()

    close = commit
    abort = discard

    def __iter__(self) -> Iterator[ShardInfo]:
        return iter(self.shards)
