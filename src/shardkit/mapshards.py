"""``map_shards``: one task maps one input shard to one output shard, anywhere.

The ``process_shard`` pattern of large dataset jobs: a thousand input shards become a
thousand independent tasks, each reading its shard, transforming every sample and
writing one output shard. Tasks run in local processes, on a Ray cluster or on a Dask
cluster (``engine=``); each output is written atomically (under a temporary name, or as a
direct upload to s3/gs that is discarded on failure), so an output that exists is
complete, and a rerun skips it (resume); each output's ``.idx`` file is written with it
(exact counts at once). The transform sees raw samples (bytes fields plus
``__key__``/``__url__``); what it returns is encoded with :mod:`shardkit.codecs`, so it may
hold str, int, dicts, arrays or images.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, cast

from . import storage
from .digest import DEFAULT_HASH, HashName, check_hash
from .engines import Engine, Executor, check_engine, make_executor
from .errors import ConfigError, ShardkitError
from .formats.record import ShardInfo
from .storage import LOCAL, Access, StorageOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["ShardResult", "map_shards"]

Sample = dict[str, Any]
SampleFn = Callable[[Sample], Mapping[str, Any] | None]
Transform = Callable[[Iterator[Sample]], Iterable[Mapping[str, Any]]]


@dataclass(frozen=True)
class ShardResult:
    """One output shard: its input, the samples read, and the output's record
    (:class:`~shardkit.formats.record.ShardInfo`: samples written, size and digest,
    ``ALGO:HEX``, :mod:`shardkit.digest`; ``""`` with ``hash="none"``).

    ``resumed`` outputs existed already and were left alone (their counts and digest are
    ``None``; their record holds only the size).
    """

    input: str
    shard: ShardInfo
    samples_in: int | None
    resumed: bool = False

    @property
    def output(self) -> str:
        return self.shard.url

    @property
    def samples_out(self) -> int | None:
        return None if self.resumed else self.shard.samples

    @property
    def bytes(self) -> int:
        return self.shard.bytes

    @property
    def digest(self) -> str | None:
        return None if self.resumed else self.shard.digest


class MapOptions(TypedDict, total=False):
    """The keywords of :func:`map_shards`: where its tasks run (``engine``, ``address``,
    ``workers``), how storage is reached (``storage_options``), who hears of each output
    (``progress``) and each output's digest (``hash``)."""

    engine: Engine
    address: str | None
    workers: int | None
    storage_options: Access | StorageOptions | None
    progress: Callable[[ShardResult], None] | None
    hash: HashName


@dataclass(frozen=True)
class MapRun:
    """A map's settings (:class:`MapOptions`, resolved once: :meth:`of`)."""

    engine: Engine = "local"
    address: str | None = None
    workers: int | None = None
    access: Access = LOCAL
    progress: Callable[[ShardResult], None] | None = None
    hash: HashName = DEFAULT_HASH

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> MapRun:
        """The settings :func:`map_shards` was given; any other keyword is a TypeError."""
        for name in options:
            if name not in _MAP_KEYWORDS:
                raise TypeError(f"map_shards() got an unexpected keyword argument {name!r}")
        given = {name: value for name, value in options.items() if name != "storage_options"}
        return cls(access=Access.of(options.get("storage_options")), **given)


_MAP_KEYWORDS = frozenset(cast(Any, MapOptions).__optional_keys__)


@dataclass(frozen=True)
class _Task:
    transform: Transform
    input: str
    output: str
    access: Access
    hash: str = DEFAULT_HASH
    index: bool = True


def _each(fn: SampleFn, samples: Iterator[Sample]) -> Iterator[Mapping[str, Any]]:
    for sample in samples:
        out = fn(sample)
        if out is not None:
            yield out


def _counted(samples: Iterator[Sample], count: list[int]) -> Iterator[Sample]:
    for sample in samples:
        count[0] += 1
        yield sample


def run_shard(task: _Task) -> ShardResult:
    """Read ``task.input``, transform, write ``task.output`` atomically (a worker task)."""
    from .formats.names import format_from_name
    from .reader import read_shard
    from .writer import ShardFile

    kind, gz = format_from_name(task.output)
    read = [0]
    shard = ShardFile.open(
        task.output,
        kind,
        gzip=gz,
        index=task.index,
        access=task.access,
        hash=task.hash,
    )
    try:
        samples = _counted(read_shard(task.input, storage_options=task.access), read)
        try:
            for sample in task.transform(samples):
                shard.write_sample(sample, codecs=True)
        except Exception as exc:
            raise _located(exc, task.input, shard.last_key) from None
        info = shard.commit()
    except BaseException:
        shard.discard()
        raise
    return ShardResult(task.input, info, read[0])


