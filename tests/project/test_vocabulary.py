"""One vocabulary: one meaning per word and per short flag, defaults stated once."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

import pytest

import shardkit
from shardkit import BuildOptions
from shardkit.cli import build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_each_short_flag_means_one_thing_in_every_subcommand() -> None:
    """Regression (#11): -c was --count in cat, show and tsv, and --command in proc."""
    meanings: dict[str, set[str]] = {}
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue  # an old spelling kept working (proc -c)
            shorts = [o for o in action.option_strings if len(o) == 2 and o != "-h"]
            longs = [o for o in action.option_strings if o.startswith("--")]
            for short in shorts:
                meanings.setdefault(short, set()).update(longs or [f"{name}:{action.dest}"])
    assert {flag: names for flag, names in meanings.items() if len(names) > 1} == {}


def test_build_cli_defaults_are_the_build_options_defaults() -> None:
    """Regression (#11): the CLI restated each default (--max-size "250MB", ...)."""
    parser = _subparsers()["build"]
    defaults = {f.name: f.default for f in dataclasses.fields(BuildOptions)}
    cli = {a.dest: a.default for a in parser._actions if a.dest in defaults}
    assert cli and cli == {name: defaults[name] for name in cli}
    assert set(defaults) - set(cli) == set()  # every option reaches the command line


def test_handler_skip_drops_one_item_as_on_error_skip_does() -> None:
    from shardkit.errors import DataError
    from shardkit.handlers import ON_ERROR, resolve_handler

    assert "skip" in ON_ERROR
    bad = DataError("bad")
    assert resolve_handler("skip")(bad) is True  # go on after the bad item
    assert resolve_handler("warn_and_stop")(bad) is False  # the old meaning, spelled out
    assert resolve_handler("ignore_and_stop")(bad) is False


def test_policy_and_engine_types_are_defined_once() -> None:
    import importlib

    from shardkit import engines, handlers
    from shardkit.builder import options

    proc = importlib.import_module("shardkit.tools.proc")

    assert options.OnError is handlers.OnError and proc.OnError is handlers.OnError
    assert BuildOptions.__annotations__["engine"] == "Engine"
    assert options.Engine is engines.Engine


def test_proc_old_short_flag_still_works_and_says_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with shardkit.ShardWriter(str(tmp_path / "in-%06d.tar")) as sink:
        sink.write({"__key__": "a", "txt": b"x"})
    out = str(tmp_path / "out.tar")
    with caplog.at_level(logging.WARNING):
        assert main(["proc", str(tmp_path / "in-000000.tar"), "-c", "true", "-o", out]) == 0
    assert "proc -c is now -e/--command" in caplog.text
    assert [s["__key__"] for s in shardkit.read_shard(out)] == ["a"]
    assert main(["proc", str(tmp_path / "in-000000.tar"), "-o", out]) == 2
