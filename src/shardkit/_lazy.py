"""Names a package exports but imports on first use (PEP 562 module ``__getattr__``).

A package lists ``{name: module}`` for what it re-exports and calls :func:`lazy_exports`,
so importing the package runs none of those modules; ``from package import name``,
``package.name`` and ``dir(package)`` work as with eager imports. A submodule not yet
imported (``shardkit.storage``) is imported when it is first named, as it was available
when the package imported it eagerly.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return the ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), for
    ``exports``: ``{name: relative module that defines it}``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module, package), name)
            setattr(sys.modules[package], name, value)  # later lookups skip this function
            return value
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
