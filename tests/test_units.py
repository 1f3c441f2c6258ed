import pytest

from shardkit.errors import ConfigError
from shardkit.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("100MB", 100_000_000), ("1GiB", 1 << 30), ("500k", 500_000), ("1e9", 10**9), ("42", 42)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "10 parsecs", "-5MB", "0"])
def test_parse_size_rejects_nonsense_naming_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--max-size"):
        parse_size(text, name="--max-size")


def test_format_size() -> None:
    assert format_size(1_234_567) == "1.2 MB"
    assert format_size(12) == "12 B"
