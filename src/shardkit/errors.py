"""The shardkit exception tree.

Every error shardkit raises on purpose is a :class:`ShardkitError`. Errors about *data*
(a corrupt record, a sample that does not decode) carry structured fields: the shard
``url``, the byte ``offset`` and the sample ``key`` where they are known. Where callers
already catch a builtin, the error subclasses it too (``FormatError`` is a ``ValueError``,
``StorageError`` an ``OSError``).

::

    ShardkitError
    ├── ConfigError (ValueError)          bad option or argument
    │   ├── MissingDependencyError (ImportError)  an optional module is not installed
    │   ├── StateError                    a resume state that is malformed or not this pipeline's
    │   └── ManifestError (+ FormatError)  a manifest.json that is not one
    ├── DataError (ValueError)            something wrong with the data
    │   ├── FormatError                   malformed tar / TFRecord / Example
    │   │   ├── TruncatedShardError       the shard ends in the middle of a record
    │   │   └── ChecksumError             a CRC or sha256 does not match
    │   │   └── FormatLimitError (+ LimitError)   a shard declares a size over its limit
    │   ├── DecodeError                   a field does not decode
    │   │   └── DecodeLimitError (+ LimitError)   a field declares a size over its limit
    │   ├── LimitError                    a declared size, length or count over its limit
    │   ├── MissingFieldError (KeyError)  a sample lacks a field a stage needs
    │   └── EncodeError (also TypeError)  a value cannot be encoded
    ├── UnsafeDataError                   refusing to unpickle without opt-in
    ├── StorageError (OSError)            opening / reading / writing a URL failed
    └── BuildError                        a build cannot start or go on
        └── EmptyBuildError               every item was skipped: nothing to pack

Every error is printable as it stands: its message is bounded (:data:`MESSAGE_LIMIT`
characters, a long name or value in it shortened with an ellipsis in the middle) and
``str()`` of it writes every control character escaped (:func:`escape_controls`), so a key,
a file name or a URL from the data never sends a terminal an escape sequence nor splits an
``Error:`` line. :func:`escape_controls` and :func:`shorten` are the one place shardkit makes
a string from outside safe to print; the CLI and the tools print through them.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable

__all__ = [
    "BuildError",
    "ChecksumError",
    "ConfigError",
    "DataError",
    "DecodeError",
    "DecodeLimitError",
    "EmptyBuildError",
    "EncodeError",
    "FormatError",
    "FormatLimitError",
    "LimitError",
    "ManifestError",
    "MissingDependencyError",
    "MissingFieldError",
    "ShardkitError",
    "StateError",
    "StorageError",
    "TruncatedShardError",
    "UnsafeDataError",
    "escape_controls",
    "shorten",
]

MESSAGE_LIMIT = 2000
"""At most this many characters of an error's message (the middle gives way to an ellipsis)."""
NAME_LIMIT = 300
"""At most this many characters of a URL or sample key named in an error."""


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str) -> str:
    """``text`` with every character that is not printable (controls such as ESC, NUL,
    CR, LF, DEL and the C1 set, bidirectional overrides, line separators) written as
    ``\\x1b``, ``\\u202e``...: safe to print to a terminal, on one line. Spaces stay
    (NBSP too). Escaping twice changes nothing more."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or unicodedata.category(ch) == "Zs" else _escape(ch) for ch in text
    )


def shorten(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and end around an
    ellipsis, ``limit`` characters in all: a 10 MB name never makes a 10 MB line."""
    if len(text) <= limit:
        return text
    keep = max(limit - 1, 2)
    head = keep - keep // 3
    return f"{text[:head]}\u2026{text[len(text) - (keep - head) :]}"


#: An object's address in a library's message (``<_io.BytesIO object at 0x7f...>``).
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _without_addresses(text: str) -> str:
    """``text`` without the memory addresses a library's message may quote (``<... object
    at 0x7f...>`` becomes ``<... object>``): a reason recorded in a manifest's skipped list
    is the same in every run and every process."""
    return _ADDRESS.sub(">", text) if " at 0x" in text else text


