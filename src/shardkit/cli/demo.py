"""``shardkit demo OUT``: make a small image folder, pack it, read it back, summarise."""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ..errors import escape_controls
from ._toolargs import add_tool_parser, positive


def add_parser(sub: Any) -> None:
    help = "pack a generated sample image folder and read it back"
    parser = add_tool_parser(sub, "demo", help=help, doc=__doc__)
    parser.add_argument("out", help="folder to create (sample images and shards go inside)")
    parser.add_argument("--images", type=positive, default=600, help="number of images")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..demo import add_bad_files, make_image_folder, pack_and_read

    source = os.path.join(args.out, "images")
    shards = os.path.join(args.out, "shards")
    started = time.perf_counter()
    classes = make_image_folder(source, count=args.images)
    bad = add_bad_files(source, classes)
    print(f"made {args.images} JPEGs in {len(classes)} classes under {escape_controls(source)},")
    print(f"  plus {len(bad)} broken files of the kinds real datasets have")
    summary = pack_and_read(source, shards)
    elapsed = time.perf_counter() - started
    for line in summary:
        print(escape_controls(line))
    print(f"done in {elapsed:.1f} s")
    return 0
