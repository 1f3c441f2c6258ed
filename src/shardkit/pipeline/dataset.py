"""``shardkit.Dataset``: shards from any URL streamed as samples, in webdataset's style.

>>> ds = (
...     Dataset("data/shard-{000000..000147}.tar", seed=7)
...     .shuffle(1000)
...     .decode("rgb8")
...     .to_tuple("jpg;png", "cls")
...     .batched(64)
... )

Each fluent method returns a new Dataset with one more stage (a small picklable
generator transform from :mod:`shardkit.pipeline.stages`); nothing is opened until
iteration, which builds the chain::

    shards -> epoch plan (node, worker, shard shuffle) -> raw samples -> your stages

Splitting by node and by DataLoader worker always happens (see
:mod:`shardkit.pipeline.epochs`). The dataset is a ``torch.utils.data.IterableDataset``
wherever torch is installed, without importing it (:mod:`shardkit.pipeline._torch`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import ConfigError
from ..handlers import Handler, HandlerName, resolve_handler
from ..units import parse_size
from ..writer import Format
from ._torch import register_iterable_dataset
from .chain import Equalize, Recipe
from .collate import Collate
from .context import Context, current_node, current_worker
from .decode import Decode
from .source import ReadOptions
from .stages import (
    Batched,
    Map,
    MapDict,
    MapTuple,
    Rename,
    Select,
    Shuffle,
    Stage,
    ToTuple,
    Unbatched,
    parse_fields,
)
from .state import Position, Progress, check_state
from .urls import ShardList, resolve_source

__all__ = ["Dataset"]

if TYPE_CHECKING:  # for type checkers only: at run time the base is registered, not inherited
    from torch.utils.data import IterableDataset

    _Base = IterableDataset[Any]
else:
    _Base = object


class Dataset(_Base):
    """Samples streamed from shards (tar or TFRecord) at any URL.

    ``source`` is a URL or list of URLs (brace patterns expand), a shard folder, or a
    ``manifest.json`` (:mod:`shardkit.pipeline.urls`). Options:

    * ``seed``: the root of every random choice; with ``epoch`` it fixes the order.
    * ``shuffle_shards``: reshuffle the shard order each epoch. Default: only when the
      pipeline has a ``.shuffle()`` stage.
    * ``equalize``: with per-shard counts (a manifest), every rank yields the same number
      of samples each epoch: ``"pad"`` (repeat, the default there) or ``"drop"``.
    * ``handler``: policy for bad data: ``"raise"`` (default), ``"warn"`` (skip the
      sample), ``"skip"`` (skip the rest of the shard), ``"ignore"`` or a callable.
    * ``format``: ``"tar"`` or ``"tfrecord"``; default from each shard's name.
    * ``node``: ``(rank, world_size)``; default from torch.distributed or the environment.
    * ``storage_options``: fsspec options (endpoint, credentials) for remote URLs.
    * ``cache_dir``: keep a local copy of every remote shard read, reused across runs
      (default: ``$SHARDKIT_CACHE_DIR``, else no cache).
    * ``cache_limit``: bound the cache folder (bytes or ``"200GB"``): whole copies are
      evicted, least recently used first, never one being read.
    * ``verify``: check TFRecord data CRCs.
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        seed: int = 0,
        shuffle_shards: bool | None = None,
        equalize: Equalize | None = None,
        handler: HandlerName | Handler = "raise",
        format: Format | None = None,
        node: tuple[int, int] | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | None = None,
        cache_limit: int | str | None = None,
        verify: bool = True,
    ) -> None:
        if not isinstance(source, str) and not (
            isinstance(source, Sequence) and all(isinstance(u, str) for u in source)
        ):
            raise TypeError(f"source must be a URL or a list of URLs, not {source!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {seed!r}")
        if equalize not in (None, "pad", "drop"):
            raise ConfigError(f"equalize must be 'pad', 'drop' or None, not {equalize!r}")
        if format not in (None, "tar", "tfrecord"):
            raise ConfigError(f"format must be 'tar', 'tfrecord' or None, not {format!r}")
        if node is not None:
            current_node(node)  # validates
        self._source: str | tuple[str, ...] = source if isinstance(source, str) else tuple(source)
        self._seed = seed
        self._handler = resolve_handler(handler)
        self._node = node
        if cache_dir is None:
            cache_dir = config.cache_dir()
        limit = read_cache_limit(cache_dir, cache_limit)
        read = ReadOptions(format, self._handler, verify, storage_options, cache_dir, limit)
        self._recipe = Recipe(read, equalize, shuffle_shards)
        self._shards: ShardList | None = None
        self._epoch = 0
        self._resume: Position | None = None
        self._live: tuple[Progress, Context] | None = None

    # ------------------------------------------------------------------ stages

    def _then(self, stage: Stage | None = None, **changes: Any) -> Dataset:
        new = copy.copy(self)
        stages = self._recipe.stages if stage is None else (*self._recipe.stages, stage)
        new._recipe = dataclasses.replace(self._recipe, stages=stages, **changes)
        new._live = None
        return new

    def _handler_or_default(self, handler: HandlerName | Handler | None) -> Handler:
        return self._handler if handler is None else resolve_handler(handler)

    def shuffle(self, size: int) -> Dataset:
        """Shuffle samples through a buffer of ``size`` (seeded per epoch, rank, worker)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"shuffle() takes a buffer size >= 0, not {size!r}")
        return self._then(Shuffle(size, salt=len(self._recipe.stages))) if size > 1 else self

    def decode(
        self,
        *specs: str | Callable[[str, bytes], Any],
        allow_pickle: bool = False,
        only: str | Sequence[str] | None = None,
        handler: HandlerName | Handler | None = None,
        threads: int | None = None,
    ) -> Dataset:
        """Decode fields: an image spec (``"rgb8"``, ``"torchrgb"``, ``"pil"``, ...) and/or
        custom ``fn(ext, data)`` decoders, then the built-in codecs by extension.

        ``threads``: decode in that many threads (order kept). Default: up to 4 when
        iterating in a single process, 1 inside DataLoader workers or under DDP."""
        from ..codecs import Decoder

        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ConfigError(f"threads must be an int >= 1 or None, not {threads!r}")
        decoder = Decoder(*specs, allow_pickle=allow_pickle, only=only, partial=True)
        return self._then(Decode(decoder, self._handler_or_default(handler), threads))

    def to_tuple(self, *fields: str, handler: HandlerName | Handler | None = None) -> Dataset:
        """Tuples of fields; ``"jpg;png"`` takes the first alternative present."""
        return self._then(ToTuple(parse_fields(fields), self._handler_or_default(handler)))

    def map(
        self, fn: Callable[[Any], Any], *, handler: HandlerName | Handler | None = None
    ) -> Dataset:
        """Apply ``fn`` to each item."""
        _check_callable(fn, "map")
        return self._then(Map(fn, self._handler_or_default(handler)))

    def map_dict(
        self, *, handler: HandlerName | Handler | None = None, **fns: Callable[[Any], Any]
    ) -> Dataset:
        """Apply ``fns[name]`` to field ``name`` of each dict sample."""
        for fn in fns.values():
            _check_callable(fn, "map_dict")
        return self._then(MapDict(dict(fns), self._handler_or_default(handler)))

    def map_tuple(
        self, *fns: Callable[[Any], Any] | None, handler: HandlerName | Handler | None = None
    ) -> Dataset:
        """Apply ``fns[i]`` to position i of each tuple (None: leave it)."""
        for fn in fns:
            if fn is not None:
                _check_callable(fn, "map_tuple")
        return self._then(MapTuple(tuple(fns), self._handler_or_default(handler)))

    def rename(
        self, *, keep: bool = True, handler: HandlerName | Handler | None = None, **names: str
    ) -> Dataset:
        """Rename fields: ``rename(image="jpg;png", label="cls")`` (first name present)."""
        pairs = tuple((new, tuple(old.split(";"))) for new, old in names.items())
        if not pairs or not all(old and all(old) for _, old in pairs):
            raise TypeError(f"rename() takes new=old field names, not {names!r}")
        return self._then(Rename(pairs, keep, self._handler_or_default(handler)))

    def select(self, predicate: Callable[[Any], bool]) -> Dataset:
        """Keep the items for which ``predicate`` is true."""
        _check_callable(predicate, "select")
        return self._then(Select(predicate))

    def batched(self, size: int, *, collate: Collate = "auto", partial: bool = True) -> Dataset:
        """Batches of ``size`` items, collated by ``collate`` (``"auto"``, ``"numpy"``,
        ``"torch"``, None for lists, or a callable); ``partial=False`` drops a short last
        batch."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"batched() takes a batch size >= 1, not {size!r}")
        if collate not in ("auto", "numpy", "torch", None) and not callable(collate):
            raise ConfigError("collate must be 'auto', 'numpy', 'torch', None or a callable")
        return self._then(Batched(size, collate, partial))

    def unbatched(self) -> Dataset:
        """The items of each batch: a tuple or list of columns (what :meth:`batched`
        makes, and a DataLoader passes on) gives tuples, a dict of columns dicts, an
        array or tensor its rows."""
        return self._then(Unbatched())

    def with_epoch(self, samples: int) -> Dataset:
        """Make every epoch exactly ``samples`` samples per rank, reading the shards again
        (freshly shuffled) as often as needed. No counts are needed."""
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ConfigError(f"with_epoch() takes a number of samples >= 1, not {samples!r}")
        return self._then(epoch_size=samples)

    # ------------------------------------------------------------------ epochs

    @property
    def shards(self) -> ShardList:
        """The shard list of the source (read on first use: a manifest or folder listing)."""
        if self._shards is None:
            self._shards = resolve_source(
                self._source, storage_options=self._recipe.read.storage_options
            )
        return self._shards

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next (as ``DistributedSampler.set_epoch``). A position loaded by
        :meth:`load_state_dict` for this same epoch is kept."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch must be an int >= 0, not {epoch!r}")
        if self._resume is not None and self._resume.epoch != epoch:
            self._resume = None
        self._epoch = epoch
        self._live = None

    def __len__(self) -> int:
        """Items this rank yields per epoch, over all its DataLoader workers: exact, and
        independent of the number of workers. Needs per-shard counts (a manifest) or
        :meth:`with_epoch`; raises TypeError otherwise, or after :meth:`select`."""
        return self._recipe.length(self.shards, current_node(self._node)[1])

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        shards = self.shards
        rank, world = current_node(self._node)
        worker, workers = current_worker()
        ctx = Context(self._seed, self._epoch, rank, world, worker, workers)
        resume = self._resume
        if resume is not None:
            resume.check(ctx)  # before it is used up: a refused state stays loaded
            self._resume = None
        progress = Progress(ctx.epoch, resume.consumed if resume else 0)
        self._epoch += 1
        self._live = (progress, ctx)
        if resume is not None and resume.done:
            progress.done = True
            return iter(())
        return self._recipe.build(shards, ctx, progress)

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        """The position of the current (or last) iteration in this process, to resume
        with :meth:`load_state_dict`; a small dict of ints."""
        if self._resume is not None:
            return self._resume.as_dict()
        if self._live is not None:
            progress, ctx = self._live
            return Position(
                progress.epoch, progress.position(), progress.done, ctx.seed, ctx.world, ctx.workers
            ).as_dict()
        _, world = current_node(self._node)
        _, workers = current_worker()
        return Position(self._epoch, 0, False, self._seed, world, workers).as_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next iteration continue where ``state`` was saved: the same epoch,
        the samples not yet yielded, in the same order."""
        position = check_state(state)
        self._resume = position
        self._epoch = position.epoch
        self._live = None

    # ------------------------------------------------------------------ misc

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_live"] = None  # an iteration belongs to its process
        return state

    def __repr__(self) -> str:
        stages = "".join(f".{type(s).__name__.lower()}()" for s in self._recipe.stages)
        return f"Dataset({self._source!r}, seed={self._seed}){stages}"


def read_cache_limit(cache_dir: str | None, cache_limit: int | str | None) -> int | None:
    """``cache_limit`` in bytes (None: no limit); it needs a ``cache_dir``."""
    if cache_limit is None:
        return None
    if cache_dir is None:
        raise ConfigError("cache_limit needs a cache_dir (or $SHARDKIT_CACHE_DIR)")
    return parse_size(cache_limit, name="cache_limit")


def _check_callable(fn: object, method: str) -> None:
    if not callable(fn):
        raise TypeError(f"{method}() takes a callable, not {type(fn).__name__}")


register_iterable_dataset(Dataset)
