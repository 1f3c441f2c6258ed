"""``shardkit.Dataset``: shards from any URL streamed as samples, in webdataset's style.

>>> ds = (
...     Dataset("data/shard-{000000..000147}.tar", seed=7)
...     .shuffle(1000)
...     .decode("rgb8")
...     .to_tuple("jpg;png", "cls")
...     .batched(64)
... )

Each fluent method returns a new Dataset with one more stage (a small picklable
generator transform from :mod:`shardkit.pipeline._stages`); nothing is opened until
iteration, which builds the chain::

    shards -> epoch plan (node, worker, shard shuffle) -> raw samples -> your stages

Splitting by node and by DataLoader worker always happens (see
:mod:`shardkit.pipeline._epochs`). The dataset is a ``torch.utils.data.IterableDataset``
wherever torch is installed, without importing it (:mod:`shardkit.pipeline._torch`).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import ConfigError
from ..formats.names import FORMATS, Format
from ..handlers import Handler, HandlerName, resolve_handler
from ..storage import Access, StorageOptions
from ..units import parse_size
from . import _elastic as elastic
from ._chain import Equalize, Recipe
from ._collate import Collate
from ._compat import UNSET, dataset_options, one_of, refuse
from ._context import Context, current_node, current_worker, in_worker_process, node_for_pickle
from ._counting import Slice, Take, Unbatched
from ._decode import Decode
from ._handoff import Handoff
from ._source import ReadOptions
from ._stages import (
    Batched,
    Map,
    MapDict,
    MapTuple,
    Rename,
    Select,
    Shuffle,
    Stage,
    ToTuple,
    parse_fields,
)
from ._state import Position, Progress, check_state, check_states, fingerprint
from ._torch import register_iterable_dataset
from ._urls import ShardList, resolve_source

__all__ = ["Dataset"]

if TYPE_CHECKING:  # for type checkers only: at run time the base is registered, not inherited
    from torch.utils.data import IterableDataset

    _Base = IterableDataset[Any]
else:
    _Base = object


class Dataset(_Base):
    """Samples streamed from shards (tar or TFRecord) at any URL.

    ``source`` is a URL or list of URLs (brace patterns expand), a shard folder, or a
    ``manifest.json`` (:mod:`shardkit.pipeline._urls`). Options:

    * ``seed``: the root of every random choice; with ``epoch`` it fixes the order
      (None, webdataset's default, is 0: the order is always seeded).
    * ``shuffle_shards``: reshuffle the shard order each epoch. Default: only when the
      pipeline has a ``.shuffle()`` stage.
    * ``equalize``: with per-shard counts (a manifest), every rank yields the same number
      of samples each epoch: ``"pad"`` (repeat, the default there) or ``"drop"``.
    * ``handler``: policy for bad data (:mod:`shardkit.handlers`): ``"raise"`` (default),
      ``"warn"`` or ``"skip"`` (drop the bad sample, logged), ``"ignore"`` (the same, not
      logged), ``"warn_and_stop"`` / ``"ignore_and_stop"`` (drop the rest of the shard),
      or a callable.
    * ``format``: ``"tar"`` or ``"tfrecord"``; default from each shard's name.
    * ``node``: ``(rank, world_size)``; default from torch.distributed or the environment.
    * ``storage_options``: fsspec options (endpoint, credentials) for remote URLs.
    * ``cache_dir``: keep a local copy of every remote shard read, reused across runs
      (default: ``$SHARDKIT_CACHE_DIR``, else no cache).
    * ``cache_limit``: bound the cache folder (bytes or ``"200GB"``): whole copies are
      evicted, least recently used first, never one being read.
    * ``verify``: check TFRecord data CRCs.
    * ``copy``: ``False`` makes the fields of samples read from local uncompressed tar
      shards memoryviews of the memory-mapped shard instead of ``bytes`` (no copy; see
      :func:`shardkit.reader.read_shard`). ``decode`` takes them; a view cannot be
      pickled, so turn fields into values before they leave the process (a DataLoader
      worker's samples are pickled).

    webdataset's ``shardshuffle=``, ``resampled=``, ``nodesplitter=``, ``workersplitter=``
    and ``empty_check=`` are accepted with webdataset's meaning where shardkit has the
    feature; the others raise :class:`ConfigError` naming the shardkit way
    (:mod:`shardkit.pipeline._compat`).
    """

    def __init__(
        self,
        source: str | Sequence[str],
        *,
        seed: int | None = 0,
        shuffle_shards: bool | None = None,
        equalize: Equalize | None = None,
        handler: HandlerName | Handler = "raise",
        format: Format | None = None,
        node: tuple[int, int] | None = None,
        storage_options: Access | StorageOptions | None = None,
        cache_dir: str | None = None,
        cache_limit: int | str | None = None,
        verify: bool = True,
        copy: bool = True,
        **webdataset: Any,
    ) -> None:
        if not isinstance(source, str) and not (
            isinstance(source, Sequence) and all(isinstance(u, str) for u in source)
        ):
            raise TypeError(f"source must be a URL or a list of URLs, not {source!r}")
        if seed is None:
            seed = 0  # webdataset's default; shardkit's order is always seeded
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {seed!r}")
        if equalize not in (None, "pad", "drop"):
            raise ConfigError(f"equalize must be 'pad', 'drop' or None, not {equalize!r}")
        if format is not None and format not in FORMATS:
            raise ConfigError(f"format must be 'tar', 'tfrecord' or None, not {format!r}")
        if not isinstance(copy, bool):
            raise TypeError(f"copy must be True or False, not {copy!r}")
        wds = dataset_options(webdataset, shuffle_shards=shuffle_shards, node=node)
        node = wds["node"]
        if node is not None:
            current_node(node)  # validates
        self._source: str | tuple[str, ...] = source if isinstance(source, str) else tuple(source)
        self._seed = seed
        self._handler = resolve_handler(handler)
        self._node = node
        self._carried: tuple[int, int] | None = None  # the node of the DataLoader's process
        if cache_dir is None:
            cache_dir = config.cache_dir()
        limit = read_cache_limit(cache_dir, cache_limit)
        access = Access.of(storage_options)
        read = ReadOptions(format, self._handler, verify, access, cache_dir, limit, copy)
        self._recipe = Recipe(
            read,
            equalize,
            wds["shuffle_shards"],
            passes=wds["passes"],
            empty_check=wds["empty_check"],
        )
        self._shards: ShardList | None = None
        self._epoch = 0
        self._resume: Position | tuple[Position, ...] | None = None
        self._live: tuple[Progress, Context] | None = None
        self._handoff = Handoff()
        self._identity: str | None = None

    # ------------------------------------------------------------------ stages

    def _then(self, stage: Stage | None = None, **changes: Any) -> Dataset:
        new = copy.copy(self)
        stages = self._recipe.stages if stage is None else (*self._recipe.stages, stage)
        new._recipe = dataclasses.replace(self._recipe, stages=stages, **changes)
        new._live = None
        new._handoff = Handoff()
        new._identity = None
        return new

    def _handler_or_default(self, handler: HandlerName | Handler | None) -> Handler:
        return self._handler if handler is None else resolve_handler(handler)

    def shuffle(
        self, size: int, *, initial: int | None = None, seed: int | None = None, **other: Any
    ) -> Dataset:
        """Shuffle samples through a buffer of ``size`` (seeded per epoch, rank, worker).

        ``initial``: start yielding once the buffer holds that many (default: ``size``);
        ``seed``: mixed into the seed of this buffer (webdataset's arguments)."""
        if other:
            name = next(iter(other))
            way = (
                "shardkit seeds every buffer from (seed, epoch, rank, worker); pass seed="
                if name == "rng"
                else "it takes size, initial= and seed="
            )
            raise refuse("shuffle", name, way)
        _check_count(size, "shuffle() takes a buffer size", 0)
        if initial is not None:
            _check_count(initial, "shuffle(initial=) takes a number of items", 1)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"shuffle(seed=) takes an int, not {seed!r}")
        if size <= 1:
            return self
        salt = (
            f"{len(self._recipe.stages)}" if seed is None else f"{len(self._recipe.stages)}:{seed}"
        )
        return self._then(Shuffle(size, salt=salt, initial=min(initial or size, size)))

    def decode(
        self,
        *specs: str | Callable[[str, bytes], Any],
        allow_pickle: bool = False,
        only: str | Sequence[str] | None = None,
        handler: HandlerName | Handler | None = None,
        threads: int | None = None,
        partial: bool = True,
        **other: Any,
    ) -> Dataset:
        """Decode fields: an image spec (``"rgb8"``, ``"torchrgb"``, ``"pil"``, ...) and/or
        custom ``fn(ext, data)`` decoders, then the built-in codecs by extension.

        ``threads``: decode in that many threads (order kept). Default: one per usable
        core (at most 8) when iterating in a single process, 1 inside DataLoader workers or
        under DDP.
        ``partial=False``: a field that is no longer bytes raises TypeError (webdataset's
        default) instead of passing through. ``handler`` given here takes whatever a custom
        decoder raises too, not only bad data (webdataset's habit)."""
        from ..codecs import Decoder

        if other:
            name = next(iter(other))
            raise refuse("decode", name, "transform samples before or after it with .map(fn)")
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ConfigError(f"threads must be an int >= 1 or None, not {threads!r}")
        decoder = Decoder(*specs, allow_pickle=allow_pickle, only=only, partial=bool(partial))
        return self._then(
            Decode(decoder, self._handler_or_default(handler), threads, handler is not None)
        )

    def to_tuple(
        self,
        *fields: str,
        handler: HandlerName | Handler | None = None,
        missing_is_error: bool = True,
        none_is_error: bool | None = None,
    ) -> Dataset:
        """Tuples of fields; ``"jpg;png"`` takes the first alternative present.

        A missing field is bad data (to the handler) unless ``missing_is_error=False``,
        which puts None in its place; ``none_is_error=True`` makes a None value (a missing
        field, or a JSON null) bad data, as in webdataset. Unlike webdataset's, the default
        lets a None value through, as shardkit always has."""
        none = False if none_is_error is None else none_is_error
        return self._then(
            ToTuple(
                parse_fields(fields),
                self._handler_or_default(handler),
                bool(missing_is_error),
                bool(none),
            )
        )

    def map(
        self, fn: Callable[[Any], Any], *, handler: HandlerName | Handler | None = None
    ) -> Dataset:
        """Apply ``fn`` to each item. ``handler``: this stage's own policy; given here,
        it takes whatever ``fn`` raises too (webdataset's habit), not only bad data."""
        _check_callable(fn, "map")
        return self._then(Map(fn, self._handler_or_default(handler), handler is not None))

    def map_dict(
        self, *, handler: HandlerName | Handler | None = None, **fns: Callable[[Any], Any]
    ) -> Dataset:
        """Apply ``fns[name]`` to field ``name`` of each dict sample."""
        for fn in fns.values():
            _check_callable(fn, "map_dict")
        return self._then(
            MapDict(dict(fns), self._handler_or_default(handler), handler is not None)
        )

    def map_tuple(
        self, *fns: Callable[[Any], Any] | None, handler: HandlerName | Handler | None = None
    ) -> Dataset:
        """Apply ``fns[i]`` to position i of each tuple (None: leave it)."""
        for fn in fns:
            if fn is not None:
                _check_callable(fn, "map_tuple")
        return self._then(
            MapTuple(tuple(fns), self._handler_or_default(handler), handler is not None)
        )

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

    def batched(
        self,
        size: int = UNSET,
        collate: Collate = UNSET,
        partial: bool = True,
        *,
        batchsize: int = UNSET,
        collation_fn: Collate = UNSET,
    ) -> Dataset:
        """Batches of ``size`` items, collated by ``collate`` (``"auto"``, ``"numpy"``,
        ``"torch"``, None for lists, or a callable); ``partial=False`` drops a short last
        batch. webdataset's ``batchsize=`` and ``collation_fn=`` are the same options (and
        ``collate`` may be passed second, as webdataset's ``collation_fn``)."""
        size = one_of("batched", size=size, batchsize=batchsize)
        collate = one_of("batched", collate=collate, collation_fn=collation_fn)
        if size is UNSET:
            raise ConfigError("batched() takes a batch size: .batched(64)")
        _check_count(size, "batched() takes a batch size", 1)
        collate = "auto" if collate is UNSET else collate
        if collate not in ("auto", "numpy", "torch", None) and not callable(collate):
            raise ConfigError("collate must be 'auto', 'numpy', 'torch', None or a callable")
        return self._then(Batched(size, collate, partial))

    def unbatched(self, *, handler: HandlerName | Handler | None = None) -> Dataset:
        """Batches back into items (the inverse of :meth:`batched`)."""
        return self._then(Unbatched(self._handler_or_default(handler)))

    def slice(self, *args: int | None) -> Dataset:
        """``itertools.islice(items, *args)`` of each stream: ``slice(stop)`` or
        ``slice(start, stop[, step])``. As in webdataset it applies to each DataLoader
        worker's stream (to cap a rank's epoch, use :meth:`with_epoch`)."""
        try:
            bounds = slice(*args)
            start, stop = bounds.start or 0, bounds.stop
            step = 1 if bounds.step is None else bounds.step
        except TypeError as exc:
            raise ConfigError(f"slice() takes (stop) or (start, stop[, step]): {exc}") from None
        for value in (start, step) if stop is None else (start, stop, step):
            _check_count(value, "slice() takes ints >= 0", 0)
        if step < 1:
            raise ConfigError(f"slice() takes a step >= 1, not {step}")
        return self._then(Slice(start, stop, step))

    def with_epoch(
        self, samples: int = UNSET, *, nsamples: int = UNSET, nbatches: int = UNSET
    ) -> Dataset:
        """End every epoch after exactly ``samples`` items *at this position* per rank
        (samples, or batches after :meth:`batched`), reading the shards pass after pass
        (each pass freshly shuffled) as long as needed. No counts are needed.
        webdataset's ``nsamples=`` / ``nbatches=`` are the same number."""
        samples = one_of("with_epoch", samples=samples, nsamples=nsamples, nbatches=nbatches)
        if samples is UNSET:
            raise ConfigError("with_epoch() takes the number of items per epoch: .with_epoch(n)")
        _check_count(samples, "with_epoch() takes a number of items", 1)
        if self._recipe.take is not None:
            raise ConfigError("with_epoch() is already set for this dataset: call it once")
        return self._then(Take(samples))

    def repeat(self, nepochs: int | None = None, nbatches: int | None = None) -> Dataset:
        """Read the shards ``nepochs`` times per epoch (None or -1: endlessly), each pass
        freshly shuffled; ``nbatches``: end the epoch after that many items here, as
        :meth:`with_epoch`. The stages see one continuous stream (a batch may span two
        passes)."""
        if nepochs is not None and nepochs != -1:
            _check_count(nepochs, "repeat() takes a number of passes", 1)
        ds = self._then(passes=None if nepochs in (None, -1) else nepochs)
        if nbatches is not None and nbatches != -1:
            if nepochs not in (None, -1):
                raise ConfigError(
                    "repeat(nepochs, nbatches) with both: use .repeat(nepochs) or "
                    ".with_epoch(nbatches), not both at once"
                )
            ds = ds.with_epoch(nbatches)
        return ds

    def with_length(self, n: int, silent: bool = False) -> Dataset:
        """Make ``len()`` return ``n`` (only ``len()``: the epoch is unchanged), for code
        that needs a length where shardkit cannot know one (as webdataset's)."""
        _check_count(n, "with_length() takes a length", 0)
        return self._then(length_override=n)

    def pack(self, seq_len: int, *, drop_last: bool = False, shuffle: bool = True) -> Dataset:
        """Token documents (token shards, or a Megatron ``.bin``) packed into items of
        ``seq_len`` tokens: dicts of ``input_ids`` and ``position_ids`` (see
        :mod:`shardkit.pipeline._pack` and docs/tokens.md). ``shuffle``: the documents'
        order is shuffled by seed and epoch; ``drop_last``: drop the one short item."""
        from ._pack import packed

        return packed(self, seq_len, drop_last=drop_last, shuffle=shuffle)

    # ------------------------------------------------------------------ epochs

    @property
    def shards(self) -> ShardList:
        """The shard list of the source (read on first use: a manifest or folder listing)."""
        if self._shards is None:
            from ..formats.names import is_megatron

            if is_megatron(self._source):  # not a tar shard: read as one, it is "truncated"
                raise ConfigError(
                    "a Megatron .bin (with its .idx) is read through .pack(seq_len), e.g. "
                    "Dataset(path).pack(2048)",
                    url=str(self._source),
                )
            read = self._recipe.read  # its index cache keeps the tables of the counts
            self._shards = resolve_source(
                self._source, storage_options=read.access, indexes=read.indexes
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
        if self._resume is not None and _epoch_of(self._resume) != epoch:
            self._resume = None
        self._epoch = epoch
        self._live = None

    def __len__(self) -> int:
        """Items this rank yields per epoch, over all its DataLoader workers: exact, and
        independent of the number of workers. Needs per-shard counts (a manifest) or
        :meth:`with_epoch`; raises TypeError otherwise, or after :meth:`select`."""
        rank, world = self._rank_and_world()
        return self._recipe.length(self.shards, world, rank)

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        return self._iterate()

    def _iterate(self, *, worker_shift: int = 0) -> Iterator[Any]:
        """One epoch's items. DataLoader worker w reads stream (w + ``worker_shift``) %
        workers: a :class:`~shardkit.Loader` resumed after a batch of stream k starts its
        round robin at stream k + 1, as the epoch would have."""
        shards = self.shards
        rank, world = self._rank_and_world()
        worker, workers = current_worker()
        worker = (worker + worker_shift) % workers
        if in_worker_process():
            self._handoff.mark()  # the parent's copy no longer knows the position
        else:
            self._handoff = Handoff()  # this process iterates: its position is the one
        ctx = Context(self._seed, self._epoch, rank, world, worker, workers)
        resume = self._resume_for(ctx)
        if resume is not None:
            self._check_resume(resume, ctx)  # before it is used up: a refused state stays loaded
            self._resume = None
        progress = Progress(ctx.epoch, resume.consumed if resume else 0)
        progress.space = resume.space if resume else None
        self._epoch += 1
        self._live = (progress, ctx)
        if resume is not None and resume.done:
            progress.done = True
            return iter(())
        return self._recipe.build(shards, ctx, progress, resume.tallies if resume else ())

    # ------------------------------------------------------------------ resume

    def state_dict(self) -> dict[str, Any]:
        """The position of the current (or last) iteration in this process, to resume
        with :meth:`load_state_dict`; a small dict of ints.

        Raises :class:`ConfigError` when DataLoader worker processes iterate this dataset:
        their positions are not in this process (use torchdata's ``StatefulDataLoader``,
        which saves each worker's state)."""
        if self._handoff.is_set() and not in_worker_process():
            raise ConfigError(
                "ds.state_dict(): DataLoader worker processes read this dataset, so this "
                "process does not know the position; save loader.state_dict() of "
                "shardkit.Loader(ds, ...) or torchdata's StatefulDataLoader instead "
                "(docs/reading.md, Mid-epoch resume)"
            )
        rank, world = self._rank_and_world()
        worker, workers = current_worker()
        if self._resume is not None:
            ctx = Context(self._seed, self._epoch, rank, world, worker, workers)
            return (self._resume_for(ctx) or self._resume).as_dict()  # type: ignore[union-attr]
        if self._live is not None:
            progress, ctx = self._live
            return Position.of_stream(
                ctx,
                epoch=progress.epoch,
                consumed=progress.position(),
                done=progress.done,
                tallies=progress.tally_positions(),
                space=progress.space,
                dataset=self._fingerprint(),
            ).as_dict()
        return self._start(Context(self._seed, self._epoch, rank, world, worker, workers)).as_dict()

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Make the next iteration continue where ``state`` was saved: the same epoch,
        the samples not yet yielded, in the same order.

        ``state`` may be a list: the states of every stream (rank and worker) of the
        saved run. A stream of the same topology then continues its own saved position;
        on another topology (elastic resume, :mod:`shardkit.pipeline._elastic`) the
        samples no saved stream handed out are split over the new streams."""
        position: Position | tuple[Position, ...]
        if isinstance(state, Sequence) and not isinstance(state, (str, bytes)):
            position = check_states(state)
        else:
            position = check_state(state)
        self._resume = position
        self._handoff = Handoff()
        self._epoch = _epoch_of(position)
        self._live = None

    def _stream_states(self, workers: int) -> list[dict[str, Any]]:
        """The state of each of this rank's ``workers`` streams before it yields anything
        (for :class:`~shardkit.pipeline._loader.Loader`)."""
        rank, world = self._rank_and_world()
        out = []
        for worker in range(workers):
            ctx = Context(self._seed, self._epoch, rank, world, worker, workers)
            loaded = self._resume_for(ctx)
            if loaded is not None:
                self._check_resume(loaded, ctx)  # here, in the main process, not in a worker
            out.append((loaded or self._start(ctx)).as_dict())
        return out

    def _start(self, ctx: Context) -> Position:
        """The position of stream ``ctx`` before it yields anything."""
        return Position.of_stream(
            ctx,
            epoch=ctx.epoch,
            consumed=0,
            done=False,
            dataset=self._fingerprint(),
        )

    def _fingerprint(self) -> str:
        """What this pipeline's states name (:meth:`Recipe.identity`), computed once."""
        if self._identity is None:
            self._identity = fingerprint(self._recipe.identity(self.shards))
        return self._identity

    def _check_resume(self, position: Position, ctx: Context) -> None:
        """Refuse a loaded position that is not of this iteration: the topology and seed,
        the pipeline it names, its space and its count against this epoch's."""
        position.check(ctx)
        counts = self.shards.counts
        position.check_belongs(self._fingerprint(), None if counts is None else sum(counts))
        position.check_consumed(self._recipe.stream_bound(self.shards, ctx, position.space))

    def _resume_for(self, ctx: Context) -> Position | None:
        """The loaded position of stream ``ctx``: its own saved one, else (elastic) the
        samples that the saved streams left, split the way of ``ctx``'s topology."""
        resume = self._resume
        if not isinstance(resume, tuple):
            return resume
        for p in resume:
            if (p.seed, p.world, p.workers, p.rank, p.worker) == (
                ctx.seed,
                ctx.world,
                ctx.workers,
                ctx.rank,
                ctx.worker,
            ):
                return p
        first = resume[0]
        if first.seed != ctx.seed:
            first.check(ctx)  # the one-line error for another seed
        total = sum(self.shards.counts or ())
        first.check_belongs(self._fingerprint(), total if self.shards.counts else None)
        why = self._recipe.elastic_refusal(self.shards)
        if why:
            raise ConfigError(
                f"cannot resume a state of {first.world} ranks x {first.workers} workers on "
                f"{ctx.world} x {ctx.workers}: {why}"
            )
        mode = self._recipe.mode(self.shards)
        granularity = self._recipe.granularity(self._recipe.stages)
        space = elastic.merge(resume, total, mode, granularity)
        done = all(p.done for p in resume)
        return Position.of_stream(
            ctx,
            epoch=first.epoch,
            consumed=0,
            done=done,
            space=space,
            dataset=self._fingerprint(),
        )

    # ------------------------------------------------------------------ misc

    def _rank_and_world(self) -> tuple[int, int]:
        """(rank, world size) of this dataset here: ``node=``, else the process group of
        this process, else (in a DataLoader worker) the node carried from the parent."""
        return current_node(self._node, carried=self._carried)

    def _carry_node(self) -> tuple[int, int]:
        """Resolve the node here, where the DataLoader lives, for its workers to use."""
        self._carried = node = self._rank_and_world()
        return node

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_live"] = None  # an iteration belongs to its process
        state["_carried"] = node_for_pickle(self._node, self._carried)
        return state

    def __repr__(self) -> str:
        stages = "".join(f".{_method(type(s).__name__)}()" for s in self._recipe.stages)
        return f"Dataset({self._source!r}, seed={self._seed}){stages}"


def _epoch_of(resume: Position | tuple[Position, ...]) -> int:
    return (resume[0] if isinstance(resume, tuple) else resume).epoch


def _method(stage: str) -> str:
    """The Dataset method that adds a stage of this class."""
    return "with_epoch" if stage == "Take" else re.sub(r"(?<!^)([A-Z])", r"_\1", stage).lower()


def _check_count(value: object, what: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{what} >= {least}, not {value!r}")


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
