"""Summarise shards: samples, bytes, the spread of sample sizes, each field's kind and mean
size, per-class counts and per-shard counts.

Classes are counted by --label, a field spec (cls, json.label, ...); cls also finds a
TFRecord's image/class/label, and a manifest's class_to_idx turns labels into class
names. --json prints the same as JSON; --plot draws histograms of sample sizes, image
widths and heights, and classes to a PNG.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .._optional import require_all
from ..errors import escape_controls
from ._toolargs import ShardBar, add_tool_parser, check_stdin

EXAMPLES = """
  shardkit stats data/
  shardkit stats data/ --label json.label --plot stats.png
  shardkit stats data/shard-{000000..000009}.tar --json | jq .classes
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "stats", help="counts, sizes, fields and classes", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS_OR_FOLDER", help="what to count")
    parser.add_argument("--label", default="cls", help="class field spec; '' for none")
    parser.add_argument("--plot", metavar="PNG", help="draw histograms to this PNG file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


PLOT_NEEDS = ("PIL.Image", "matplotlib")
"""What ``--plot`` imports: Pillow reads image sizes, matplotlib draws."""


def run(args: argparse.Namespace) -> int:
    from ..tools.stats import format_stats, plot_stats, stats

    check_stdin(args.inputs)
    if args.plot:  # before the scan: every missing extra named at once
        require_all(PLOT_NEEDS, "stats --plot")
    with ShardBar(args) as bar:
        result = stats(
            args.inputs,
            label=args.label or None,
            image_sizes=bool(args.plot),
            progress=bar.update,
        )
    if args.json:
        json.dump(result.to_dict(), sys.stdout, indent=1)
        print()
    else:
        print(format_stats(result))
    if args.plot:
        plot_stats(result, args.plot)
        print(f"wrote {escape_controls(args.plot)}", file=sys.stderr)
    return 0
