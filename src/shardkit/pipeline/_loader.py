"""``shardkit.Loader``: a torch ``DataLoader`` over a :class:`Dataset` whose position,
workers included, is one ``state_dict()``; and stages run in the main process after it.

Each worker hands every batch on with its stream's ``ds.state_dict()`` (a small dict of
ints); the loader keeps, per worker, the state that came with the last batch it yielded
(so prefetched batches never count) and which worker's batch comes next.
``load_state_dict()`` gives the dataset the states of all its streams: on the same
topology each worker continues its own stream and the round robin of workers continues
where it was, so the rest of the epoch is exactly the uninterrupted one; on another
topology (other ranks or workers, states gathered from every rank) the epoch continues
elastically (:mod:`shardkit.pipeline._elastic`).

Main-process stages (webdataset's ``WebLoader(...).unbatched().shuffle(n).batched(b)``)
are the :class:`Dataset` stage objects, applied to the loader's output: the loader takes
the same fluent methods, by delegation to a stage-only Dataset (one implementation).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ._context import Context, in_worker_process
from ._stages import Map, MapDict, MapTuple, Rename, Select, Stage, ToTuple
from ._state import check_loader_states
from ._torch import register_iterable_dataset

if TYPE_CHECKING:
    from ._dataset import Dataset

__all__ = ["Loader"]

LOADER_STATE_VERSION = 1
MAX_PREFETCHED = 16  # batches state_dict(prefetched=k) can leave out

# Dataset methods that add a stage, usable on the loader's output.
_STAGE_METHODS = frozenset(
    {"shuffle", "decode", "to_tuple", "map", "map_dict", "map_tuple", "rename", "select"}
    | {"batched", "unbatched"}
)
#: The key of a worker's batch state that carries member table notes to the parent.
_SHIPPED = "_shipped_tables"
# Main-process stages that pass each item on at once: the loader's position stays exact.
_IN_STEP = (Map, MapDict, MapTuple, Select, ToTuple, Rename)


class Loader:
    """Batches of ``dataset`` from a torch ``DataLoader``, resumable in one call.

    ``batch_size`` (default None: the dataset batches itself with ``.batched()``),
    ``num_workers``, ``collate_fn`` and any other ``DataLoader`` keyword are passed on
    (not ``persistent_workers``: each epoch starts fresh workers at the loader's epoch).
    ``state_dict()`` / ``load_state_dict()`` save and restore the position of every
    worker; ``set_epoch()`` chooses the epoch the next iteration reads (each iteration
    moves to the next one by itself). ``all_ranks=True``: ``state_dict()`` gathers every
    rank's state (a collective call: every rank makes it at once, as Lightning's and
    accelerate's checkpointing do), so one saved state resumes every rank, on any
    topology. Stage methods (``.unbatched()``, ``.shuffle(n)``,
    ``.batched(b)``, ``.map(fn)``, ...) return a loader that applies them in the main
    process, seeded from ``(seed, epoch, rank)``."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        all_ranks: bool = False,
        **dataloader: Any,
    ) -> None:
        from ._dataset import Dataset

        if not isinstance(dataset, Dataset):
            raise TypeError(f"Loader() takes a shardkit.Dataset, not {type(dataset).__name__}")
        if dataloader.get("persistent_workers"):
            raise ConfigError(
                "Loader(persistent_workers=True) is not supported: the loader starts each "
                "epoch's workers at its own epoch and position"
            )
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"num_workers must be an int >= 0, not {num_workers!r}")
        self._dataset = dataset
        self._options = dict(dataloader, batch_size=batch_size, num_workers=num_workers)
        self._collate = collate_fn
        if not isinstance(all_ranks, bool):
            raise TypeError(f"all_ranks must be True or False, not {all_ranks!r}")
        self._all_ranks = all_ranks
        self._after: tuple[Stage, ...] = ()
        self._epoch = dataset.epoch
        self._streams: dict[int, dict[str, Any]] = {}
        self._shift = 0  # the stream the next iteration's first batch comes from
        self._last = -1  # the stream of the last batch yielded
        self._loaded = False  # a loaded position waits for the next iteration
        # (last, worker, that worker's state) before each of the last batches handed out:
        # what state_dict(prefetched=k) rolls back to
        self._before: collections.deque[tuple[int, int, dict[str, Any] | None]] = collections.deque(
            maxlen=MAX_PREFETCHED
        )

    # ------------------------------------------------------------------ stages

    def __getattr__(self, name: str) -> Callable[..., Loader]:
        if name not in _STAGE_METHODS:
            raise AttributeError(f"'Loader' object has no attribute {name!r}")

        def add_stage(*args: Any, **kwargs: Any) -> Loader:
            from ._dataset import Dataset

            template = Dataset((), seed=self._dataset._seed)
            template._recipe = dataclasses.replace(template._recipe, stages=self._after)
            staged = getattr(template, name)(*args, **kwargs)
            new = copy.copy(self)
            new._after = staged._recipe.stages
            new._streams = {}
            new._before = collections.deque(maxlen=MAX_PREFETCHED)
            return new

        return add_stage

    # ------------------------------------------------------------------ epochs

    @property
    def dataset(self) -> Dataset:
        return self._dataset

    @property
    def epoch(self) -> int:
        """The epoch the next iteration reads."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch`` next (a position loaded for this same epoch is kept: its
        streams and which worker's batch comes next)."""
        self._dataset.set_epoch(epoch)
        if self._loaded and epoch == self._epoch:
            return
        self._loaded = False
        self._epoch = epoch
        self._streams = {}
        self._before.clear()
        self._shift = 0

    def __len__(self) -> int:
        """Batches (or items) one epoch yields on this rank, exactly: ``len(dataset)`` with
        ``batch_size=None``; with ``batch_size=N``, each worker's batches of N from its own
        stream (torch batches in the workers), summed, so a trainer that asks (Lightning)
        needs no look-ahead to find the epoch's end. TypeError where it is not known: main-
        process stages, an endless stream, no per-shard counts, or dataset stages that
        change the number of items (:meth:`Dataset.__len__`)."""
        if self._after:
            raise TypeError("len(Loader) is unknown with main-process stages")
        size = self._options["batch_size"]
        if size is None:
            return len(self._dataset)
        per_stream = self._stream_lengths()
        if self._options.get("drop_last"):
            return sum(n // size for n in per_stream)
        return sum(-(-n // size) for n in per_stream)

    def _stream_lengths(self) -> list[int]:
        """Items each worker's stream yields per epoch (TypeError where not known): the
        split's share of each, checked against ``len(dataset)`` (stages that change the
        number of items make them differ, and the length unknown)."""
        ds = self._dataset
        recipe, shards = ds._recipe, ds.shards
        total = len(ds)  # TypeError where the dataset's own length is unknown
        if recipe.mode(shards) not in ("pad", "drop") or recipe.passes is None:
            raise TypeError("len(Loader) with batch_size needs a split by sample counts")
        rank, world = ds._rank_and_world()
        workers = max(1, self._options["num_workers"])
        lengths = []
        for worker in range(workers):
            ctx = Context(ds._seed, self._epoch, rank, world, worker, workers)
            target = recipe.plan(shards, ctx, recipe.stages).target
            if target is None:
                raise TypeError("len(Loader) is unknown: a stream's share is not known")
            lengths.append(target * recipe.passes)
        if sum(lengths) != total:
            raise TypeError(
                "len(Loader) with batch_size is unknown: the dataset's stages change the "
                "number of items (batch in the dataset, or state it with .with_length(n))"
            )
        return lengths

    # ------------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[Any]:
        from torch.utils.data import DataLoader, default_collate, default_convert

        ds = self._dataset
        epoch = self._epoch
        ds.set_epoch(epoch)  # keeps a position loaded for this epoch
        rank, world = ds._carry_node()  # resolved here, where the DataLoader lives
        self._loaded = False
        workers = max(1, self._options["num_workers"])
        starts = ds._stream_states(workers)
        batched = self._options["batch_size"] is not None
        collate = self._collate or (default_collate if batched else default_convert)
        # a virtual IterableDataset (see _torch); forked workers send what they learn of
        # the shards (its next epoch's workers have it), others would only lose it
        tagged: Any = _Tagged(ds, self._shift, ship=_forks(self._options))
        self._last = self._shift - 1
        collate_fn = _Collate(collate, batched, default=self._collate is None)
        options = dict(self._options)
        if options.get("num_workers"):  # workers this loader starts: their heap kept
            options["worker_init_fn"] = _WorkerInit(options.get("worker_init_fn"))
        loader: Any = DataLoader(tagged, collate_fn=collate_fn, **options)
        self._streams = {i: state for i, state in enumerate(starts)}
        items: Iterator[Any] = self._batches(loader, epoch)
        ctx = Context(ds._seed, epoch, rank, world)
        for stage in self._after:
            items = stage(items, ctx)
        return items

    def _batches(self, loader: Any, epoch: int) -> Iterator[Any]:
        self._before.clear()
        caches = self._dataset._recipe.index_caches()
        for batch, state in loader:
            shipped = state.pop(_SHIPPED, None)
            if shipped:  # member tables a worker's parse noted: the next epoch's workers
                for i, notes in shipped:  # (forked from here) slice those shards
                    caches[i].adopt([notes])
            worker = state["worker"] or 0
            self._before.append((self._last, worker, self._streams.get(worker)))
            self._last = worker
            self._streams[worker] = state
            yield batch
        self._epoch = epoch + 1
        self._streams = {}
        self._shift = 0
        self._before.clear()

    # ------------------------------------------------------------------ resume

    def state_dict(self, prefetched: int = 0) -> dict[str, Any]:
        """The position of this rank: the epoch and the state of each worker's stream,
        after the last batch the iterator handed out, less the last ``prefetched`` of
        them: a loop that takes batches ahead of the one it trains on (``prefetched=1``
        for one ahead; at most :data:`MAX_PREFETCHED`) saves the position of what it
        used, so the resumed epoch reads the batches it held again. (A trainer that
        looks ahead only to find the epoch's end, Lightning's, does not when the loader
        has a length: see :meth:`__len__`.)"""
        if isinstance(prefetched, bool) or not isinstance(prefetched, int):
            raise ConfigError(f"prefetched must be an int, not {prefetched!r}")
        if not 0 <= prefetched <= (0 if self._loaded else len(self._before)):
            raise ConfigError(
                f"state_dict(prefetched={prefetched}): only {len(self._before)} batches of "
                f"this epoch (at most {MAX_PREFETCHED}) can be left out"
            )
        held = [type(s).__name__ for s in self._after if not isinstance(s, _IN_STEP)]
        if held:
            raise ConfigError(
                f"Loader.state_dict(): the main-process stage {held[0]} holds items back, "
                "so no position is exact; resume without main-process buffers or batching"
            )
        if self._loaded:  # loaded, not yet iterated: the loaded position, as it resumes
            streams = self._dataset._stream_states(max(1, self._options["num_workers"]))
            following = self._shift
        else:
            current, last = dict(self._streams), self._last
            for before, worker, state in list(self._before)[len(self._before) - prefetched :][::-1]:
                last = before
                if state is None:  # cannot happen: every stream has its start state
                    raise ConfigError("Loader.state_dict(): no position before that batch")
                current[worker] = state
            streams = [current[i] for i in sorted(current)]
            following = (last + 1) % len(streams) if streams else 0
        state = {
            "version": LOADER_STATE_VERSION,
            "epoch": self._epoch,
            "streams": streams,
            "next_stream": following,
        }
        return {"ranks": _gather(state)} if self._all_ranks else state

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue where ``state`` was saved. ``state``: this rank's ``state_dict()``, or
        a list of every rank's (``torch.distributed.all_gather_object``), which also
        resumes on a different number of ranks or workers."""
        if isinstance(state, Mapping) and "ranks" in state:  # saved with all_ranks=True
            state = state["ranks"]
            if not isinstance(state, Sequence):
                raise ConfigError("malformed Loader state: 'ranks' is not a list")
            if len(state) == 1:
                state = state[0]
        states = [state] if isinstance(state, Mapping) else list(state)
        epoch, streams = check_loader_states(states, LOADER_STATE_VERSION)
        if streams:
            self._dataset.load_state_dict(streams)
        else:
            self._dataset.set_epoch(epoch)
        self._epoch = epoch
        self._streams = {}
        self._before.clear()
        workers = max(1, self._options["num_workers"])
        self._shift = _next_stream(states, workers, self._dataset._rank_and_world())
        self._loaded = True


class _WorkerInit:
    """A loader worker's start: it keeps the heap its batches free (see
    :func:`keep_freed_heap`), then runs the caller's ``worker_init_fn``, if any."""

    def __init__(self, then: Callable[[int], Any] | None) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        keep_freed_heap()
        if self.then is not None:
            self.then(worker_id)


def keep_freed_heap(limit: int = 1 << 30) -> bool:
    """Ask the C library (glibc's ``mallopt(M_TRIM_THRESHOLD)``) to keep up to ``limit``
    bytes of freed heap instead of handing it back to the system at each ``free``: a
    worker builds a batch (512 JPEG samples of 67 KB: 34 MB of ``bytes``), frees it, and
    builds the next, and by default each batch took its pages back from the system one
    fault at a time (17 a sample; 51-54 us of CPU a sample against 18-20 kept, measured
    holding batches of 512). The peak is the same, the batch's; it stays mapped between
    batches. Whether it took (False where the C library has no ``mallopt``)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_TRIM_THRESHOLD, limit))


_M_TRIM_THRESHOLD = -1  # glibc's malloc.h


def _forks(options: Mapping[str, Any]) -> bool:
    """Whether the DataLoader of ``options`` forks its workers from this process (they
    then start with what this process holds, the member tables its workers sent)."""
    import multiprocessing

    context = options.get("multiprocessing_context")
    if context is None:
        method = (
            multiprocessing.get_start_method(allow_none=True)
            or (multiprocessing.get_all_start_methods()[0])
        )
    elif isinstance(context, str):
        method = context
    else:
        method = context.get_start_method()
    return options.get("num_workers", 0) > 0 and method == "fork"


def _gather(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``state`` (a collective call), or ``[state]`` without a process group."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return [state]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def _next_stream(states: list[Mapping[str, Any]], workers: int, node: tuple[int, int]) -> int:
    """Where the round robin of workers resumes: the saved one of this rank's state, on
    the same topology (one state, or every rank's)."""
    if len(states) != 1:
        if len(states) != node[1]:
            return 0
        states = [one for one in states if _saved_node(one) == node]
        if len(states) != 1:
            return 0
    if len(states[0].get("streams") or ()) != workers or _saved_node(states[0]) != node:
        return 0
    following = states[0].get("next_stream", 0)
    return following if isinstance(following, int) and 0 <= following < workers else 0


def _saved_node(state: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """(rank, world) a loader state was saved on, as its streams say."""
    nodes = {
        (s.get("rank"), s.get("world"))
        for s in state.get("streams") or ()
        if isinstance(s, Mapping)
    }
    return nodes.pop() if len(nodes) == 1 else None


class _Tagged:
    """The dataset, each item paired with this object (run in the workers). The
    DataLoader's fetcher collates right after pulling a batch's items, so
    :class:`_Collate` reads the stream's position then: the state after the last item."""

    def __init__(self, dataset: Dataset, shift: int, *, ship: bool = False) -> None:
        self.dataset = dataset
        self.shift = shift
        self.ship = ship

    def __iter__(self) -> Iterator[tuple[Any, _Tagged]]:
        if self.ship and in_worker_process():  # its parent keeps the tables it notes
            for cache in self.dataset._recipe.index_caches():
                cache.ship()
        for item in self.dataset._iterate(worker_shift=self.shift):
            yield item, self

    def state(self) -> dict[str, Any]:
        """The stream's position, with the table notes of the shards parsed since the last
        batch (:meth:`IndexCache.ship`) under :data:`_SHIPPED`, for the parent to adopt."""
        state = self.dataset.state_dict()
        caches = self.dataset._recipe.index_caches()
        shipped = [(i, notes) for i, cache in enumerate(caches) for notes in cache.shipped()]
        if shipped:
            state[_SHIPPED] = shipped
        return state


class _Collate:
    """The user's collate function over the items, and the stream's state after them.

    torch's default collate and convert turn a tuple into a list; the defaults here give
    a tuple back, so a batch of tuples stays a tuple of columns (which ``.unbatched()``
    turns back into tuples: a list is a batch of items)."""

    def __init__(self, collate: Callable[[Any], Any], batched: bool, default: bool) -> None:
        self.collate = collate
        self.batched = batched
        self.default = default

    def __call__(self, tagged: Any) -> tuple[Any, dict[str, Any]]:
        if self.batched:
            source = tagged[-1][1]
            items = [item for item, _ in tagged]
            return self._apply(items, items[0]), source.state()
        item, source = tagged
        return self._apply(item, item), source.state()

    def _apply(self, items: Any, first: Any) -> Any:
        out = self.collate(items)
        if self.default and type(first) is tuple and type(out) is list:
            return tuple(out)
        return out


register_iterable_dataset(_Tagged)
