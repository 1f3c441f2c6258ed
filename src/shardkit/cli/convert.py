"""Convert shards between WebDataset tar and TFRecord, keeping keys and every field.

Both directions use the shardkit TFRecord schema (docs/tfrecord.md), the layout that
build --format tfrecord writes: the image field (jpg, png, ...) becomes image/encoded with
image/format, image/height and image/width; cls becomes the int64 image/class/label; every
other field a bytes feature holding its bytes as they are, plus __key__. TFRecord -> tar
maps these back, so a round trip returns every field exactly; other features map int64 ->
decimal text, float -> text, several values -> JSON, '/' in a name -> '.'. The output is
a file, '-' or a shard pattern; its extension gives the format unless --to says.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import escape_controls
from ..formats.names import FORMATS
from ._toolargs import (
    add_output_options,
    add_tool_parser,
    plural,
    run_tool,
)

EXAMPLES = """
  shardkit convert data/ -o tf/train-%05d.tfrecord --max-count 10000
  shardkit convert tf/train-00000.tfrecord -o back.tar
  shardkit convert data/shard-000000.tar -o - --to tfrecord > x.tfrecord
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(sub, "convert", help="tar <-> TFRecord", doc=__doc__, epilog=EXAMPLES)
    parser.add_argument("inputs", nargs="+", metavar="SRC", help="shards, folders or '-'")
    parser.add_argument("-o", "--output", required=True, help="file, '-' or shard pattern")
    parser.add_argument("--to", choices=FORMATS, help="output format")
    add_output_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..formats.record import ShardInfo
    from ..tools.convert import convert

    def summary(result: tuple[int, list[ShardInfo]]) -> str | None:
        samples, shards = result
        where = plural(len(shards), "shard") if shards else escape_controls(args.output)
        return None if args.output == "-" else f"converted {samples} samples into {where}"

    return run_tool(args, convert, summary, "to", "max_count", "max_size")
