"""Concatenate the samples of shards into one tar stream (stdout) or one file.

Inputs are shard files or URLs (brace patterns expand), folders (every shard in them, in
manifest order when there is a manifest.json) or '-' for a tar stream on stdin. Tar to tar
copies members byte for byte; --shuffle and TFRecord inputs or outputs go sample by
sample. --skip applies first, then --shuffle, then --count.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import escape_controls
from ..formats.names import FORMATS
from ._toolargs import (
    add_output_options,
    add_tool_parser,
    count,
    run_tool,
    seed,
)

EXAMPLES = """
  shardkit cat data/shard-{000000..000009}.tar -o all.tar
  shardkit cat data/ -c 100 | tar -t | head          # first 100 samples, to a pipe
  shardkit cat a.tar b.tar --shuffle 1000 --seed 1 -o mixed.tar
  shardkit cat train.tfrecord -o train.tar           # TFRecord in, tar out
  curl -s https://host/x.tar | shardkit cat - --skip 10 -c 5 -o five.tar
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "cat", help="concatenate shards into one stream or file", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS", help="shards, folders or '-'")
    parser.add_argument("-o", "--output", default="-", help="output file, or '-' (default)")
    parser.add_argument("-c", "--count", type=count, help="take the first N samples")
    parser.add_argument("--skip", type=count, default=0, help="skip the first N samples")
    parser.add_argument("--shuffle", type=count, default=0, metavar="N", help="shuffle buffer")
    parser.add_argument("--seed", type=seed, default=0, help="shuffle seed")
    parser.add_argument("--format", choices=FORMATS, help="output format (default: from -o's name)")
    add_output_options(parser, None)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools.cat import cat

    def summary(written: int) -> str | None:
        shown = escape_controls(args.output)
        return None if args.output == "-" else f"wrote {written} samples to {shown}"

    return run_tool(args, cat, summary, "count", "skip", "shuffle", "seed", "format")
