"""The ``shardkit`` command line: one module per subcommand, each with
``add_parser(subparsers)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import logging
import sys
from collections.abc import Sequence

from .._version import __version__
from ..errors import ShardkitError
from ._toolargs import PrintableFormatter, print_error

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
    "view": "view",
}


class UsageError(Exception):
    """A command-line usage error (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; with ``only`` (a name of :data:`COMMANDS`), of that
    one alone: ``shardkit build ...`` imports no other subcommand's module."""
    parser = _Parser(
        prog="shardkit",
        description="Pack small files into WebDataset tar / TFRecord shards and work with them.",
    )
    parser.add_argument("--version", action="version", version=f"shardkit {__version__}")
    _add_verbosity(parser, default=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            continue
        importlib.import_module(f"{__name__}.{module}").add_parser(sub)
    for command in sub.choices.values():  # `shardkit build SRC OUT -v` works too
        _add_verbosity(command, default=argparse.SUPPRESS)
    return parser


def _add_verbosity(parser: argparse.ArgumentParser, default: object) -> None:
    """-v / -q, before or after the subcommand (a subcommand's own default is SUPPRESS,
    so it never overwrites what was given before it)."""
    group = parser.add_argument_group("output")
    group.add_argument(
        "-v", "--verbose", action="store_true", default=default, help="log diagnostics, list all"
    )
    group.add_argument(
        "-q", "--quiet", action="store_true", default=default, help="no progress, lists or warnings"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 problems found, 2 usage/input error)."""
    args_list = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(args_list))
    try:
        args = parser.parse_args(args_list)
    except UsageError as exc:
        print_error(exc)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    if args.verbose and args.quiet:
        print_error("shardkit: -v and -q do not go together")
        return 2
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.ERROR if args.quiet else logging.WARNING,
        handlers=[handler],
    )
    try:
        return int(args.func(args))
    except (ShardkitError, UsageError) as exc:
        print_error(exc)
        return 2
    except KeyboardInterrupt:
        print_error("interrupted")
        return 130
    except BrokenPipeError:
        return 0


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names, when its first word that is not an option is one
    (only -v/-q/--version/-h come before it); else None: every subcommand's parser is made,
    for the top-level help and for argparse's error about an unknown command."""
    for word in argv:
        if word in ("-h", "--help", "--version"):
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def run() -> None:
    """Console-script entry point. A fatal signal prints Python's traceback of the thread
    that got it (faulthandler): a shard overwritten in place while a command reads it
    memory-mapped ends in "Fatal Python error: Bus error" (docs/reading.md), not in
    silence."""
    with contextlib.suppress(RuntimeError, ValueError, OSError):  # no usable stderr
        faulthandler.enable(all_threads=False)
    sys.exit(main())