def _located(exc: Exception, url: str, key: str | None) -> Exception:
    """The same exception, saying which shard (and last sample) it came from."""
    if isinstance(exc, ShardkitError):
        exc.url = exc.url or url
        exc.key = exc.key or key
    else:
        exc.add_note(f"in shard {url}" + (f", after sample {key!r}" if key else ""))
    return exc


def map_shards(
    fn: SampleFn,
    inputs: str | Sequence[str],
    outputs: str | Sequence[str],
    **options: Unpack[MapOptions],
) -> list[ShardResult]:
    """Apply ``fn`` to every sample of every input shard; input *i* -> output *i*.

    ``inputs`` is a source as :class:`~shardkit.Dataset` reads it (a folder, a
    ``manifest.json``, a brace pattern ``in-{000000..000999}.tar``, a list of URLs; see
    :mod:`shardkit.pipeline._urls`); ``outputs`` a list of the same length or a pattern
    (``out/s-%06d.tar``, filled with the input's position). ``fn`` returns the output
    sample, or None to drop it; it must pickle (a module-level function). ``engine``
    ``"local"`` uses ``workers`` processes; ``"ray"``/``"dask"`` use the cluster at
    ``address``. Outputs that already exist are complete (writes are atomic) and are
    skipped. ``hash`` names each output's digest algorithm (:mod:`shardkit.digest`);
    ``storage_options`` are fsspec's, for remote inputs and outputs; ``progress`` gets each
    :class:`ShardResult` as its task ends (the keywords: :class:`MapOptions`).
    Returns one result per input, in order.
    """
    return map_shard_streams(functools.partial(_each, fn), inputs, outputs, MapRun.of(options))


def map_shard_streams(
    transform: Transform,
    inputs: str | Sequence[str],
    outputs: str | Sequence[str],
    run: MapRun,
) -> list[ShardResult]:
    """:func:`map_shards` with a transform of a whole shard's sample stream."""
    check_engine(run.engine, run.address)
    check_hash(run.hash)
    from .pipeline import resolve_source  # the one resolver: what Dataset reads

    sources = resolve_source(inputs, storage_options=run.access, counts=False).urls
    targets = _outputs(outputs, len(sources))
    results: dict[int, ShardResult] = {}
    pending: list[tuple[int, _Task]] = []
    for i, (src, dst) in enumerate(zip(sources, targets, strict=True)):
        if storage.url_exists(dst, run.access):
            kept = ShardInfo.at(dst, 0, _size(dst, run.access), "", i)
            results[i] = ShardResult(src, kept, None, resumed=True)
        else:
            pending.append((i, _Task(transform, src, dst, run.access, run.hash)))
    if pending:
        _run_all(pending, results, run)
    return [results[i] for i in range(len(sources))]


def _outputs(outputs: str | Sequence[str], count: int) -> list[str]:
    if isinstance(outputs, str):
        from .formats.names import shard_name

        return [shard_name(outputs, i) for i in range(count)]
    targets = list(outputs)
    if len(targets) != count:
        raise ConfigError(f"{count} inputs but {len(targets)} outputs: give one output per input")
    if len(set(targets)) != count:
        raise ConfigError("two inputs map to the same output")
    return targets


def _size(url: str, access: Access) -> int:
    fs, path = storage.filesystem(url, access)
    return int(fs.size(path))


def _run_all(
    pending: list[tuple[int, _Task]], results: dict[int, ShardResult], run: MapRun
) -> None:
    executor = _executor(run.engine, run.address, run.workers, len(pending))
    inflight: dict[Future[ShardResult], int] = {}
    todo = iter(pending)
    try:
        while True:
            while len(inflight) < 2 * executor.workers and (item := next(todo, None)):
                inflight[executor.submit(run_shard, item[1])] = item[0]
            if not inflight:
                break
            done, _ = wait(inflight, return_when=FIRST_COMPLETED)
            for future in done:
                results[inflight.pop(future)] = result = future.result()
                if run.progress is not None:
                    run.progress(result)
    except BaseException:
        executor.close(cancel=True)
        raise
    executor.close()


def _executor(engine: Engine, address: str | None, workers: int | None, tasks: int) -> Executor:
    from . import config

    count = min(workers or config.default_workers(), tasks) if engine == "local" else 1
    return make_executor(engine, address, workers=count, preload=[__name__])
