"""``proc``: run a shell command on every sample, N at a time, and keep what it leaves.

For each sample, a fresh temporary folder gets one file per field, named
``sample.<extension>`` (``sample.jpg``, ``sample.seg.png``; ``names="key"`` uses the last
component of the sample key instead, made safe: ``img_0001.jpg``). The command runs there
through the shell, with the folder as its working directory and these variables set:

    SHARDKIT_KEY     the sample key            SHARDKIT_URL    the shard it came from
    SHARDKIT_INDEX   its number in the input   SHARDKIT_STEM   the file stem (sample)
    SHARDKIT_FIELDS  its extensions, space-separated

Its stdout goes to stderr (stdout may carry the output stream). Afterwards every regular
file in the folder becomes a field of the output sample (extension = the file name after
its first dot, fields sorted by file name), under the same key; two files giving the
same extension (``sample.txt`` and ``notes.txt``) are an error. Symlinks, folders, files
without an extension and hidden files are left out (symlinks are never followed).
Nothing is written outside the temporary folder: extensions that are not plain file
names are refused. Output samples come in input order; at most ``2 * workers`` samples
are in flight. A command that exits non-zero, or leaves no files, either fails the run
(``on_error="fail"``) or drops the sample (``"skip"``, logged).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from .. import storage
from ..engines import Engine
from ..errors import ConfigError, DataError, ShardkitError, StorageError
from ..formats.names import Format
from ..handlers import OnError, check_on_error
from ..units import Size
from ._inputs import Inputs, as_refs, iter_samples
from ._outputs import Output, tar_fields
from ._progress import ShardCount
from ._settings import ToolRun, WriteOptions

if TYPE_CHECKING:
    from concurrent.futures import Future

    from typing_extensions import Unpack

__all__ = ["ProcCounts", "ProcError", "ProcResult", "proc", "run_on_sample", "run_on_samples"]

logger = logging.getLogger(__name__)

Names = Literal["sample", "key"]
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
_STEM_MAX = 100  # a key stem longer than this is cut (file names stop at 255 bytes)
_NAME_MAX = 255


class ProcError(ShardkitError):
    """The command failed on a sample (non-zero exit, timeout, no output files)."""


@dataclass(frozen=True)
class ProcResult:
    """How many samples went in, came out, and were dropped by ``on_error="skip"``."""

    samples_in: int
    samples_out: int
    skipped: int


@dataclass
class ProcCounts:
    """The running tally of :func:`run_on_samples`: samples in, out, and dropped."""

    samples_in: int = 0
    samples_out: int = 0
    skipped: int = 0

    def result(self) -> ProcResult:
        return ProcResult(
            samples_in=self.samples_in, samples_out=self.samples_out, skipped=self.skipped
        )


def _stem(key: str, names: Names) -> str:
    if names == "sample":
        return "sample"
    return _SAFE.sub("_", key.rsplit("/", 1)[-1]).strip("_")[:_STEM_MAX] or "sample"


def _unpack(folder: str, stem: str, sample: dict[str, Any]) -> list[str]:
    exts = []
    for ext, value in sample.items():
        if ext.startswith("__") and ext.endswith("__"):
            continue
        name = f"{stem}.{ext}"
        if "/" in ext or "\0" in ext or os.sep in ext or name in (".", ".."):
            raise DataError(f"field {ext!r} cannot be a file name", key=sample.get("__key__"))
        if len(os.fsencode(name)) > _NAME_MAX:
            raise DataError(
                f"field {ext[:40]!r}... is too long for a file name", key=sample.get("__key__")
            )
        try:
            with open(os.path.join(folder, name), "xb") as f:  # a private mkdtemp folder
                f.write(value)
        except OSError as exc:  # a full disk: one line, not a traceback
            raise StorageError(f"cannot write: {exc.strerror or exc}", url=folder) from exc
        exts.append(ext)
    return exts


def _pack(folder: str, key: str) -> dict[str, Any]:
    out: dict[str, Any] = {"__key__": key}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        info = os.lstat(path)
        dot = name.find(".")
        if not stat.S_ISREG(info.st_mode) or dot <= 0 or dot == len(name) - 1:
            logger.info(
                "sample %r: leaving out %r (not a regular file with an extension)", key, name
            )
            continue
        ext = name[dot + 1 :]
        if ext in out:
            raise ProcError(f"two files give the field {ext!r} (one is {name!r})", key=key)
        with storage.open_regular(path) as f:  # swapped for a FIFO since: refused
            out[ext] = f.read()
    return out


def run_on_sample(
    sample: dict[str, Any],
    command: str,
    *,
    index: int = 0,
    names: Names = "sample",
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``command`` on one sample (see the module docs); returns the output sample."""
    key = str(sample.get("__key__"))
    url = sample.get("__url__")
    folder = tempfile.mkdtemp(prefix="shardkit-proc-")
    try:
        stem = _stem(key, names)
        exts = _unpack(folder, stem, tar_fields(sample))
        env = dict(os.environ)
        env.update(
            SHARDKIT_KEY=key,
            SHARDKIT_URL=str(url or ""),
            SHARDKIT_INDEX=str(index),
            SHARDKIT_STEM=stem,
            SHARDKIT_FIELDS=" ".join(exts),
        )
        if any("\0" in value for value in env.values()):
            # The reader accepts such keys (TFRecord, pax); an environment cannot hold them.
            raise ProcError(
                "the key or URL holds a NUL byte: no command can be given it", key=key, url=url
            )
        status = _run(command, folder, env, timeout)
        if status is None:
            raise ProcError(f"command timed out after {timeout} s", key=key, url=url)
        if status != 0:
            raise ProcError(f"command exited with status {status}", key=key, url=url)
        out = _pack(folder, key)
        if len(out) == 1:
            raise ProcError("command left no files with an extension", key=key, url=url)
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(command: str, folder: str, env: dict[str, str], timeout: float | None) -> int | None:
    """Run ``command`` through the shell in a session of its own; its exit status, or None
    once ``timeout`` passed, after killing the whole session (the shell and whatever it
    started: children left alive would hold the output pipes open)."""
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=folder,
        env=env,
        stdout=2,  # fd 2: stdout may carry the output stream
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, whose id is its pid
    )
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.returncode is None:  # timed out, or interrupted (KeyboardInterrupt)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def run_on_samples(
    samples: Iterable[dict[str, Any]],
    command: str,
    *,
    workers: int = 1,
    on_error: OnError = "fail",
    names: Names = "sample",
    timeout: float | None = None,
    counts: ProcCounts | None = None,
) -> Iterator[dict[str, Any]]:
    """Output samples, in input order; ``counts`` (if given) keeps the tally."""
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, not {workers}")
    check_on_error(on_error)
    from concurrent.futures import ThreadPoolExecutor

    tally = counts if counts is not None else ProcCounts()
    with ThreadPoolExecutor(workers, thread_name_prefix="shardkit-proc") as pool:
        pending: deque[Future[dict[str, Any]]] = deque()
        try:
            for index, sample in enumerate(samples):
                pending.append(
                    pool.submit(
                        run_on_sample, sample, command, index=index, names=names, timeout=timeout
                    )
                )
                tally.samples_in += 1
                if len(pending) >= 2 * workers:
                    yield from _collect(pending.popleft(), on_error, tally)
            while pending:
                yield from _collect(pending.popleft(), on_error, tally)
        finally:
            for future in pending:
                future.cancel()


