import pytest

from shardkit.errors import ConfigError
from shardkit.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100MB", 100_000_000),
        ("1GiB", 1 << 30),
        ("500k", 500_000),
        ("1e9", 10**9),
        ("1E+9", 10**9),
        ("4200", 4200),
        ("100B", 100),  # an explicit unit is taken at its word
        (1e9, 10**9),  # webdataset's maxsize habit
        (2.5e3, 2500),
        (42, 42),  # an int is an exact byte count
    ],
)
def test_parse_size(text: str | int | float, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "10 parsecs", "-5MB", "0", 0, -3, 0.0])
def test_parse_size_rejects_nonsense_naming_the_option(text: str | int | float) -> None:
    with pytest.raises(ConfigError, match="--max-size"):
        parse_size(text, name="--max-size")


@pytest.mark.parametrize("text", ["100", "1023", " 5 ", "1e2"])
def test_a_bare_number_below_1kib_is_a_forgotten_unit(text: str) -> None:
    with pytest.raises(ConfigError, match=r"--max-size '.*' has no unit.*use e\.g\. 100MB"):
        parse_size(text, name="--max-size")


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_parse_size_refuses_other_types_with_one_line(value: object) -> None:
    with pytest.raises(ConfigError, match="max_size"):
        parse_size(value, name="max_size")  # type: ignore[arg-type]


def test_format_size() -> None:
    assert format_size(1_234_567) == "1.2 MB"
    assert format_size(12) == "12 B"
