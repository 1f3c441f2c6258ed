"""``build(src, out, options=BuildOptions(tokenizer=...))``: documents into token shards.

The source's rows (a JSONL/CSV/parquet list, a ``datasets.Dataset``, a folder of ``.txt``
files, or a Megatron ``.bin`` already tokenized) are read in their order; every
``max_count`` rows make one task, and task i writes shard i, so the shards do not depend
on the workers or the engine. A worker tokenizes its rows with the build's tokenizer
(``Tokenizer.from_str`` of the file's bytes, read once by the driver: a document's tokens
are exactly ``Tokenizer.from_file(path).encode(text).ids``) and writes them as token
groups (:mod:`shardkit.formats.tokens`), at most :data:`GROUP_TOKENS` tokens per sample.
A row whose text is not a string, or is empty, is skipped and listed with its reason.

The driver holds the output's build lock (:func:`.journal.output_lock`), runs the tasks on
the build's engine (:func:`shardkit.engines.make_executor`), each shard committed
atomically by its :class:`~shardkit.writer.ShardFile`, and journals them in order (a
header naming the tokenizer's SHA-256 and the options, then one line per finished shard);
a resumed build removes the temporary files a killed one left, keeps the shards the
journal lists and refuses a journal of another tokenizer. ``manifest.json`` comes last,
with the total ``tokens`` and ``documents``. (It is a driver of its own, smaller than
:mod:`.run`'s: one task is one shard, so there is no part assembly to do.)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import storage
from .._optional import require
from .._temporary import is_temporary
from .._version import __version__
from ..config import default_workers
from ..engines import make_executor, run_state
from ..errors import BuildError, ConfigError
from ..formats.jsondoc import load_json
from ..formats.names import MANIFEST_NAME
from ..formats.record import ShardRecord
from ..formats.tar import tar_chunks
from ..formats.tokens import encode_group, token_dtype
from ..writer import ShardFile
from .journal import output_lock
from .manifest import write_manifest
from .options import BuildOptions
from .results import BuildProgress, BuildResult, ProgressFn

__all__ = ["GROUP_TOKENS", "JOURNAL_NAME", "build_tokens", "load_tokenizer"]

#: a token sample closes once it holds this many tokens (2 MiB of uint16)
GROUP_TOKENS = 1 << 20
JOURNAL_NAME = ".shardkit-tokens-journal.jsonl"
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
        raise ConfigError(f"tokenizer {file}: {exc}") from None
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


@dataclass
class _Done:
    index: int
    record: ShardRecord
    documents: int
    tokens: int
    skipped: list[tuple[str, str]] = field(default_factory=list)


def build_tokens(
    source: Any, out: str, options: BuildOptions, progress: ProgressFn | None = None
) -> BuildResult:
    """See the module docs."""
    started = time.monotonic()
    tokenizer = load_tokenizer(options.tokenizer) if options.tokenizer is not None else None
    megatron = isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(".bin")
    if tokenizer is None and not megatron:
        raise ConfigError("building token shards needs a tokenizer (--tokenizer)")
    if megatron and tokenizer is not None:
        raise ConfigError("a Megatron .bin is tokenized already: build it without --tokenizer")
    if not storage.is_local(out):
        raise ConfigError(f"a token build writes into a local folder, not {out} (copy it after)")
    out = storage.local_path(out)
    os.makedirs(out, exist_ok=True)
    with output_lock(out):  # the build lock every build of a folder takes
        _remove_temporaries(out, options.prefix)
        results, done, skipped, document = _build_locked(
            source, out, options, tokenizer, megatron, progress, started
        )
    resumed = sum(1 for r in results if r.index in done)
    return BuildResult(
        out,
        os.path.join(out, MANIFEST_NAME),
        [r.record for r in results],
        document["samples"],
        skipped,
        resumed,
        time.monotonic() - started,
    )


def _build_locked(
    source: Any,
    out: str,
    options: BuildOptions,
    tokenizer: Tokenizer | None,
    megatron: bool,
    progress: ProgressFn | None,
    started: float,
) -> tuple[list[_Done], dict[int, _Done], list[tuple[str, str]], dict[str, Any]]:
    manifest = os.path.join(out, MANIFEST_NAME)
    journal = os.path.join(out, JOURNAL_NAME)
    if options.overwrite:
        for name in (manifest, journal):
            if os.path.exists(name):
                os.remove(name)
    elif os.path.exists(manifest):
        raise BuildError("the output holds a finished build: --overwrite builds it again", url=out)
    field_name, header = _header(source, options, tokenizer, megatron)
    done = _resume(journal, header)
    rows = _megatron_documents(os.fspath(source)) if megatron else _text_rows(source, options)
    skipped: list[tuple[str, str]] = []
    report = _Report(progress, skipped, started)
    results = _run(out, options, tokenizer, field_name, rows, done, journal, report)
    records = [r.record for r in results]
    document = {
        "shardkit_manifest": 1,
        "format": "tar",
        "kind": "tokens",
        "samples": sum(r.samples for r in records),
        "bytes": sum(r.bytes for r in records),
        "tokens": sum(r.tokens for r in results),
        "documents": sum(r.documents for r in results),
        "token_field": field_name,
        "shards": [
            {
                "name": r.record.name,
                "samples": r.record.samples,
                "bytes": r.record.bytes,
                "digest": r.record.digest or None,
                "tokens": r.tokens,
                "documents": r.documents,
            }
            for r in results
        ],
        "skipped": [{"path": p, "reason": why} for p, why in skipped],
        "options": header["options"],
        "tokenizer": header["tokenizer"],
        "shardkit_version": __version__,
        "timing": {
            "seconds": round(time.monotonic() - started, 3),
            "workers": options.workers or default_workers(),
            "resumed_tasks": sum(1 for r in results if r.index in done),
        },
    }
    write_manifest(manifest, document)
    os.remove(journal)
    return results, done, skipped, document


def _remove_temporaries(out: str, prefix: str) -> None:
    """The temporary shard files a killed build left (this build holds the lock)."""
    for name in os.listdir(out):
        if name.startswith(f".{prefix}-") and is_temporary(name):
            os.remove(os.path.join(out, name))


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


def _resume(journal: str, header: dict[str, Any]) -> dict[int, _Done]:
    """The shards an interrupted build finished (its journal), or a fresh journal."""
    if not os.path.exists(journal):
        _append(journal, header, fresh=True)
        return {}
    lines = storage.read_document(journal, what="journal").decode("utf-8").splitlines()
    saved = load_json(lines[0], url=journal, what="journal") if lines else None
    if not isinstance(saved, dict) or saved.get("tokens_journal") != 1:
        raise BuildError("not a token build's journal: --overwrite starts over", url=journal)
    if saved.get("tokenizer") != header["tokenizer"]:
        raise ConfigError(
            f"cannot resume the build in {os.path.dirname(journal)}: its tokenizer changed "
            f"(vocabulary hash {_sha(saved)} then, {_sha(header)} now); --overwrite starts over"
        )
    if saved != header:
        raise ConfigError(
            f"cannot resume the build in {os.path.dirname(journal)}: its source or options "
            "changed; --overwrite starts over"
        )
    done: dict[int, _Done] = {}
    for line in lines[1:]:
        try:
            entry = load_json(line, url=journal, what="journal")
            record = ShardRecord(entry["name"], entry["samples"], entry["bytes"], entry["digest"])
            done[int(entry["index"])] = _Done(
                int(entry["index"]), record, int(entry["documents"]), int(entry["tokens"])
            )
        except (ValueError, KeyError, TypeError):
            break  # a line cut by the interruption: its shard is written again
    return done


def _sha(header: Any) -> str:
    tokenizer = header.get("tokenizer") if isinstance(header, dict) else None
    return str(tokenizer.get("sha256"))[:16] if isinstance(tokenizer, dict) else "none"


def _append(journal: str, entry: dict[str, Any], fresh: bool = False) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if fresh else os.O_APPEND)
    with open(os.open(journal, flags, 0o644), "w", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _run(
    out: str,
    options: BuildOptions,
    tokenizer: Tokenizer | None,
    field_name: str,
    rows: Iterator[tuple[str, Any]],
    done: dict[int, _Done],
    journal: str,
    report: _Report,
) -> list[_Done]:
    workers = options.workers or default_workers()
    context = (out, options.prefix, options.hash, field_name, tokenizer.text if tokenizer else None)
    executor = make_executor(
        options.engine, options.address, workers=workers, init=_init, context=context
    )
    results: list[_Done] = []
    pending: list[Future[_Done] | _Done] = []
    try:
        for task in _tasks(rows, options, report.skipped):
            if task.index in done and os.path.exists(
                os.path.join(out, done[task.index].record.name)
            ):
                pending.append(done[task.index])
            else:
                pending.append(executor.submit(_write_shard, task))
            while len(pending) > 2 * workers:
                results.append(report(_collect(pending.pop(0), journal, done)))
        while pending:
            results.append(report(_collect(pending.pop(0), journal, done)))
    except BaseException:
        executor.close(cancel=True)
        raise
    executor.close()
    if not results:
        raise BuildError("no documents to build: every row was skipped")
    return results


class _Report:
    """Hands the ``progress`` callback a snapshot as each shard is committed."""

    def __init__(
        self, progress: ProgressFn | None, skipped: list[tuple[str, str]], started: float
    ) -> None:
        self.progress = progress
        self.skipped = skipped
        self.started = started
        self.samples = self.shards = 0

    def __call__(self, done: _Done) -> _Done:
        self.samples += done.record.samples
        self.shards += 1
        if self.progress is not None:
            elapsed = time.monotonic() - self.started
            snapshot = BuildProgress(self.samples, len(self.skipped), None, 0, self.shards, elapsed)
            self.progress(snapshot)
        return done


def _collect(item: Future[_Done] | _Done, journal: str, done: dict[int, _Done]) -> _Done:
    result = item if isinstance(item, _Done) else item.result()
    if result.index not in done:
        r = result.record
        _append(
            journal,
            {
                "index": result.index,
                "name": r.name,
                "samples": r.samples,
                "bytes": r.bytes,
                "digest": r.digest,
                "documents": result.documents,
                "tokens": result.tokens,
            },
        )
    return result


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
    out, _prefix, hash_name, field_name, text = context
    tokenizer = None
    if text is not None:
        tokenizer = require("tokenizers", "building token shards").Tokenizer.from_str(text)
    return (out, hash_name, field_name, tokenizer)


def _write_shard(task: _Task) -> _Done:
    """Tokenize a task's documents and write them as its shard (in a worker)."""
    out, hash_name, field_name, tokenizer = run_state()
    documents: list[Any] = task.documents
    if tokenizer is not None:
        documents = [e.ids for e in tokenizer.encode_batch(documents, add_special_tokens=True)]
    shard = ShardFile.open(os.path.join(out, task.name), hash=hash_name)
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
    record = ShardRecord(info.name, info.samples, info.bytes, info.digest)
    return _Done(task.index, record, count, tokens)


def _write_group(
    shard: ShardFile, task: _Task, number: int, group: list[Any], field_name: str
) -> None:
    key = f"{task.index:06d}-{number:06d}"
    chunks, size = tar_chunks(key, encode_group(group, field_name))
    shard.writev(key, chunks, size)


def _text_rows(source: Any, options: BuildOptions) -> Iterator[tuple[str, Any]]:
    """(name, text) of every row, in order (text: what the row holds, checked later)."""
    column = options.text_column
    from .pysources import is_hf_dataset

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
    from .tables import _rows

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
    from ..pipeline.tokentable import TokenSource

    table = TokenSource(megatron=path).table
    pool = table.pools[0]
    if len(pool) and int(pool.min()) < 0:
        raise BuildError("the .bin holds negative token ids", url=path)
    return "tokens.u16" if not len(pool) or int(pool.max()) < (1 << 16) else "tokens.u32"


def _megatron_documents(path: str) -> Iterator[tuple[str, Any]]:
    from ..pipeline.tokentable import TokenSource

    table = TokenSource(megatron=path).table
    for d in range(table.documents):
        yield f"{path}:{d}", np.asarray(table.document(d))
