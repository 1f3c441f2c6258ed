"""Where a build's tasks run when they do not run in this process's pool alone: a Ray or
Dask cluster (a source that pickles and splits), and the check that a worker context
pickles; and how many tasks a build has, counted only up to the pool's size."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

from ..engines import Executor, make_executor
from ..errors import BuildError
from ._plan import Task
from ._sources import Listing
from ._worker import WorkerContext, init_worker
from .options import BuildOptions

__all__ = ["cluster_executor", "counted", "picklable"]

logger = logging.getLogger(__name__)


def counted(tasks: Iterator[Task], limit: int) -> tuple[Iterator[Task], int | None]:
    """``tasks`` as they were, and how many there are when fewer than ``limit`` (None:
    at least that many; only so many are made to find out)."""
    head = list(itertools.islice(tasks, limit))
    return itertools.chain(head, tasks), len(head) if len(head) < limit else None


def cluster_executor(options: BuildOptions, listing: Listing, ctx: WorkerContext) -> Executor:
    from dataclasses import replace

    if not listing.splittable or not picklable(ctx):
        raise BuildError(f"engine={options.engine!r} needs a source that pickles and splits")
    ctx = replace(ctx, store=ctx.store.portable())  # cluster workers have their own cwd
    return make_executor(options.engine, options.address, init=init_worker, context=ctx)


def picklable(context: WorkerContext) -> bool:
    import pickle

    try:
        pickle.dump(context, _NullWriter())
    except Exception as exc:  # pickle raises many types: PicklingError, TypeError, ...
        logger.warning("the source does not pickle (%s): building in this process", exc)
        return False
    return True


class _NullWriter:
    def write(self, data: bytes) -> int:
        return len(data)
