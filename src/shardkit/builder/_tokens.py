"""``build(src, out, options=BuildOptions(tokenizer=...))``: documents into token shards.

The source's rows (a JSONL/CSV/parquet list, a ``datasets.Dataset``, a folder of ``.txt``
files, or a Megatron ``.bin`` already tokenized) are read in their order; every
``max_count`` rows make one task, and task i writes shard i, so the shards do not depend
on the workers or the engine. A worker tokenizes its rows with the build's tokenizer
(``Tokenizer.from_str`` of the file's bytes, read once by the driver: a document's tokens
are exactly ``Tokenizer.from_file(path).encode(text).ids``) and writes them as token
groups (:mod:`shardkit.formats.tokens`), at most :data:`GROUP_TOKENS` tokens per sample.
A row whose text is not a string, or is empty, is skipped and listed with its reason.

The driver runs on the build's own pieces: the output is the build's
:class:`~.store.Store` (a local folder or an ``s3://``/``gs://`` prefix; workers write
each shard straight into it, committed atomically by its :class:`~shardkit.writer.ShardFile`),
locked by :func:`.lease.store_lock` (``flock``, or a lease object), journaled by the one
:class:`~.journal.Journal` (a header naming the source, the options and the tokenizer's
SHA-256; one task record per finished shard, its ``documents`` and ``tokens`` in the
record's ``totals``) and cleared by :class:`~.folder.OutputFolder` (an interrupted
build's temporaries and strays, ``--overwrite``). A resumed build keeps the shards the
journal lists that still match their size and digest, runs the others again and refuses
a journal of another tokenizer. ``manifest.json`` comes last, with the total ``tokens``
and ``documents``. (The loop itself is smaller than :mod:`.run`'s: one task is one
shard, committed under its final name by the worker, so there is no part renaming or
assembly to do.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import storage
from .._optional import require
from .._version import __version__
from ..config import default_workers
from ..engines import make_executor, run_state
from ..errors import BuildError, ConfigError, ShardkitError
from ..formats.names import MANIFEST_NAME, is_megatron
from ..formats.record import ShardRecord
from ..formats.tar import tar_chunks
from ..formats.tokens import encode_group, token_dtype
from ..writer import ShardFile
from ._folder import OutputFolder
from ._journal import Journal
from ._lease import store_lock
from ._manifest import write_manifest
from ._results import BuildProgress, BuildResult, ProgressFn
from ._store import Store
from ._worker import TaskResult
from .options import BuildOptions

__all__ = ["GROUP_TOKENS", "build_tokens", "load_tokenizer"]

#: a token sample closes once it holds this many tokens (2 MiB of uint16)
GROUP_TOKENS = 1 << 20
_TOKENIZER_LIMIT = 1 << 30


@dataclass(frozen=True)
class Tokenizer:
    """The build's tokenizer file: its path, bytes (as text), SHA-256, vocabulary size."""

    path: str
    text: str
    sha256: str
    vocab_size: int


