"""Argument helpers shared by the shard-tool subcommands (cat, split, show, ...)."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..digest import digest_hex
from ..errors import MESSAGE_LIMIT, ConfigError, escape_controls, shorten
from ..units import MAX_INT, MAX_SEED, parse_int, parse_seconds, parse_size

__all__ = [
    "HelpFormatter",
    "PrintableFormatter",
    "ShardBar",
    "add_hash_option",
    "add_output_options",
    "add_tool_parser",
    "check_stdin",
    "check_stdout",
    "count",
    "digest_printer",
    "integer",
    "plural",
    "port",
    "positive",
    "plain",
    "print_error",
    "run_tool",
    "seconds",
    "seed",
    "size",
]

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def plain(doc: str | None) -> str:
    """A docstring for ``--help``, with reStructuredText's inline markup as plain text."""
    return _ROLE.sub(lambda m: m.group(1) or m.group(2), doc or "").strip()


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as typed; each option's default, when it has one that
    says something (not None or False) and its help does not give it, after its help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or any(default is nothing for nothing in (None, False, argparse.SUPPRESS))
            or "default" in text
        ):
            return text
        return f"{text} (default: %(default)s)"


def print_error(what: object) -> None:
    """The one way the CLI reports a user error: ``Error: WHAT`` on stderr, one line of
    bounded size, every control character escaped (:func:`shardkit.errors.escape_controls`)."""
    print(f"Error: {escape_controls(shorten(str(what), MESSAGE_LIMIT))}", file=sys.stderr)


class PrintableFormatter(logging.Formatter):
    """Log lines as the CLI prints them: each message one escaped line of bounded size (a
    key or a file name from the data cannot send the terminal an escape sequence)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(shorten(super().formatMessage(record), MESSAGE_LIMIT))


def add_tool_parser(
    sub: Any, name: str, *, help: str, doc: str | None, epilog: str = "", notes: str | None = None
) -> Any:
    """A subcommand parser whose ``--help`` shows the module docs and the examples
    (``epilog``) as typed, or ``notes`` as they are."""
    return sub.add_parser(
        name,
        help=help,
        description=plain(doc or help),
        epilog="examples:\n" + epilog.strip("\n") if epilog else notes,
        formatter_class=HelpFormatter,
    )


def _option_type(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse ``type=`` from a :mod:`shardkit.units` parser: its ConfigError becomes
    argparse's one line, ``argument --OPTION: value must be ...`` (exit 2)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(exc.message.removeprefix("value ")) from None

    convert.__name__ = name
    return convert


def integer(low: int = 1, high: int = MAX_INT) -> Callable[[str], int]:
    """argparse type: an integer from ``low`` to ``high`` (:func:`shardkit.units.parse_int`)."""
    return _option_type(lambda text: parse_int(text, "value", low=low, high=high), "integer")


count = integer(0)
"""argparse type: an integer >= 0."""
positive = integer(1)
"""argparse type: an integer >= 1."""
port = integer(0, 65535)
"""argparse type: a TCP port (0: any free one)."""
seed = integer(0, MAX_SEED)
"""argparse type: a shuffle seed."""
seconds = _option_type(lambda text: parse_seconds(text, "value"), "seconds")
"""argparse type: a duration in seconds, above 0."""
size = _option_type(lambda text: parse_size(text, name="value"), "size")
"""argparse type: a size such as 500MB, 1GiB or 1000000."""


def check_stdin(inputs: Sequence[str]) -> None:
    """Refuse to read a tar stream from an interactive terminal."""
    if "-" in inputs and sys.stdin is not None and sys.stdin.isatty():
        raise ConfigError("'-' reads a tar stream from stdin, but stdin is a terminal: pipe one in")


def check_stdout(output: str) -> None:
    """Refuse to write binary shards to an interactive terminal."""
    if output == "-" and sys.stdout is not None and sys.stdout.isatty():
        raise ConfigError("refusing to write a binary stream to a terminal: use -o FILE or a pipe")


def add_hash_option(parser: Any, default: str, help: str) -> None:
    """``--hash ALGO``: the digest algorithm (:mod:`shardkit.digest`)."""
    from ..digest import HASHES

    parser.add_argument("--hash", choices=HASHES, default=default, metavar="ALGO", help=help)


TOOL_HASH_HELP = (
    "print each file's digest (blake3, sha256, xxh3-128), one 'HEX  FILE' line as b3sum, "
    "sha256sum and xxh128sum write and check (-c); default none"
)

PATTERN_LIMITS = ("samples per shard (patterns)", "bytes per shard (patterns)")
"""The help of ``--max-count`` and ``--max-size`` where the output may be one file."""


def add_output_options(parser: Any, limits: tuple[str, str] | None = PATTERN_LIMITS) -> None:
    """The options of a subcommand that writes shards (:func:`run_tool`): ``--max-count``
    and ``--max-size`` with the help texts ``limits`` (None: the output is one file or
    stream), and ``--hash``."""
    if limits is not None:
        parser.add_argument("--max-count", type=positive, help=limits[0])
        parser.add_argument("--max-size", type=size, help=limits[1])
    add_hash_option(parser, "none", TOOL_HASH_HELP)


def digest_printer(hash: str, output: str) -> Callable[[Any], None] | None:
    """With ``--hash ALGO``: prints a committed file's digest as ``HEX  FILE`` (``*sum -c``
    reads it back), on stdout, or on stderr when the data itself goes to stdout."""
    if hash == "none":
        return None
    stream = sys.stderr if output == "-" else sys.stdout

    def show(info: Any) -> None:
        print(f"{digest_hex(info.digest)}  {escape_controls(info.url)}", file=stream, flush=True)

    return show


def plural(count: int, noun: str) -> str:
    """``1 shard``, ``2 shards``, ``0 shards``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


