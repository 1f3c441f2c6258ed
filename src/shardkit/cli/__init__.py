"""The ``shardkit`` command line: one module per subcommand, each with
``add_parser(subparsers)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from .._version import __version__
from ..errors import ShardkitError

__all__ = ["main", "run"]

# name -> module under shardkit.cli; each module must stay light to import.
COMMANDS: dict[str, str] = {
    "build": "build",
    "demo": "demo",
    "cat": "cat",
    "split": "split",
    "show": "show",
    "tsv": "tsv",
    "verify": "verify",
    "index": "index",
    "stats": "stats",
    "convert": "convert",
    "proc": "proc",
}


class UsageError(Exception):
    """A command-line usage error (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="shardkit",
        description="Pack small files into WebDataset tar / TFRecord shards and work with them.",
    )
    parser.add_argument("--version", action="version", version=f"shardkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log diagnostics")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in COMMANDS.values():
        importlib.import_module(f"{__name__}.{module}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 problems found, 2 usage/input error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except (ShardkitError, UsageError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
