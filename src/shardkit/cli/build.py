"""``shardkit build SRC OUT``: pack an image folder, a CSV/JSONL list or shards into shards."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..digest import DEFAULT_HASH
from ..formats.cut import BUILD_MAX_COUNT, BUILD_MAX_SIZE
from ._toolargs import add_hash_option

_EPILOG = """\
SRC is an image folder (SRC/<class>/**/<image>), a .csv/.jsonl list with a path and a
label column, or shards (a .tar/.tfrecord file or a pattern like 'in-{000000..000009}.tar').
OUT gets {prefix}-000000.tar ... and manifest.json (written last). Rerunning the same
command after an interruption resumes it; the output bytes do not depend on --workers.
"""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "build",
        help="pack images / a file list / shards into shards (parallel, resumable)",
        description=__doc__,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("src", help="image folder, .csv/.jsonl list, or shard URL pattern")
    parser.add_argument("out", help="output folder (one dataset per folder)")
    add = parser.add_argument
    add("--format", choices=("tar", "tfrecord"), default="tar", help="shard format (tar)")
    count, size = BUILD_MAX_COUNT, f"{BUILD_MAX_SIZE // 1_000_000}MB"
    add("--max-count", type=int, default=count, metavar="N", help=f"samples per shard ({count})")
    add("--max-size", default=size, metavar="SIZE", help=f"bytes per shard: 100MB, 1GiB ({size})")
    add("--workers", type=int, default=None, metavar="N", help="processes (default: all cores)")
    add("--shuffle", action=argparse.BooleanOptionalAction, default=True, help="seeded shuffle")
    add("--seed", type=int, default=0, help="shuffle seed (0)")
    add("--prefix", default="shard", help="shard name prefix (shard)")
    add(
        "--validate",
        choices=("none", "header", "full"),
        default="header",
        help="image checks: header (default: signature and complete file), full (decode)",
    )
    add("--resize", type=int, default=None, metavar="N", help="scale the shorter side to N px")
    add("--max-side", type=int, default=None, metavar="N", help="shrink the longer side to N px")
    add("--quality", type=int, default=90, metavar="Q", help="JPEG/WebP quality when re-encoding")
    add(
        "--on-error",
        choices=("skip", "fail"),
        default="skip",
        help="bad images: skip and report them (default) or stop",
    )
    add("--overwrite", action="store_true", help="replace a dataset already in OUT")
    add("--path-column", default="path", metavar="NAME", help="CSV/JSONL path column (path)")
    add("--label-column", default="label", metavar="NAME", help="CSV/JSONL label column (label)")
    add("--engine", choices=("local", "ray", "dask"), default="local", help="where tasks run")
    add("--address", default=None, metavar="ADDR", help="Ray/Dask cluster (HOST:PORT)")
    add_hash_option(
        parser,
        DEFAULT_HASH,
        f"each shard's digest in the manifest: blake3, sha256, xxh3-128 or none ({DEFAULT_HASH})",
    )
    add("-q", "--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..builder import BuildOptions, build
    from ..units import format_size

    options = BuildOptions(
        format=args.format,
        max_count=args.max_count,
        max_size=args.max_size,
        workers=args.workers,
        shuffle=args.shuffle,
        seed=args.seed,
        prefix=args.prefix,
        validate=args.validate,
        resize=args.resize,
        max_side=args.max_side,
        quality=args.quality,
        on_error=args.on_error,
        overwrite=args.overwrite,
        path_column=args.path_column,
        label_column=args.label_column or None,
        engine=args.engine,
        address=args.address,
        hash=args.hash,
    )
    with _ProgressBar(disable=args.quiet) as bar:
        result = build(args.src, args.out, options=options, progress=bar.update)
    state = "already complete: " if result.resumed_tasks < 0 else ""
    print(
        f"{state}{result.samples} samples in {len(result.shards)} shards "
        f"({format_size(result.bytes)}), {len(result.skipped)} skipped, "
        f"{result.seconds:.1f} s -> {os.path.join(args.out, 'manifest.json')}"
    )
    return 0


class _ProgressBar:
    """One tqdm bar: samples done/total, samples/s, MB/s, shards, skipped."""

    def __init__(self, disable: bool) -> None:
        self._disable = disable
        self._bar: Any = None

    def update(self, progress: Any) -> None:
        if self._disable:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=progress.total, unit="img", dynamic_ncols=True)
        done = progress.samples + progress.skipped
        self._bar.total = progress.total
        self._bar.update(done - self._bar.n)
        rate = progress.bytes / progress.elapsed / 1e6 if progress.elapsed > 0 else 0.0
        self._bar.set_postfix_str(
            f"{rate:.0f} MB/s, {progress.shards} shards, {progress.skipped} skipped", refresh=False
        )

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
