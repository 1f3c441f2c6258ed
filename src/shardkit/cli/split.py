"""Cut a sample stream into shards named by a pattern (%06d or {shard:06d}).

Each shard is written under a temporary name and renamed when complete. A shard is full
at --max-count samples, or when the next sample would take it over --max-size bytes (the
real file size). --max-shards stops after that many shards; the rest of the input is not
read. The format follows the pattern's extension (.tar, .tar.gz, .tfrecord, ...).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._toolargs import (
    add_output_options,
    add_tool_parser,
    plural,
    positive,
    run_tool,
)

EXAMPLES = """
  shardkit split big.tar -o out/shard-%06d.tar --max-count 10000
  shardkit cat a.tar b.tar | shardkit split - -o out/part-{shard:04d}.tar --max-size 1GB
  shardkit split data/ -o small/s-%06d.tar --max-count 100 --max-shards 3
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "split", help="cut a sample stream into shards", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument(
        "inputs", nargs="*", default=["-"], metavar="INPUT", help="shards, folders or '-' (default)"
    )
    parser.add_argument("-o", "--output", required=True, metavar="PATTERN", help="shard pattern")
    add_output_options(parser, ("samples per shard", "bytes per shard (e.g. 500MB, 1GiB)"))
    parser.add_argument("--max-shards", type=positive, help="stop after K shards")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..formats.record import ShardInfo
    from ..tools.split import split

    def summary(shards: list[ShardInfo]) -> str:
        total = sum(info.samples for info in shards)
        return f"wrote {total} samples into {plural(len(shards), 'shard')}"

    options = ("max_count", "max_size", "max_shards")
    return run_tool(args, split, summary, *options, stdout=False)  # -o is a shard pattern
