"""Write a per-shard index (<shard>.idx, JSON): each sample's key, byte offset and size.

An index gives exact sample counts without reading a shard, and random access to one
sample of an uncompressed shard (shardkit.tools.index.read_indexed_sample). A shard with
problems (see shardkit verify) is not indexed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import escape_controls
from ._toolargs import ShardBar, add_tool_parser, plural

EXAMPLES = """
  shardkit index data/                     # data/shard-000000.tar.idx, ...
  shardkit index data/shard-{000000..000009}.tar --sha256
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "index", help="write per-shard sample indexes", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS", help="shards or folders")
    parser.add_argument("--sha256", action="store_true", help="record each shard's sha256")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools import ShardIndex, resolve_inputs, write_indexes

    def done(url: str, index: ShardIndex) -> None:  # each shard, with -v
        print(f"{escape_controls(url)}.idx\t{index.samples} samples", file=sys.stderr)

    urls = [ref.url for ref in resolve_inputs(args.inputs)]
    with ShardBar(args) as bar:
        indexes = write_indexes(
            urls, sha256=args.sha256, on_shard=done if args.verbose else None, progress=bar.update
        )
    total = sum(index.samples for index in indexes)
    if not args.quiet:
        print(f"indexed {plural(len(indexes), 'shard')}, {total} samples", file=sys.stderr)
    return 0
