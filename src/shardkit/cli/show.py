"""Print samples readably: the key, then each field's kind, size and a short preview.

With --grid, draw a PNG contact sheet of the first -c images instead (key and label under
each image; --columns tiles across, --tile pixels each). Labels show as class names when
the shards' manifest.json has class_to_idx; a TFRecord's image/encoded and
image/class/label are found without flags. Control characters in keys and values are
printed escaped (\\x1b). A --fields, --image or --label name that the first sample lacks
is refused.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import escape_controls
from ._toolargs import add_tool_parser, check_stdin, positive

EXAMPLES = """
  shardkit show data/shard-000000.tar -c 3
  shardkit show data/ -c 5 --fields jpg,cls,json
  shardkit show data/ --grid sheet.png -c 64 --columns 8 --tile 160
  shardkit cat data/ --shuffle 1000 | shardkit show - --grid random.png --label json.label
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "show", help="print samples, or draw a contact sheet", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS", help="shards, folders or '-'")
    parser.add_argument("-c", "--count", type=positive, help="samples (default: 10; grid: 64)")
    parser.add_argument("--fields", help="comma-separated fields to show (default: all)")
    parser.add_argument("--width", type=positive, default=60, help="preview width in characters")
    parser.add_argument("--grid", metavar="PNG", help="write a contact sheet to this file")
    parser.add_argument("--columns", type=positive, default=8, help="grid columns")
    parser.add_argument("--tile", type=positive, default=160, help="grid tile pixels")
    parser.add_argument("--image", help="image field for the grid (default: the first)")
    parser.add_argument(
        "--label", default="cls", help="grid label field spec (cls also finds image/class/label)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools import class_names, format_samples, iter_samples, resolve_inputs

    check_stdin(args.inputs)
    refs = resolve_inputs(args.inputs)
    samples = iter_samples(refs)
    names = class_names(refs)
    if args.grid:
        from ..tools.grid import contact_sheet

        sheet = contact_sheet(
            samples,
            args.grid,
            count=args.count or 64,
            columns=args.columns,
            tile=args.tile,
            image_field=args.image,
            label=args.label or None,
            class_names=names,
        )
        width, height = sheet.size
        print(
            f"wrote {escape_controls(args.grid)}: {sheet.images} images, "
            f"{sheet.columns}x{sheet.rows} tiles, {width}x{height} px",
            file=sys.stderr,
        )
        return 0
    fields = [f.strip() for f in args.fields.split(",")] if args.fields else None
    limit = args.count or 10
    shown = format_samples(samples, fields=fields, width=args.width, class_names=names)
    for index, text in enumerate(shown):
        print(text)
        if index + 1 >= limit:
            break
    return 0
