"""Every number from outside is checked where it enters: each numeric option of every
subcommand (found by walking the parser, so a new option is covered) refuses a negative,
zero (where zero means nothing), huge, NaN/inf or non-number value with exit 2 and one
``Error:`` line naming the option; BuildOptions and Cut refuse the same values with one
ConfigError (shardkit.units: check_int, check_seconds, parse_size)."""

from __future__ import annotations

import argparse
import math
from typing import Any

import pytest

from shardkit.builder.options import BuildOptions
from shardkit.cli import build_parser, main
from shardkit.cli._toolargs import count, port, seed
from shardkit.errors import ConfigError
from shardkit.formats.cut import Cut
from shardkit.units import check_int, check_seconds, parse_int, parse_seconds, parse_size

HUGE = "1" + "0" * 30
BAD = ("-1", HUGE, "nan", "inf", "-inf", "abc", "1e3x", "")
ZERO_MEANS_SOMETHING = (count, port, seed)  # --skip 0, --port 0 (any free port), --seed 0


def numeric_options() -> list[tuple[str, str, Any]]:
    """(command, option, type) for every option of every subcommand that takes a number."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, subparser in sub.choices.items():
        for action in subparser._actions:
            if action.type is None or not action.option_strings or action.choices:
                continue
            found.append((command, max(action.option_strings, key=len), action.type))
    return found


OPTIONS = numeric_options()


def test_the_walk_finds_the_numeric_options() -> None:
    names = {(command, option) for command, option, _ in OPTIONS}
    for expected in [
        ("build", "--max-count"),
        ("build", "--max-size"),
        ("build", "--workers"),
        ("build", "--resize"),
        ("build", "--quality"),
        ("build", "--seed"),
        ("build", "--fetch-timeout"),
        ("cat", "--seed"),
        ("proc", "--timeout"),
        ("view", "--port"),
        ("view", "--page-size"),
        ("split", "--max-shards"),
    ]:
        assert expected in names


@pytest.mark.parametrize(
    ("command", "option", "kind"),
    OPTIONS,
    # no address in an id: every xdist worker must collect the same names
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__qualname__", type(v).__name__),
)
def test_no_option_takes_a_bare_int_or_float(command: str, option: str, kind: Any) -> None:
    """int/float as an argparse type lets through 10**30, -1 and nan: options use the
    checked types of cli/_toolargs (shardkit.units underneath)."""
    assert kind not in (int, float), f"{command} {option} uses a bare {kind.__name__}"


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command, option, kind in OPTIONS
        for value in (*BAD, *(() if kind in ZERO_MEANS_SOMETHING else ("0",)))
    ],
    ids=lambda v: str(v)[:12],
)
def test_a_bad_number_is_one_error_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], command: str, option: str, value: str
) -> None:
    status = main([command, f"{option}={value}", "in", "out"])
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("Error: "), err
    assert option in err and "Traceback" not in err


@pytest.mark.parametrize(
    "values",
    [
        {"workers": 10**30},
        {"workers": 0},
        {"max_count": 10**30},
        {"max_count": math.nan},
        {"max_size": 1e30},
        {"max_size": math.inf},
        {"quality": 101},
        {"quality": math.nan},
        {"seed": -1},
        {"seed": 2**64},
        {"seed": 1.5},
        {"resize": 10**30},
        {"fetch_concurrency": 10**30},
        {"fetch_timeout": math.nan},
        {"fetch_timeout": 1e30},
    ],
    ids=str,
)
def test_build_options_refuse_bad_numbers(values: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=next(iter(values))):
        BuildOptions(**values)


def test_cut_refuses_a_huge_count() -> None:
    with pytest.raises(ConfigError, match="max_count"):
        Cut(max_count=10**30)


def test_the_checks() -> None:
    assert check_int(5, "n") == 5 and check_int(0, "n", low=0) == 0
    assert parse_int(" 42 ", "n") == 42 and parse_seconds("0.5", "t") == 0.5
    assert check_seconds(3, "t") == 3.0 and parse_size("1GiB") == 2**30
    for bad in (True, 1.0, "1", None, 0, 2**63):
        with pytest.raises(ConfigError, match=r"^n must"):
            check_int(bad, "n")
    with pytest.raises(ConfigError, match="characters") as refused:
        parse_int("9" * 10_000_000, "n")  # a 10 MB number: refused, message bounded
    assert len(str(refused.value)) < 200
