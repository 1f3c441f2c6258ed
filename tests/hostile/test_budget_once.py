"""The budget reads each ``SHARDKIT_MAX_<KIND>`` once, not at every check: a check runs per
sample (per image, per record), so its cost is a dict lookup and a compare."""

from __future__ import annotations

import pytest

from shardkit import budget, config
from shardkit.errors import LimitError


def test_a_check_reads_the_environment_once_per_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def counted(name: str) -> str | None:
        reads.append(name)
        return config.limit_setting(name)

    monkeypatch.setenv("SHARDKIT_MAX_ROW", "1000B")  # resets what was read before
    monkeypatch.setattr(budget, "limit_setting", counted)
    for n in range(1000):
        budget.allow("row", n, what="a line")
        budget.allow("image_pixels", n, what="an image")
    assert sorted(reads) == ["image_pixels", "row"]
    with pytest.raises(LimitError, match="1,001 bytes declared, over the limit of 1,000"):
        budget.allow("row", 1001, what="a line")
    assert len(reads) == 2


def test_reset_makes_the_next_check_read_the_environment_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDKIT_MAX_LIST_ITEMS", "10")
    assert budget.allow("list_items", 10, what="a list") == 10
    with pytest.MonkeyPatch.context() as plain:  # pytest's own: it does not reset the budget
        plain.setenv("SHARDKIT_MAX_LIST_ITEMS", "20")
        with pytest.raises(LimitError, match="over the limit of 10 items"):
            budget.allow("list_items", 20, what="a list")
        budget.reset()
        assert budget.allow("list_items", 20, what="a list") == 20
    budget.reset()
    assert budget.limit("list_items") == 10
