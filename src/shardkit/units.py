"""Human-readable sizes: ``100MB``, ``1GiB``, ``500k``, ``1e9``."""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = ["format_size", "parse_size"]

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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE]\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, *, name: str = "size") -> int:
    """Bytes in ``text``: decimal units (kB, MB, GB, TB) or binary ones (KiB, MiB, GiB)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(text)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _UNITS:
            raise ConfigError(f"{name} {text!r} is not a size: use e.g. 500MB, 1GiB or 1000000")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {text!r}")
    return value


def format_size(size: float) -> str:
    """``1234567`` -> ``'1.2 MB'``."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"  # pragma: no cover - loop always returns
