"""Human-readable sizes: ``100MB``, ``1GiB``, ``500k``, ``1e9``.

Every option that takes a size (``max_size`` in Python, ``--max-size`` on the command
line) accepts the same :data:`Size` and goes through :func:`parse_size`.
"""

from __future__ import annotations

import math
import re

from .errors import ConfigError

__all__ = ["MIN_BARE_SIZE", "Size", "format_size", "parse_size"]

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
    return value


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