def load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer at ``path`` (a ``tokenizer.json``, or a folder holding one);
    ConfigError naming it when it is missing or not a ``tokenizers`` file."""
    tokenizers = require("tokenizers", "building token shards (--tokenizer)")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"tokenizer must be a path to a tokenizer.json, not {path!r}")
    path = os.fspath(path)
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    try:
        data = storage.read_document(file, limit=_TOKENIZER_LIMIT, what="tokenizer")
    except FileNotFoundError:
        raise ConfigError(f"tokenizer {file}: no such file") from None
    except OSError as exc:  # StorageError: not a regular file, too large, unreadable
        detail = exc.message if isinstance(exc, ShardkitError) else exc  # it names the file
        raise ConfigError(f"tokenizer {file}: {detail}") from None
    try:
        text = data.decode("utf-8")
        vocab = tokenizers.Tokenizer.from_str(text).get_vocab_size(with_added_tokens=True)
    except Exception as exc:  # the Rust library raises Exception subclasses of its own
        raise ConfigError(
            f"tokenizer {file}: not a Hugging Face tokenizers file ({str(exc)[:200]})"
        ) from None
    return Tokenizer(file, text, hashlib.sha256(data).hexdigest(), vocab)


@dataclass
class _Task:
    index: int
    name: str
    documents: list[Any]  # texts (to tokenize) or token arrays (a Megatron source)


def build_tokens(
    source: Any, store: Store, options: BuildOptions, progress: ProgressFn | None = None
) -> BuildResult:
    """See the module docs."""
    report = _Report(progress, time.monotonic())
    tokenizer = load_tokenizer(options.tokenizer) if options.tokenizer is not None else None
    megatron = is_megatron(source)
    if tokenizer is None and not megatron:
        raise ConfigError("building token shards needs a tokenizer (--tokenizer)")
    if megatron and tokenizer is not None:
        raise ConfigError("a Megatron .bin is tokenized already: build it without --tokenizer")
    field_name, header = _header(source, options, tokenizer, megatron)
    with store_lock(store) as guard:  # the build lock (a lease on an object store)
        journal = Journal(store, header, refuse=functools.partial(_refuse, store.url, header))
        try:
            return _build_locked(
                source, store, options, tokenizer, field_name, journal, guard, report
            )
        finally:
            journal.close()


def _build_locked(
    source: Any,
    store: Store,
    options: BuildOptions,
    tokenizer: Tokenizer | None,
    field_name: str,
    journal: Journal,
    guard: Callable[[], None],
    report: _Report,
) -> BuildResult:
    header = journal.header
    folder = OutputFolder(store, dataclasses.replace(options, format="tar"), journal)
    if folder.check({"options": header["options"], "source": {}}) is not None:
        raise BuildError(
            "the output holds a finished build: --overwrite builds it again", url=store.url
        )
    resumed = journal.load()
    if resumed:  # keep the shards the journal lists that are still whole
        matches = store.matcher()
        for result in journal.read_back():
            if not all(matches(p.name, p.bytes, p.digest) for p in result.parts):
                journal.forget(result.index)
    folder.remove_strays()  # what a killed build left: temporaries, no recorded shard
    journal.start(fresh=not resumed)
    rows = (
        _megatron_documents(os.fspath(source))
        if is_megatron(source)
        else _text_rows(source, options)
    )
    skipped, started = report.skipped, report.started
    results, reused = _run(folder, tokenizer, field_name, rows, guard, report)
    records = [r.parts[0] for r in results]
    document = {
        "shardkit_manifest": 1,
        "format": "tar",
        "kind": "tokens",
        "samples": sum(r.samples for r in records),
        "bytes": sum(r.bytes for r in records),
        "tokens": sum(r.totals["tokens"] for r in results),
        "documents": sum(r.totals["documents"] for r in results),
        "token_field": field_name,
        "shards": [
            {
                "name": record.name,
                "samples": record.samples,
                "bytes": record.bytes,
                "digest": record.digest or None,
                "tokens": r.totals["tokens"],
                "documents": r.totals["documents"],
            }
            for r, record in zip(results, records, strict=True)
        ],
        "skipped": [{"path": p, "reason": why} for p, why in skipped],
        "options": header["options"],
        "tokenizer": header["tokenizer"],
        "shardkit_version": __version__,
        "timing": {
            "seconds": round(time.monotonic() - started, 3),
            "workers": options.workers or default_workers(),
            "resumed_tasks": reused,
        },
    }
    guard()
    write_manifest(store.join(MANIFEST_NAME), document, store.access)
    journal.remove()
    return BuildResult(
        store.url,
        store.join(MANIFEST_NAME),
        records,
        document["samples"],
        skipped,
        reused,
        time.monotonic() - started,
    )


def _header(
    source: Any, options: BuildOptions, tokenizer: Tokenizer | None, megatron: bool
) -> tuple[str, dict[str, Any]]:
    # a Megatron source: set from its tokens below
    field_name = "tokens.u32" if tokenizer is None else token_dtype(tokenizer.vocab_size)
    described = (
        os.fspath(source) if isinstance(source, (str, os.PathLike)) else type(source).__name__
    )
    header = {
        "tokens_journal": 1,
        "source": described,
        "tokenizer": None
        if tokenizer is None
        else {
            "path": tokenizer.path,
            "sha256": tokenizer.sha256,
            "vocab_size": tokenizer.vocab_size,
        },
        "options": {
            "max_count": options.max_count,
            "prefix": options.prefix,
            "text_column": options.text_column,
            "group_tokens": GROUP_TOKENS,
        },
    }
    if megatron:
        field_name = _megatron_field(os.fspath(source))
    return field_name, header


def _refuse(url: str, header: dict[str, Any], saved: Any) -> None:
    """Why the journal an earlier run left (header ``saved``) cannot be resumed."""
    if not isinstance(saved, dict) or saved.get("tokens_journal") != 1:
        raise BuildError(
            "the output holds another build's journal: --overwrite starts over", url=url
        )
    if saved.get("tokenizer") != header["tokenizer"]:
        raise ConfigError(
            f"cannot resume the build in {url}: its tokenizer changed "
            f"(vocabulary hash {_sha(saved)} then, {_sha(header)} now); --overwrite starts over"
        )
    raise ConfigError(
        f"cannot resume the build in {url}: its source or options changed; --overwrite starts over"
    )


def _sha(header: Any) -> str:
    tokenizer = header.get("tokenizer") if isinstance(header, dict) else None
    return str(tokenizer.get("sha256"))[:16] if isinstance(tokenizer, dict) else "none"


def _run(
    folder: OutputFolder,
    tokenizer: Tokenizer | None,
    field_name: str,
    rows: Iterator[tuple[str, Any]],
    guard: Callable[[], None],
    report: _Report,
) -> tuple[list[TaskResult], int]:
    """Every task's result in order (a task the journal holds is not run again), and how
    many came from the journal."""
    store, options, journal = folder.store, folder.options, folder.journal
    workers = options.workers or default_workers()
    context = (store.portable(), options.hash, field_name, tokenizer.text if tokenizer else None)
    executor = make_executor(
        options.engine, options.address, workers=workers, init=_init, context=context
    )
    results: list[TaskResult] = []
    pending: list[Future[TaskResult] | TaskResult] = []
    reused = 0

    def collect() -> None:
        item = pending.pop(0)
        if isinstance(item, TaskResult):
            results.append(report(item))
            return
        result = item.result()
        guard()
        journal.write(result)  # before the next shard's: a resume keeps it
        results.append(report(result))

    try:
        for task in _tasks(rows, options, report.skipped):
            if journal.is_done(task.index):
                pending.append(journal.take(task.index))
                reused += 1
            else:
                pending.append(executor.submit(_write_shard, task))
            while len(pending) > 2 * workers:
                collect()
        while pending:
            collect()
    except BaseException:
        executor.close(cancel=True)
        with contextlib.suppress(Exception):  # never in place of the run's own error
            folder.remove_temporaries()  # a worker that died mid-write cannot
        raise
    executor.close()
    if not results:
        journal.remove()
        raise BuildError("no documents to build: every row was skipped")
    return results, reused


class _Report:
    """Hands the ``progress`` callback a snapshot as each shard is committed."""

    def __init__(self, progress: ProgressFn | None, started: float) -> None:
        self.progress = progress
        self.skipped: list[tuple[str, str]] = []  # (path, reason) of each row skipped
        self.started = started
        self.samples = self.shards = 0

    def __call__(self, done: TaskResult) -> TaskResult:
        self.samples += sum(p.samples for p in done.parts)
        self.shards += 1
        if self.progress is not None:
            elapsed = time.monotonic() - self.started
            snapshot = BuildProgress(self.samples, len(self.skipped), None, 0, self.shards, elapsed)
            self.progress(snapshot)
        return done


def _tasks(
    rows: Iterator[tuple[str, Any]], options: BuildOptions, skipped: list[tuple[str, str]]
) -> Iterator[_Task]:
    batch: list[Any] = []
    index = 0
    for name, value in rows:
        if isinstance(value, str):
            if not value:
                skipped.append((name, "empty text"))
                continue
        elif isinstance(value, _NotText):
            skipped.append((name, value.reason))
            continue
        elif not isinstance(value, np.ndarray):
            skipped.append((name, f"text is not a string ({type(value).__name__})"))
            continue
        batch.append(value)
        if len(batch) == options.max_count:
            yield _Task(index, f"{options.prefix}-{index:06d}.tar", batch)
            index, batch = index + 1, []
    if batch:
        yield _Task(index, f"{options.prefix}-{index:06d}.tar", batch)


def _init(context: Any, reporter: Any) -> Any:
    store, hash_name, field_name, text = context
    tokenizer = None
    if text is not None:
        tokenizer = require("tokenizers", "building token shards").Tokenizer.from_str(text)
    return (store, hash_name, field_name, tokenizer)


def _write_shard(task: _Task) -> TaskResult:
    """Tokenize a task's documents and write them as its shard (in a worker), straight
    into the build's store (committed atomically under its final name)."""
    store, hash_name, field_name, tokenizer = run_state()
    documents: list[Any] = task.documents
    if tokenizer is not None:
        documents = [e.ids for e in tokenizer.encode_batch(documents, add_special_tokens=True)]
    url = store.join(task.name)
    shard = ShardFile.open(url, access=store.access, hash=hash_name)
    try:
        tokens = count = groups = 0
        group: list[Any] = []
        held = 0
        for doc in documents:
            if not len(doc):
                continue  # nothing to pack (the tokenizer gave no token)
            group.append(doc)
            held += len(doc)
            count += 1
            tokens += len(doc)
            if held >= GROUP_TOKENS:
                _write_group(shard, task, groups, group, field_name)
                groups, group, held = groups + 1, [], 0
        if group:
            _write_group(shard, task, groups, group, field_name)
        info = shard.commit(task.index)
    except BaseException:
        shard.discard()
        raise
    record = ShardRecord(task.name, info.samples, info.bytes, info.digest)
    return TaskResult(task.index, [record], totals={"documents": count, "tokens": tokens})


