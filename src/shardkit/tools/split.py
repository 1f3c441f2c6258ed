"""``split``: cut a stream of samples into shards (atomic, rotated by count and size)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..digest import DEFAULT_HASH, HashName
from ..errors import ConfigError
from ..formats.names import Format, check_pattern, format_from_name, is_pattern
from ..formats.record import ShardInfo
from ..storage import Access, StorageOptions
from ..units import Size
from ._inputs import Inputs, as_refs, iter_samples
from ._outputs import Output, prepare_output
from ._rawsplit import raw_shards, split_raw
from ._settings import OnShard, ToolRun, WriteOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["split", "write_shards"]

logger = logging.getLogger(__name__)


def write_shards(
    samples: Iterable[dict[str, Any]],
    pattern: str,
    *,
    max_count: int | None = None,
    max_size: Size | None = None,
    max_shards: int | None = None,
    format: Format | None = None,
    storage_options: Access | StorageOptions | None = None,
    on_shard: OnShard | None = None,
    hash: HashName = DEFAULT_HASH,
) -> list[ShardInfo]:
    """Write ``samples`` to shards named by ``pattern``; returns the committed shards.

    A shard is full at ``max_count`` samples or when the next sample would take it over
    ``max_size`` bytes. With ``max_shards``, writing stops once that many shards are full;
    the rest of the input is not read. ``hash`` names each shard's digest algorithm
    (:mod:`shardkit.digest`).
    """
    run = ToolRun(Access.of(storage_options), hash=hash, on_shard=on_shard)
    return _written(samples, pattern, run, (max_count, max_size, max_shards), format)


Limits = tuple[int | None, Size | None, int | None]
"""``max_count``, ``max_size`` and ``max_shards`` of a shard pattern."""


def _written(
    samples: Iterable[dict[str, Any]],
    pattern: str,
    run: ToolRun,
    limits: Limits,
    format: Format | None,
) -> list[ShardInfo]:
    """:func:`write_shards`: each shard reported to ``run.on_shard`` as the next is begun."""
    max_count, max_size, max_shards = limits
    if not is_pattern(pattern):
        raise ConfigError(
            f"output {pattern!r} needs a shard number placeholder: e.g. out/shard-%06d.tar"
        )
    if max_count is None and max_size is None:
        raise ConfigError("give max_count and/or max_size (--max-count, --max-size)")
    on_shard = run.on_shard
    quiet = replace(run, on_shard=None)  # reported here, in the loop
    out = Output(
        pattern, quiet, format=format, max_count=max_count, max_size=max_size, max_shards=max_shards
    )
    reported = 0
    with out:
        for sample in samples:
            out.write(sample)
            if on_shard is not None:
                while reported < len(out.shards):
                    on_shard(out.shards[reported])
                    reported += 1
            if out.full:
                logger.info("stopped after %d shards (max_shards)", len(out.shards))
                break
    if on_shard is not None:
        for info in out.shards[reported:]:
            on_shard(info)
    return out.shards


def split(
    inputs: Inputs,
    pattern: str,
    *,
    max_count: int | None = None,
    max_size: Size | None = None,
    max_shards: int | None = None,
    format: Format | None = None,
    sha256: bool | None = None,
    **options: Unpack[WriteOptions],
) -> list[ShardInfo]:
    """Read ``inputs`` (URLs, folders, ``-``) and write their samples to shards.

    Tar into uncompressed tar copies each sample's members as they are (their original
    headers kept); any other combination re-encodes samples through ShardWriter.
    ``hash`` names each shard's digest algorithm (:mod:`shardkit.digest`); ``"none"``
    skips hashing (``ShardInfo.digest`` is then empty). ``sha256=True``/``False`` is the
    older spelling of ``hash="sha256"``/``"none"``. ``storage_options``, ``on_shard``,
    ``progress``: :class:`~shardkit.tools._settings.WriteOptions`."""
    run = ToolRun.of("split", options)
    if sha256 is not None:
        run = replace(run, hash="sha256" if sha256 else "none")
    limits = (max_count, max_size, max_shards)
    check_pattern(pattern, option="output")
    refs = as_refs(inputs, run.access)
    kind, gz = format_from_name(pattern)
    if (format or kind) == "tar" and not gz and all(ref.format == "tar" for ref in refs):
        if max_count is None and max_size is None:
            raise ConfigError("give max_count and/or max_size (--max-count, --max-size)")
        prepare_output(pattern)
        sink = raw_shards(pattern, *limits, run=run)
        return split_raw(run.track(refs), sink)
    return _written(iter_samples(run.track(refs)), pattern, run, limits, format)
