"""Every hostile input kind against every reader and writer entry point (issue 19).

The registries live in tests/helpers/doors.py (state kinds: a foreign or tampered resume
state handed to every entry that takes one): an entry point registers once (what it
touches), a kind once (what it attacks, whether the entry must fail), and every pair that
meets runs here. The contract for each pair: within a time bound, the entry either
succeeds (where the kind may be ignored: a FIFO among the shards is not a shard) or fails
with one ShardkitError line (``Error: ...`` in the CLI); never a hang, never another
exception (RecursionError, MemoryError, a raw OSError), and the file outside every folder
is never touched.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.doors import KINDS, NOT_IO, TIME_BOUND, Zygote, entry_names, run_child

import shardkit
import shardkit.tools


@pytest.fixture(scope="session")
def zygote() -> Iterator[Zygote]:
    """One idle interpreter per xdist worker that has imported shardkit and torch; each
    kind runs in a fork of it (a process of its own, without paying the imports again)."""
    forks = Zygote()
    yield forks
    forks.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.slow
def test_every_entry_point_meets_every_hostile_kind(
    kind: str, tmp_path: Any, zygote: Zygote
) -> None:
    results = run_child(zygote, kind, os.path.join(str(tmp_path), "run"), timeout=600)
    assert results, "no entry point concerned"
    bad = []
    for result in results:
        entry, outcome = result["entry"], result["outcome"]
        message = result.get("message", "")
        if outcome in ("hang", "crash"):
            bad.append(f"{entry}: {outcome}: {result.get('type', '')} {message}")
        elif outcome == "ok" and result["must_fail"]:
            bad.append(f"{entry}: accepted the {kind} silently")
        elif outcome == "error" and not KINDS[kind].attacks:
            bad.append(f"{entry}: fails on clean input: {message}")
        elif outcome == "error" and ("\n" in message or len(message) > 1000):
            bad.append(f"{entry}: not one short line: {message[:300]!r}")
        if not result.get("outside_intact", True):
            bad.append(f"{entry}: touched the file outside the folder")
        if outcome != "hang" and result.get("seconds", 0) > TIME_BOUND:
            bad.append(f"{entry}: took {result['seconds']} s")
    assert not bad, "\n".join(bad)


def _public_entry_points() -> set[str]:
    """Every public function and class of shardkit.tools, and shardkit's readers, writers
    and runners (its exceptions and option/result records are neither)."""
    names = set()
    for name in shardkit.tools.__all__:
        value = getattr(shardkit.tools, name)
        if inspect.isfunction(value):
            names.add(name)
    for name in shardkit.__all__:
        value = getattr(shardkit, name)
        if inspect.isfunction(value) or (
            inspect.isclass(value)
            and not issubclass(value, BaseException)
            and not name.startswith(("Build", "Shard", "Tar"))
        ):
            names.add(name)
    names.update({"ShardWriter", "TarWriter", "read_shard"})
    return names


def _cli_commands() -> set[str]:
    from shardkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {f"cli {name}" for name in sub.choices}  # type: ignore[union-attr]


def test_every_public_entry_point_is_registered() -> None:
    registered = set(entry_names()) | set(NOT_IO)
    missing = (_public_entry_points() | _cli_commands()) - registered
    assert not missing, f"register these in tests/helpers/doors.py: {sorted(missing)}"