class ShardkitError(Exception):
    """Base class of every error shardkit raises on purpose."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        offset: int | None = None,
        key: str | None = None,
    ) -> None:
        self.message = shorten(_without_addresses(str(message)), MESSAGE_LIMIT)
        self.url = url
        self.offset = offset
        self.key = key
        super().__init__(self.message)

    def __str__(self) -> str:
        """One printable line of bounded size: where (URL, sample key, offset), then what."""
        where = []
        if self.url is not None:
            where.append(shorten(str(self.url)))
        if self.key is not None:
            where.append(f"sample {shorten(repr(self.key))}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        text = f"{', '.join(where)}: {self.message}" if where else self.message
        return escape_controls(text)

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the structured fields across process boundaries (pools, Ray, Dask).
        return (
            _rebuild,
            (type(self), self.message, self.url, self.offset, self.key),
        )


def _rebuild(
    cls: type[ShardkitError], message: str, url: str | None, offset: int | None, key: str | None
) -> ShardkitError:
    return cls(message, url=url, offset=offset, key=key)


class ConfigError(ShardkitError, ValueError):
    """An option or argument is invalid."""


class StateError(ConfigError):
    """A resume state (``load_state_dict``) is malformed, tampered with, or belongs to
    another dataset, mix or run: refused whole, before anything is skipped."""


class DataError(ShardkitError, ValueError):
    """Something is wrong with the data itself; ``handler=`` policies apply to these."""


class FormatError(DataError):
    """A shard is not well-formed (tar, TFRecord framing, tf.train.Example).

    ``withheld``: the fields of the sample the error left partial (the members read whole
    before it), which the reader does not hand out; empty when no sample was withheld.
    Field-checking stages use it (see :mod:`shardkit.pipeline._stages`)."""

    withheld: tuple[str, ...] = ()


class TruncatedShardError(FormatError):
    """A shard ends in the middle of a record or member."""


class ChecksumError(FormatError):
    """A checksum (TFRecord CRC32C, manifest sha256) does not match."""


class ManifestError(ConfigError, FormatError):
    """A ``manifest.json`` is not one (bad JSON, no shard list, a bad count).

    Both a ConfigError (the dataset named cannot be opened) and a FormatError (a malformed
    file), as the reading pipeline and the tools each raised one of them before."""


class DecodeError(DataError):
    """A sample field could not be decoded."""


class MissingFieldError(DataError, KeyError):
    """A sample lacks a field that ``map_dict``, ``to_tuple`` or ``rename`` needs."""


class LimitError(DataError):
    """A size, length, count or dimension read from the data (a header, an index, a list
    cell) is over its limit in :mod:`shardkit.budget`: refused before anything is
    allocated. The message names what was refused, the size declared and the limit, and
    the environment variable that raises it."""


class FormatLimitError(LimitError, FormatError):
    """A shard's own structure (a tar header chain, a TFRecord Example's lists) declares
    more than its limit: a FormatError, as the shard's other malformations are."""


class DecodeLimitError(LimitError, DecodeError):
    """A field declares more than its limit (audio frames, video or image pixels): a
    DecodeError, as the field's other failures are."""


class EncodeError(DataError, TypeError):
    """A sample value could not be encoded (no encoder for its type or extension)."""


class UnsafeDataError(ShardkitError):
    """Decoding would run code from the data (pickle) and the caller did not opt in."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional module a feature needs is not installed; the message names the extra.

    Never a data error: no ``handler=`` policy sees it, whatever the policy."""


class StorageError(ShardkitError, OSError):
    """Opening, reading or writing a URL failed."""


class BuildError(ShardkitError):
    """A build cannot start or continue (bad source, locked output, ...)."""


class EmptyBuildError(BuildError):
    """A build packed no sample: every item was skipped. ``skipped`` holds ``(path,
    reason)`` for the first :attr:`KEPT` of them (the message counts them all; each text
    cut to 4,096 characters): however many were skipped, the error stays small. The
    output is left without a manifest."""

    KEPT = 1000

    def __init__(
        self,
        message: str,
        *,
        skipped: Iterable[tuple[str, str]] | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message, url=url)
        first = itertools.islice(skipped or (), self.KEPT)  # never read past them
        self.skipped = [(shorten(str(p), 4096), shorten(str(r), 4096)) for p, r in first]

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_empty, (self.message, self.skipped, self.url))


def _rebuild_empty(
    message: str, skipped: list[tuple[str, str]], url: str | None
) -> EmptyBuildError:
    return EmptyBuildError(message, skipped=skipped, url=url)
