"""Check shards and report every problem, one per line on stdout:

    shard<TAB>key<TAB>offset<TAB>problem       (- where the key or offset is unknown)

Checks: tar headers, truncation and the end-of-archive marker; TFRecord CRCs and
Examples; sample grouping (a key whose members are not adjacent, duplicate extensions,
links); a folder's manifest.json (sizes, digests, sample counts, shards missing or not
listed, a digest missing where its options name a hash); index files (<shard>.idx: keys,
offsets, and the shard's size and sha256 when recorded). What could not be checked (shards
no digest covers) is said on stderr. --decode also decodes every image and every json,
text and int field. Exit status: 0 all good, 1 problems found, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import escape_controls
from ._toolargs import ShardBar, add_tool_parser, check_stdin, plural

EXAMPLES = """
  shardkit verify data/                   # every shard, against data/manifest.json
  shardkit verify data/shard-{000000..000099}.tar --decode
  shardkit verify data/ --sha256 > problems.tsv || echo "found problems"
  curl -s https://host/x.tar | shardkit verify -
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "verify", help="check shards, report every problem", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS_OR_FOLDER", help="what to check")
    parser.add_argument("--decode", action="store_true", help="decode every image and field")
    parser.add_argument(
        "--sha256", action="store_true", help="hash every shard (default: only against a manifest)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools.verify import Problem, verify

    check_stdin(args.inputs)

    def show(problem: Problem) -> None:
        print(problem.line(), flush=True)

    with ShardBar(args) as bar:
        report = verify(
            args.inputs,
            decode=args.decode,
            sha256=True if args.sha256 else None,
            on_problem=show,
            progress=bar.update,
        )
    problems = len(report.problems)
    if not args.quiet:
        for line in report.unchecked:
            print(f"not checked: {escape_controls(line)}", file=sys.stderr)
        print(
            f"verified {plural(len(report.shards), 'shard')}, {report.samples} samples: "
            f"{problems or 'no'} problem{'s' if problems != 1 else ''}",
            file=sys.stderr,
        )
    return 1 if problems else 0
