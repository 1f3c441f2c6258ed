"""Look at a dataset in the browser: a local, read-only web viewer.

SOURCE is anything shardkit.Dataset takes: a folder, a manifest.json, a shard pattern, a
URL (http, s3, gs). The viewer shows a paged grid of thumbnails, a page per sample with
every field (images, audio and video players, text, pretty JSON, sizes, the shard and
byte offset), filters by key substring and class, and a stats page. With an .idx file
next to every shard (shardkit index), any page is read directly; without, the samples
are read forward from the first shard (the page says so).

It listens on 127.0.0.1 (this machine only) unless --host says otherwise, and prints the
address to open. Nothing in a shard runs in the browser: pages hold no script, and every
key, caption and JSON value is escaped. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from ..errors import escape_controls
from ._toolargs import add_tool_parser, port, positive, print_error

EXAMPLES = """
  shardkit view data/
  shardkit view 'data/shard-{000000..000099}.tar' --port 8800
  shardkit view s3://bucket/train/ --page-size 100 --label json.label
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "view", help="look at samples in the browser", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("source", metavar="SOURCE", help="folder, manifest, pattern or URL")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=port, default=8765, help="port (0: any free port)")
    parser.add_argument("--page-size", type=positive, default=48, help="samples per page")
    parser.add_argument("--label", default="cls", help="label field spec for classes ('' for none)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools.view import Viewer

    if args.source == "-":
        print_error("view: SOURCE cannot be '-' (stdin): pages are read more than once")
        return 2
    viewer = Viewer(
        args.source,
        host=args.host,
        port=args.port,
        page_size=args.page_size,
        label=args.label or None,
    )
    with viewer:
        if viewer.catalog.note and not args.quiet:
            print(f"note: {escape_controls(viewer.catalog.note)}", file=sys.stderr)
        print(f"shardkit view: {viewer.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            viewer.serve_forever()
    return 0
