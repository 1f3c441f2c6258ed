"""Data-error policies: ``handler=`` when reading, ``on_error=`` when building or processing.

One vocabulary, one meaning per word:

- **skip**: drop the one bad item (a sample, a file, a record) with a logged reason, and go
  on. ``handler="skip"`` (same as ``"warn"``), ``BuildOptions(on_error="skip")``, ``proc
  --on-error skip``.
- **raise** / **fail**: stop with the error (``handler="raise"``, the default when reading;
  ``on_error="fail"``).
- **ignore**: skip without logging (``handler="ignore"``).
- **stop**: drop the rest of the shard the bad item is in (``handler="warn_and_stop"``,
  ``"ignore_and_stop"``). Up to shardkit 0.1.0 ``handler="skip"`` meant this; it now means
  what ``skip`` means everywhere else.

A handler is called with a :class:`~shardkit.errors.DataError` raised while reading or
decoding *data* (a corrupt member, an undecodable field). It returns ``True`` to skip the
bad item and go on, ``False`` to stop reading the current shard, or raises to propagate
(webdataset's contract: its handler functions work too). Programming errors and missing
optional modules never reach a handler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

__all__ = [
    "ON_ERROR",
    "Handler",
    "HandlerName",
    "OnError",
    "check_on_error",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise",
    "resolve_handler",
    "warn_and_continue",
    "warn_and_stop",
]

logger = logging.getLogger(__name__)

Handler = Callable[[Exception], bool]
HandlerName = Literal["raise", "warn", "skip", "ignore", "warn_and_stop", "ignore_and_stop"]

#: What a build or ``proc`` does with an item that fails: skip it (with a reason) or fail.
OnError = Literal["skip", "fail"]
ON_ERROR: tuple[OnError, ...] = ("skip", "fail")


def check_on_error(value: object, name: str = "on_error") -> None:
    """Raise ConfigError unless ``value`` is one of :data:`ON_ERROR`."""
    if value not in ON_ERROR:
        from .errors import ConfigError

        raise ConfigError(f"{name} must be 'skip' or 'fail', not {value!r}")


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
    "skip": warn_and_continue,  # one meaning of "skip" everywhere: drop the item, log why
    "ignore": ignore_and_continue,
    "warn_and_stop": warn_and_stop,
    "ignore_and_stop": ignore_and_stop,
}


def resolve_handler(handler: Handler | str | None) -> Handler:
    """Turn a handler name (``raise``, ``warn``, ``skip``, ``ignore``, ``warn_and_stop``,
    ``ignore_and_stop``) or a callable into one."""
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