def _write_group(
    shard: ShardFile, task: _Task, number: int, group: list[Any], field_name: str
) -> None:
    key = f"{task.index:06d}-{number:06d}"
    chunks, size = tar_chunks(key, encode_group(group, field_name))
    shard.writev(key, chunks, size)


def _text_rows(source: Any, options: BuildOptions) -> Iterator[tuple[str, Any]]:
    """(name, text) of every row, in order (text: what the row holds, checked later)."""
    column = options.text_column
    from ._pysources import is_hf_dataset

    if is_hf_dataset(source):
        if column not in source.column_names:
            raise ConfigError(f"the dataset has no column {column!r} (--text-column)")
        rows = (v for batch in source.select_columns([column]).iter(1024) for v in batch[column])
        for i, value in enumerate(rows):  # a batch at a time, never the whole column
            yield f"row {i}", value
        return
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(
            "a token build reads a JSONL/CSV/parquet list, a folder of .txt files, a "
            f"datasets.Dataset or a Megatron .bin, not {type(source).__name__}"
        )
    path = os.fspath(source)
    if os.path.isdir(path):
        yield from _text_files(path)
        return
    from ._tables import _rows

    for i, row in enumerate(_rows(path), start=1):
        if column not in row:
            raise BuildError(f"row {i} has no column {column!r} (--text-column)", url=path)
        yield f"{path}:{i}", row[column]


def _text_files(folder: str) -> Iterator[tuple[str, Any]]:
    names = sorted(n for n in os.listdir(folder) if n.endswith(".txt"))
    if not names:
        raise BuildError("no .txt files in the folder", url=folder)
    for name in names:
        path = os.path.join(folder, name)
        data = storage.read_document(path, limit=_TOKENIZER_LIMIT, what="text file")
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield path, _NotText(f"not UTF-8 text ({exc.reason})")


class _NotText:
    """A row whose text could not be read (skipped, with this reason)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return self.reason


def _megatron_field(path: str) -> str:
    from ..pipeline import TokenSource

    table = TokenSource(megatron=path).table
    pool = table.pools[0]
    if len(pool) and int(pool.min()) < 0:
        raise BuildError("the .bin holds negative token ids", url=path)
    return "tokens.u16" if not len(pool) or int(pool.max()) < (1 << 16) else "tokens.u32"


def _megatron_documents(path: str) -> Iterator[tuple[str, Any]]:
    from ..pipeline import TokenSource

    table = TokenSource(megatron=path).table
    for d in range(table.documents):
        yield f"{path}:{d}", np.asarray(table.document(d))
