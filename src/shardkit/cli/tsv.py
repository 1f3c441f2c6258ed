"""Print sample fields as a TSV table, one row per sample.

Fields are specs: __key__, __url__, __offset__, a field name (cls, txt, seg.png) or a
field followed by a path into its JSON (json.label, json.boxes.0.x). Tabs, newlines and
backslashes in cells are escaped (\\t, \\n, \\\\); binary fields show as <N bytes>; missing
ones are empty.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._toolargs import add_tool_parser, check_stdin, count

EXAMPLES = """
  shardkit tsv data/ -f __key__,cls,json.label > labels.tsv
  shardkit tsv data/shard-000000.tar -f __key__,txt --no-header -c 20
  shardkit cat data/ | shardkit tsv - -f __key__,json.width,json.height
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "tsv", help="print fields as a TSV table", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS", help="shards, folders or '-'")
    parser.add_argument(
        "-f", "--fields", required=True, action="append", help="comma-separated field specs"
    )
    parser.add_argument("--no-header", action="store_true", help="leave out the header row")
    parser.add_argument("-c", "--count", type=count, help="at most N rows")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools.tsv import write_tsv

    check_stdin(args.inputs)
    write_tsv(args.inputs, args.fields, sys.stdout, header=not args.no_header, count=args.count)
    return 0
