"""``shardkit build SRC OUT``: pack an image folder, a CSV/JSONL list or shards into shards."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, TextIO, get_args

from ..builder.options import (
    ENCODE_FORMATS,
    LAYOUTS,
    RESIZE_MODES,
    BuildOptions,
    OutputFormat,
    ValidateMode,
)
from ..digest import HASHES
from ..engines import ENGINES
from ..errors import ConfigError, EmptyBuildError, escape_controls
from ..handlers import ON_ERROR
from ..units import format_size
from ._toolargs import (
    add_tool_parser,
    integer,
    plural,
    positive,
    print_error,
    seconds,
    seed,
    size,
)

_EPILOG = """\
SRC is a folder (SRC/<class>/**/<file>; with --layout samples, SRC/**/<file>: files that
share a path without their extension are one sample), a .csv/.jsonl/.parquet list with a path
and a label column (or --field EXT=COLUMN, one per field; a parquet's bytes columns are
files), or shards (a .tar/.tfrecord file or a pattern like 'in-{000000..000009}.tar').
OUT gets {prefix}-000000.tar ... and manifest.json (written last). Rerunning the same
command after an interruption resumes it; the output bytes do not depend on --workers.
Each shard gets its .idx beside it (as `shardkit index OUT` writes) unless --no-index.
"""


def add_parser(sub: Any) -> None:
    help = "pack images / a file list / shards into shards (parallel, resumable)"
    parser = add_tool_parser(sub, "build", help=help, doc=__doc__, notes=_EPILOG)
    parser.add_argument("src", help="image folder, .csv/.jsonl/.parquet list, or shard URL pattern")
    parser.add_argument("out", help="output folder (one dataset per folder)")
    # Every option is a BuildOptions field of the same name; its default is that field's
    # (HelpFormatter shows it).
    default = {f.name: f.default for f in dataclasses.fields(BuildOptions)}

    def add(flag: str, help: str, **kwargs: Any) -> None:
        kwargs.setdefault("default", default[flag.removeprefix("--").replace("-", "_")])
        parser.add_argument(flag, help=help, **kwargs)

    add("--format", "shard format", choices=get_args(OutputFormat))
    add("--max-count", "samples per shard", type=positive, metavar="N")
    limit = format_size(BuildOptions().size_limit)
    add(
        "--max-size",
        f"bytes per shard: 100MB, 1GiB (default: {limit})",
        type=size,
        metavar="SIZE",
    )
    add("--workers", "processes (default: all cores)", type=positive, metavar="N")
    add("--shuffle", "seeded shuffle", action=argparse.BooleanOptionalAction)
    add("--seed", "shuffle seed", type=seed)
    add("--prefix", "shard name prefix")
    add(
        "--validate",
        "image checks: header (signature and complete file), full (decode), none",
        choices=get_args(ValidateMode),
    )
    add("--resize", "scale the shorter side to N px", type=positive, metavar="N")
    add(
        "--resize-mode",
        "with --resize: keep-ratio (shorter side N), center-crop or pad (exactly N x N)",
        choices=RESIZE_MODES,
    )
    add("--max-side", "shrink the longer side to N px", type=positive, metavar="N")
    add(
        "--encode",
        "store images as jpg, png or webp; keep: JPEG/WebP stay, resized others become PNG",
        choices=ENCODE_FORMATS,
    )
    add("--quality", "JPEG/WebP quality when re-encoding", type=integer(1, 100), metavar="Q")
    add("--on-error", "bad images: skip and report them, or stop", choices=ON_ERROR)
    add("--overwrite", "replace a dataset already in OUT", action="store_true")
    add("--layout", "folder: SRC/<class>/... (classes) or no classes (samples)", choices=LAYOUTS)
    parser.add_argument(
        "--field",
        action=_AppendField,
        dest="fields",
        default=default["fields"],
        metavar="EXT=COLUMN",
        help="a list's column as a field of each sample, repeatable: --field jpg=url "
        "--field txt=caption (media extensions read the file or URL; docs/build.md)",
    )
    add("--path-column", "CSV/JSONL path column", metavar="NAME")
    add("--label-column", "CSV/JSONL label column ('' for none)", metavar="NAME")
    add(
        "--root",
        "CSV/JSONL: folder of the relative paths and where keys start (default: the list's folder)",
        metavar="DIR",
    )
    add(
        "--fetch-concurrency",
        "http(s) lists: downloads in flight per worker",
        type=positive,
        metavar="N",
    )
    add(
        "--fetch-timeout",
        "http(s) lists: seconds per download; a host that keeps failing is skipped",
        type=seconds,
        metavar="S",
    )
    add("--engine", "where tasks run (docs/scaling.md)", choices=ENGINES)
    add("--address", "Ray/Dask cluster (HOST:PORT)", metavar="ADDR")
    add(
        "--hash",
        "each shard's digest in the manifest: blake3, sha256, xxh3-128 or none (docs/build.md)",
        choices=HASHES,
        metavar="ALGO",
    )
    add(
        "--tokenizer",
        "tokenize each row's text into token shards: a Hugging Face tokenizer.json, or a "
        "folder holding one (docs/tokens.md)",
        metavar="FILE",
    )
    add("--text-column", "with --tokenizer: the column holding the text", metavar="NAME")
    parser.add_argument(
        "--index",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write each shard's .idx beside it (the default; --no-index: none)",
    )
    parser.set_defaults(func=run)


def options_from(args: argparse.Namespace) -> BuildOptions:
    """The BuildOptions the command line gives (its options are named after the fields)."""
    fields = {f.name for f in dataclasses.fields(BuildOptions)}
    values = {name: value for name, value in vars(args).items() if name in fields}
    values["label_column"] = values["label_column"] or None
    values["fields"] = [_field(text) for text in values["fields"] or ()]
    return BuildOptions(**values)


class _AppendField(argparse.Action):
    """``--field``, repeatable, gathered in a tuple: the default stays BuildOptions' ``()``
    (argparse's own "append" cannot start from a tuple)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, (*getattr(namespace, self.dest), values))


def _field(text: str) -> tuple[str, str]:
    ext, equals, column = text.partition("=")
    if not equals:
        raise ConfigError(f"--field {text!r}: expected EXT=COLUMN, such as txt=caption")
    return ext, column


def run(args: argparse.Namespace) -> int:
    from ..builder import build  # what it reports with is imported once it has started

    options = options_from(args)
    try:
        with _ProgressBar(disable=args.quiet or not sys.stderr.isatty()) as bar:
            result = build(args.src, args.out, options=options, progress=bar.update)
    except EmptyBuildError as exc:  # a data problem, like verify's: exit 1, with the reasons
        print_error(exc)
        _list_skipped(exc.skipped, every=args.verbose, file=sys.stderr)
        return 1
    state = "already complete: " if result.resumed_tasks < 0 else ""
    print(
        f"{state}{plural(result.samples, 'sample')} in {plural(len(result.shards), 'shard')} "
        f"({format_size(result.bytes)}), {result.skipped_count} skipped, "
        f"{result.seconds:.1f} s -> {escape_controls(result.manifest)}"
    )
    if result.fetch:
        counts = ", ".join(f"{n} {escape_controls(what)}" for what, n in result.fetch.items())
        print(f"downloads: {counts}")
    if not args.quiet:
        from .. import storage
        from ..builder import SKIPPED_NAME

        listed_in = storage.join(result.out, SKIPPED_NAME)
        _list_skipped(
            result.skipped,
            every=args.verbose,
            file=sys.stdout,
            count=result.skipped_count,
            listed_in=listed_in,
        )
    return 0


_SHOWN = 10  # skipped files listed without -v


def _list_skipped(
    skipped: list[tuple[str, str]],
    every: bool,
    file: TextIO,
    count: int | None = None,
    listed_in: str = "",
) -> None:
    """The first skipped items; ``count`` of them in all, every one in ``listed_in``."""
    count = len(skipped) if count is None else count
    shown = skipped if every else skipped[:_SHOWN]
    for path, reason in shown:
        print(f"  skipped {escape_controls(path)}: {escape_controls(reason)}", file=file)
    if count > len(shown):
        more = count - len(shown)
        where = "-v lists them all" if count <= len(skipped) else f"all in {listed_in}"
        print(f"  ... and {more} more ({escape_controls(where)})", file=file)


class _ProgressBar:
    """One tqdm bar: samples done/total, samples/s, MB/s, shards, skipped."""

    def __init__(self, disable: bool) -> None:
        self._disable = disable
        self._bar: Any = None

    def update(self, snapshot: Any) -> None:
        if self._disable:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=snapshot.total, unit="img", dynamic_ncols=True)
        done = snapshot.samples + snapshot.skipped
        self._bar.total = snapshot.total
        self._bar.update(done - self._bar.n)
        rate = snapshot.bytes / snapshot.elapsed / 1e6 if snapshot.elapsed > 0 else 0.0
        self._bar.set_postfix_str(
            f"{rate:.0f} MB/s, {snapshot.shards} shards, {snapshot.skipped} skipped", refresh=False
        )

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