class ShardBar:
    """One live tqdm bar of input shards, drawn only on a terminal: on a pipe or a log file
    (stderr not a TTY) and with ``-q`` nothing is drawn, and the command's summary line is
    all that is printed. :meth:`update` is a tool's ``progress=`` callback
    (:class:`shardkit.tools._progress.ToolProgress`)."""

    def __init__(self, args: argparse.Namespace, unit: str = "shard") -> None:
        self._show = not getattr(args, "quiet", False) and sys.stderr.isatty()
        self._unit = unit
        self._bar: Any = None

    def update(self, snapshot: Any) -> None:
        if not self._show:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=snapshot.total, unit=self._unit, dynamic_ncols=True, leave=False)
        self._bar.update(snapshot.shards - self._bar.n)

    def __enter__(self) -> ShardBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


R = TypeVar("R")


def run_tool(
    args: argparse.Namespace,
    tool: Callable[..., R],
    summary: Callable[[R], str | None],
    *options: str,
    stdout: bool = True,
) -> int:
    """The one body of the subcommands that write shards (cat, convert, split, proc):
    refuse a terminal as the input stream (and as the output, where it may be ``-``:
    ``stdout``), run ``tool(args.inputs, args.output, OPTION=args.OPTION, ...)`` for each
    of ``options`` (the options' ``dest`` is the tool's keyword) with the bar of input
    shards (:class:`ShardBar`) and the ``--hash`` digest printer plugged in, then print
    ``summary(result)`` on stderr (None: no line) unless ``-q``."""
    check_stdin(args.inputs)
    if stdout:
        check_stdout(args.output)
    with ShardBar(args) as bar:
        result = tool(
            args.inputs,
            args.output,
            hash=args.hash,
            on_shard=digest_printer(args.hash, args.output),
            progress=bar.update,
            **{name: getattr(args, name) for name in options},
        )
    line = summary(result)
    if line is not None and not args.quiet:
        print(line, file=sys.stderr)
    return 0
