"""Run a shell command on every sample, -p at a time, and pack what it leaves.

Each sample is unpacked into a fresh temporary folder as sample.<ext> files (--names key:
<key's last component>.<ext>); the command runs there (cwd) with SHARDKIT_KEY,
SHARDKIT_URL, SHARDKIT_INDEX, SHARDKIT_STEM and SHARDKIT_FIELDS set; afterwards every
regular file in the folder (extension = after the first dot) becomes the output sample,
under the same key. Output order is input order. The command's stdout goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from ..engines import ENGINES
from ..errors import ConfigError
from ..handlers import ON_ERROR
from ._toolargs import (
    add_output_options,
    add_tool_parser,
    positive,
    run_tool,
    seconds,
)

logger = logging.getLogger(__name__)

EXAMPLES = """
  shardkit proc data/ -e 'tr a-z A-Z < sample.txt > sample.upper.txt' -o out/s-%06d.tar \\
      --max-count 10000 -p 4
  shardkit proc in.tar -p 2 -e 'python3 -c "from PIL import Image; \\
      Image.open(\\"sample.jpg\\").resize((64, 64)).save(\\"sample.jpg\\")"' -o small.tar
  shardkit cat data/ -c 10 | shardkit proc - -e 'rm sample.json' -o - | tar -t
"""


def add_parser(sub: Any) -> None:
    parser = add_tool_parser(
        sub, "proc", help="run a shell command on every sample", doc=__doc__, epilog=EXAMPLES
    )
    parser.add_argument("inputs", nargs="+", metavar="SHARDS", help="shards, folders or '-'")
    parser.add_argument(
        "-e", "--command", dest="shell_command", help="shell command to run (required)"
    )
    # The old spelling: -c means --count in cat, show and tsv, so proc's is -e now.
    parser.add_argument("-c", dest="old_command", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", required=True, help="file, '-' or shard pattern")
    parser.add_argument(
        "-p",
        "--parallel",
        dest="workers",
        metavar="PARALLEL",
        type=positive,
        default=1,
        help="samples at once",
    )
    parser.add_argument(
        "--on-error", choices=ON_ERROR, default="fail", help="a failing sample: fail or skip it"
    )
    parser.add_argument("--names", choices=("sample", "key"), default="sample")
    parser.add_argument("--timeout", type=seconds, help="seconds per sample")
    add_output_options(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="ray/dask: one cluster task per input shard, -o a pattern (docs/scaling.md)",
    )
    parser.add_argument("--address", help="the Ray or Dask cluster (HOST:PORT)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..tools.proc import ProcResult, proc

    _command(args)

    def summary(result: ProcResult) -> str:
        skipped = f", skipped {result.skipped}" if result.skipped else ""
        return f"processed {result.samples_in} samples, wrote {result.samples_out}{skipped}"

    def tool(inputs: list[str], output: str, **options: Any) -> ProcResult:
        return proc(inputs, args.shell_command, output, **options)

    options = ["workers", "on_error", "names", "timeout", "max_count", "max_size", "engine"]
    return run_tool(args, tool, summary, *options, "address")


def _command(args: argparse.Namespace) -> None:
    """``-e/--command``; the old ``-c`` still works, with a warning that says what to type."""
    if args.old_command is not None:
        if args.shell_command is not None:
            raise ConfigError("give the command once, with -e/--command")
        logger.warning("proc -c is now -e/--command (-c is --count in cat, show and tsv)")
        args.shell_command = args.old_command
    if args.shell_command is None:
        raise ConfigError("proc needs the command to run: -e/--command 'CMD'")
