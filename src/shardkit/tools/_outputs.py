"""Where the tools write: ``-`` (stdout), one file, or a shard pattern (``out-%06d.tar``).

A pattern goes through :class:`~shardkit.writer.ShardWriter` (atomic shards, rotation by
count and size); one file is written atomically too; ``-`` is a stream on stdout. The
format is the pattern's or file's extension (``.tar``, ``.tar.gz``, ``.tfrecord``,
``.tfrecord.gz``) unless given; stdout is a tar stream unless ``format="tfrecord"``.

Samples read from TFRecords become tar fields as documented in :func:`tar_fields`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

from .. import storage
from ..digest import check_hash
from ..errors import ConfigError
from ..formats.names import (
    FORMATS,
    Format,
    check_pattern,
    format_from_name,
    is_pattern,
    shard_name,
)
from ..formats.record import ShardInfo
from ..formats.tar import Write
from ..units import Size
from ..writer import ShardFile, ShardWriter
from ._settings import DEFAULT_RUN, ToolRun

__all__ = ["Output", "prepare_output", "tar_fields"]


def tar_fields(sample: Mapping[str, Any]) -> dict[str, Any]:
    """A sample whose fields are all bytes, ready for the tar writer.

    A sample read from a TFRecord maps back as the shardkit TFRecord schema says
    (:func:`shardkit.formats.tfschema.to_tar_sample`): ``image/encoded`` becomes ``jpg``
    (by ``image/format``), ``image/class/label`` becomes ``cls``; other values become
    bytes (an int its ASCII decimal, a float its ``repr``, a list a JSON array) and a
    ``/`` in a field name becomes ``.``. A tar sample comes through unchanged. Dunder
    keys other than ``__key__`` are dropped.
    """
    from ..formats.tfschema import to_tar_sample

    return to_tar_sample(sample)


def prepare_output(url: str) -> None:
    """Refuse an existing folder where a local output file goes, up front (one line, not
    an IsADirectoryError once the work is done). A missing folder is created when the
    first file is written (:class:`~shardkit.storage.AtomicFile`), as ``build`` does."""
    if url == "-" or not storage.is_local(url):
        return
    path = storage.local_path(shard_name(url, 0) if is_pattern(url) else url)
    if os.path.isdir(path):
        raise ConfigError(
            f"output {url!r} is a folder: give a file (out.tar) or a shard pattern "
            f"({os.path.join(url, 'shard-%06d.tar')})"
        )


class Output(storage.CommitOrDiscard):
    """An open output: :meth:`write` samples; :attr:`raw` is the tar stream (or None).
    ``run`` says how it is reached, each file's digest and who hears of each file."""

    def __init__(
        self,
        url: str,
        run: ToolRun = DEFAULT_RUN,
        *,
        format: Format | None = None,
        max_count: int | None = None,
        max_size: Size | None = None,
        max_shards: int | None = None,
    ) -> None:
        if format is not None and format not in FORMATS:
            raise ConfigError(f"format must be 'tar' or 'tfrecord', not {format!r}")
        self.url = url
        self.samples = 0
        self._on_shard_fn = run.on_shard
        self._writer: ShardWriter | None = None
        self._shard: ShardFile | None = None
        if is_pattern(url):
            check_pattern(url, option="output")
            writer = ShardWriter(
                url,
                max_count=max_count,
                max_size=max_size,
                format=format,
                encode=False,
                storage_options=run.access,
                on_shard=run.on_shard,
                hash=run.hash,
                max_shards=max_shards,
            )
            prepare_output(url)
            self._writer = writer
            self.format: Format = writer.format
            return
        if max_count is not None or max_size is not None or max_shards is not None:
            raise ConfigError(
                f"output {url!r} is one file: --max-count/--max-size/--max-shards need a "
                "shard pattern such as out/shard-%06d.tar"
            )
        implied, gz = format_from_name(url) if url != "-" else ("tar", False)
        self.format = format or implied
        prepare_output(url)
        self._shard = ShardFile.open(
            url, self.format, gzip=gz, access=run.access, hash=check_hash(run.hash)
        )

    @property
    def shards(self) -> list[ShardInfo]:
        """The shards committed so far (pattern outputs only)."""
        return self._writer.shards if self._writer is not None else []

    @property
    def digest(self) -> str:
        """The digest of a one-file output (``ALGO:HEX``; ``""`` for a pattern or ``-``)."""
        return self._shard.file.digest if self._shard is not None and self.url != "-" else ""

    @property
    def raw(self) -> BinaryIO | None:
        """The uncompressed one-file tar stream, for copying members byte for byte (each
        sample announced first with :meth:`raw_sample`); None for other outputs."""
        shard = self._shard
        if shard is None or shard.format != "tar" or shard.gzip:
            return None
        return shard.file  # type: ignore[return-value]

    @property
    def full(self) -> bool:
        """Whether ``max_shards`` shards are committed: stop writing."""
        return self._writer is not None and self._writer.full

    def raw_sample(self, key: str) -> None:
        """Account for a sample the caller is about to copy to :attr:`raw` as raw members
        (the key rule applies)."""
        if self._shard is None:  # pragma: no cover - callers only come here with a raw stream
            raise ConfigError("raw copy needs a one-file tar output")
        self._shard.start_copy(key)
        self.samples += 1

    def raw_run(
        self, keys: Sequence[str], sizes: Sequence[int], emit: Callable[[Write], None]
    ) -> None:
        """Copy a run of whole samples (``keys``, ``sizes`` bytes each) to :attr:`raw`:
        ``emit(write)`` writes their bytes (the key rule applies)."""
        if self._shard is None:  # pragma: no cover - callers only come here with a raw stream
            raise ConfigError("raw copy needs a one-file tar output")
        self._shard.copy_run(keys, sizes, emit)
        self.samples += len(keys)

    def write(self, sample: Mapping[str, Any]) -> None:
        if self.full:
            raise ConfigError("output is full (max_shards reached)")
        if self.format == "tar":
            sample = tar_fields(sample)
        if self._writer is not None:
            if not self._writer.write(sample):  # max_shards committed: not written
                return
        elif self._shard is not None:
            self._shard.write_sample(sample)
        self.samples += 1

    def commit(self) -> None:
        """Finish the output: commit the last shard, or end and commit the file."""
        if self._writer is not None:
            self._writer.commit()
        if self._shard is not None:
            info = self._shard.commit()
            if self._on_shard_fn is not None:
                self._on_shard_fn(info)

    def discard(self) -> None:
        """Discard what is not committed yet."""
        if self._writer is not None:
            self._writer.discard()
        if self._shard is not None:
            self._shard.discard()
