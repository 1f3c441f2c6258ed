"""Data-error policies (``handler=``), webdataset-compatible.

A handler is called with a :class:`~shardkit.errors.DataError` raised while reading or
decoding *data* (a corrupt member, an undecodable field). It returns ``True`` to skip the
bad item and go on, ``False`` to stop reading the current shard, or raises to propagate.
Programming errors never reach a handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

__all__ = [
    "Handler",
    "HandlerName",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise",
    "resolve_handler",
    "warn_and_continue",
    "warn_and_stop",
]

logger = logging.getLogger(__name__)

Handler = Callable[[Exception], bool]
HandlerName = Literal["raise", "warn", "skip", "warn_and_stop", "ignore"]


def reraise(exc: Exception) -> bool:
    """Propagate the error (the default)."""
    raise exc


def warn_and_continue(exc: Exception) -> bool:
    """Log a warning and skip the bad item."""
    logger.warning("skipping bad data: %s", exc)
    return True


def warn_and_stop(exc: Exception) -> bool:
    """Log a warning and skip the rest of the shard."""
    logger.warning("skipping the rest of the shard: %s", exc)
    return False


def ignore_and_continue(exc: Exception) -> bool:
    """Silently skip the bad item."""
    return True


def ignore_and_stop(exc: Exception) -> bool:
    """Silently skip the rest of the shard."""
    return False


_BY_NAME: dict[str, Handler] = {
    "raise": reraise,
    "warn": warn_and_continue,
    "skip": warn_and_stop,
    "warn_and_stop": warn_and_stop,
    "ignore": ignore_and_continue,
}


def resolve_handler(handler: Handler | str | None) -> Handler:
    """Turn a handler name (``raise``, ``warn``, ``skip``, ``ignore``) or a callable into one."""
    if handler is None:
        return reraise
    if callable(handler):
        return handler
    try:
        return _BY_NAME[handler]
    except KeyError:
        from .errors import ConfigError

        raise ConfigError(
            f"unknown handler {handler!r}: use one of {', '.join(sorted(_BY_NAME))} or a callable"
        ) from None
