"""``shardkit build``: pack image folders, file lists, Python datasets and existing shards
into shards, in parallel, deterministically and resumably.

::

    sources -> plan (fixed order, cut into tasks) -> executor (local processes)
            -> workers write parts -> driver commits shards in plan order
            -> manifest.json last

Importing this package is light; the machinery loads when :func:`build` runs. See
``docs/build.md`` for the design.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_exports
from ..errors import ConfigError
from ..formats.record import ShardRecord
from ._kinds import is_table
from ._results import BuildProgress, BuildResult, ProgressFn
from .options import BuildOptions

if TYPE_CHECKING:
    from ._skipped import SKIPPED_NAME as SKIPPED_NAME

__all__ = ["BuildOptions", "BuildProgress", "BuildResult", "ShardRecord", "build"]

# Shared with the CLI, not the supported API (not in __all__); loaded on first use.
__getattr__, __dir__ = lazy_exports(__name__, {"SKIPPED_NAME": "._skipped"})


def build(
    source: Any,
    out: str | os.PathLike[str],
    *,
    options: BuildOptions | None = None,
    to_sample: Any = None,
    progress: ProgressFn | None = None,
) -> BuildResult:
    """Pack ``source`` into shards plus ``manifest.json`` in the folder ``out`` (or the
    object-store prefix, ``s3://bucket/prefix``, into which the workers write directly).

    ``source`` is an image folder (``SRC/<class>/**/<image>``), a ``.csv``/``.jsonl``/``.parquet``
    list, shard URLs (``data/shard-{000000..000099}.tar``), or a Python map-style dataset
    (``__len__`` and ``__getitem__``; pickled to the workers) or iterable (packed in this process,
    in order). ``to_sample`` turns one dataset item into a sample dict; by default a dict is used as
    is and an ``(image, label)`` pair becomes ``{"png": image, "cls": label}``. ``progress``
    receives a :class:`BuildProgress` a few times a second and whenever a shard is committed.

    Rerunning an interrupted build with the same arguments resumes it; the output is the
    same bytes whatever the number of workers and however often it was interrupted.
    Items that cannot be packed are skipped and reported (``BuildResult.skipped``); when
    every item is skipped, :class:`~shardkit.errors.EmptyBuildError` is raised and no
    manifest is written.
    Worker processes use the ``forkserver`` start method: a script that calls this must
    guard its entry point with ``if __name__ == "__main__":``.
    """
    if options is None:
        options = BuildOptions()
    if not isinstance(options, BuildOptions):
        raise ConfigError(f"options must be a BuildOptions, not {type(options).__name__}")
    _start_workers(source, options)
    from ._api import run  # the machinery: ~50 ms of imports, while the server boots

    return run(source, os.fspath(out), options, to_sample, progress)


def _start_workers(source: Any, options: BuildOptions) -> None:
    """Boot the local worker server now, in the background, for a build that will use
    worker processes: it imports shardkit and what the workers need while this process
    loads the build machinery and lists the source."""
    from .. import config

    if options.engine != "local":
        return  # a cluster has its workers
    if (options.workers or config.default_workers()) <= 1:
        return
    from ..engines import warm_up

    images = ("cv2", "simplejpeg", "PIL.Image") if options.transforms else ()
    # A list may name http(s) URLs: its workers download with aiohttp (skipped if absent).
    fetch = ("aiohttp", f"{__name__}._fetch") if is_table(source) else ()
    warm_up((f"{__name__}._worker", *images, *fetch))  # worker.WORKER_MODULE