def _collect(
    future: Future[dict[str, Any]], on_error: OnError, tally: ProcCounts
) -> Iterator[dict[str, Any]]:
    try:
        result = future.result()
    except (ProcError, DataError) as exc:
        if on_error == "fail":
            raise
        logger.warning("skipping sample: %s", exc)
        tally.skipped += 1
        return
    tally.samples_out += 1
    yield result


def proc(
    inputs: Inputs,
    command: str,
    output: str,
    *,
    workers: int = 1,
    on_error: OnError = "fail",
    names: Names = "sample",
    timeout: float | None = None,
    max_count: int | None = None,
    max_size: Size | None = None,
    format: Format | None = None,
    engine: Engine = "local",
    address: str | None = None,
    **options: Unpack[WriteOptions],
) -> ProcResult:
    """Run ``command`` over every sample of ``inputs`` and write the results to ``output``.

    ``engine="ray"|"dask"`` runs one task per input shard on that cluster (``address``),
    writing one output shard per input (``output`` is then a pattern; see
    :func:`shardkit.map_shards`). ``on_shard`` gets each file written (its size and
    ``hash`` digest); the keywords: :class:`~shardkit.tools._settings.WriteOptions`."""
    run = ToolRun.of("proc", options)
    if names not in ("sample", "key"):
        raise ConfigError(f"names must be 'sample' or 'key', not {names!r}")
    transform = functools.partial(
        run_on_samples,
        command=command,
        workers=workers,
        on_error=on_error,
        names=names,
        timeout=timeout,
    )
    if engine != "local":
        if max_count is not None or max_size is not None or format is not None:
            raise ConfigError("with a cluster engine each input shard gives one output shard")
        return _on_cluster(inputs, transform, output, run, (engine, address))
    refs = as_refs(inputs, run.access)
    counts = ProcCounts()
    with Output(output, run, format=format, max_count=max_count, max_size=max_size) as out:
        for result in transform(iter_samples(run.track(refs)), counts=counts):
            out.write(result)
    return counts.result()


def _on_cluster(
    inputs: Inputs,
    transform: Callable[[Iterator[dict[str, Any]]], Iterator[dict[str, Any]]],
    output: str,
    run: ToolRun,
    cluster: tuple[Engine, str | None],
) -> ProcResult:
    """``proc`` on a Ray or Dask cluster: one :func:`~shardkit.mapshards.map_shard_streams`
    task per input shard, ``output`` a pattern (one output shard per input). Counts only
    the shards processed this run; ``progress`` hears of each as its task's result arrives,
    and of the outputs an earlier run left (resumed) at the end."""
    from ..mapshards import MapRun, map_shard_streams
    from ..pipeline import resolve_source

    given = [inputs] if isinstance(inputs, str) else list(cast(Iterable[Any], inputs))
    if not all(isinstance(url, str) and url != "-" for url in given):
        raise ConfigError("with a cluster engine the inputs are shard URLs (not '-' or streams)")
    urls = resolve_source(given, storage_options=run.access, counts=False).urls
    count = ShardCount(len(urls), run.progress)
    where = MapRun(*cluster, access=run.access, progress=lambda _: count.done(), hash=run.hash)
    results = map_shard_streams(transform, urls, output, where)
    if count.shards < len(results):  # outputs that existed: done too
        count.done(len(results) - count.shards)
    done = [r for r in results if not r.resumed]
    if run.on_shard is not None:
        for i, r in enumerate(done):
            run.on_shard(replace(r.shard, index=i))
    read = sum(r.samples_in or 0 for r in done)
    written = sum(r.samples_out or 0 for r in done)
    return ProcResult(samples_in=read, samples_out=written, skipped=read - written)
