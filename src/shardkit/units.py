"""Numbers from outside, checked where they enter: sizes (``100MB``, ``1GiB``, ``500k``,
``1e9``), counts and seconds.

Every option that takes a size (``max_size`` in Python, ``--max-size`` on the command
line) accepts the same :data:`Size` and goes through :func:`parse_size`; every count
(``max_count``, ``workers``, ``--port``...) through :func:`check_int` (or :func:`parse_int`
for text), every duration through :func:`check_seconds`. Each refuses a bad value with one
:class:`~shardkit.errors.ConfigError` line naming the option, never an ``OverflowError``
or ``ValueError`` from deeper down: a value is an int (a float such as NaN or 1e30 is not),
in range, and below :data:`MAX_INT`.
"""

from __future__ import annotations

import math
import re

from .errors import ConfigError

__all__ = [
    "MAX_INT",
    "MAX_SECONDS",
    "MAX_SEED",
    "MIN_BARE_SIZE",
    "Size",
    "check_int",
    "check_seconds",
    "format_size",
    "parse_int",
    "parse_seconds",
    "parse_size",
]

MAX_INT = 2**63 - 1
"""The largest count or size any option takes (what a C ``int64`` holds): larger values are
refused where they enter, never an ``OverflowError`` where they are used."""
MAX_SEED = 2**64 - 1
"""Seeds are from 0 to this (what numpy's generators take)."""
MAX_SECONDS = 10.0**9
"""The longest duration an option takes (about 31 years)."""

Size = int | float | str
"""A size: bytes as an int or float (``1e9``), or a string with a unit (``"100MB"``)."""

MIN_BARE_SIZE = 1024
"""A size written without a unit (``"100"``) is refused below this many bytes: it is almost
always a forgotten unit (one shard per sample), not a wish for 100-byte shards."""

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE]\+?\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: Size, *, name: str = "size") -> int:
    """Bytes in ``text``: an int, a float (``1e9``), or a string with a decimal unit (kB,
    MB, GB, TB) or a binary one (KiB, MiB, GiB, TiB).

    A string without a unit below :data:`MIN_BARE_SIZE` is refused (``"100"`` is a
    forgotten unit); ints and floats are exact byte counts.
    """
    if isinstance(text, bool) or not isinstance(text, (int, float, str)):
        raise ConfigError(
            f"{name} must be a size such as 500MB, 1GiB or 1e9, not {type(text).__name__}"
        )
    if isinstance(text, str):
        value = _parse_text(text, name)
    elif isinstance(text, float) and not math.isfinite(text):
        raise ConfigError(f"{name} must be a finite size, not {text!r}")
    else:
        value = int(text)
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {text!r}")
    if value > MAX_INT:
        raise ConfigError(f"{name} must be at most {MAX_INT} bytes, not {text!r}")
    return value


def check_int(value: object, name: str, *, low: int = 1, high: int = MAX_INT) -> int:
    """``value`` if it is an int from ``low`` to ``high``; else one ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, not {_shown(value)}")
    if not low <= value <= high:
        bound = f"at least {low}" if high == MAX_INT and value < low else f"from {low} to {high}"
        raise ConfigError(f"{name} must be {bound}, not {_shown(value)}")
    return value


def parse_int(text: str, name: str, *, low: int = 1, high: int = MAX_INT) -> int:
    """The integer ``text`` spells (decimal digits, an optional sign), checked as
    :func:`check_int` does; ``'1e3'``, ``'nan'`` or a 10,000-digit number are refused."""
    digits = text.strip()
    if not re.fullmatch(r"[+-]?\d+", digits):
        raise ConfigError(f"{name} must be an integer, not {_shown(text)}")
    if len(digits) > 30:  # int() of a 10 MB number is slow, and out of range anyway
        raise ConfigError(f"{name} must be from {low} to {high}, not {_shown(text)}")
    return check_int(int(digits), name, low=low, high=high)


def check_seconds(value: object, name: str, *, high: float = MAX_SECONDS) -> float:
    """``value`` if it is a number of seconds above 0 and at most ``high`` (not NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds, not {_shown(value)}")
    if not 0 < value <= high:  # NaN fails both comparisons
        raise ConfigError(f"{name} must be more than 0 and at most {high:g} seconds, not {value}")
    return float(value)


def parse_seconds(text: str, name: str) -> float:
    """The seconds ``text`` spells (``2``, ``0.5``, ``1e3``), checked as :func:`check_seconds`."""
    try:
        value = float(text) if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None:
        raise ConfigError(f"{name} must be a number of seconds, not {_shown(text)}")
    return check_seconds(value, name)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}\u2026 ({len(text)} characters)"


def _parse_text(text: str, name: str) -> int:
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ConfigError(f"{name} {text!r} is not a size: use e.g. 500MB, 1GiB or 1e9")
    value = int(float(match.group(1)) * _UNITS[unit])
    if not match.group(2) and 0 < value < MIN_BARE_SIZE:
        raise ConfigError(
            f"{name} {text!r} has no unit and is only {value} bytes: use e.g. 100MB "
            f"(a size without a unit must be at least {MIN_BARE_SIZE})"
        )
    return value


def format_size(size: float) -> str:
    """``1234567`` -> ``'1.2 MB'``."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover - loop always returns
