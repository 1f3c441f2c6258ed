"""Helpers for the reading-core tests: make the tar header parser fail loudly, so that a
read that should slice by a member table cannot fall back to parsing unseen."""

from __future__ import annotations

from typing import Any

import pytest

from shardkit.formats import _targroup, _tarparse

#: Sample fields: sizes around the block edges, an empty member, layouts that change
#: within a shard, upper-case extensions (read lower-cased), a dotted extension.
FIELDS: list[dict[str, bytes]] = [
    {"txt": b"x" * 511, "cls": b"1"},
    {"txt": b"y" * 512, "cls": b""},
    {"txt": b"z" * 513, "cls": b"3", "json": b"{}"},
    {"JPG": b"\xff\xd8" + b"j" * 3000},
    {"seg.png": b"p" * 1024, "cls": b"5"},
]

#: The tar header parser's entry points.
PARSER = [
    (_targroup, "plain_header"),
    (_targroup, "plain_members"),
    (_targroup, "split_name"),
    (_targroup, "_buffer_samples"),
    (_targroup, "_samples"),
    (_tarparse, "plain_header"),
    (_tarparse, "plain_members"),
    (_tarparse.TarScanner, "__iter__"),
    (_tarparse.TarScanner, "_any_member"),
]


def refuse_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, every entry point of the tar header parser raises (in a forked
    worker too)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tar header was parsed on the member table's path")

    for owner, name in PARSER:
        monkeypatch.setattr(owner, name, refuse)
