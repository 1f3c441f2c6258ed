"""The names of things on disk: shard suffixes and formats, shard-name patterns, the
manifest's name, and what a bare file name inside a dataset folder may be.

Every reader, writer, tool and build path asks these questions here, so a shard is the
same thing everywhere:

- a **shard name** ends in ``.tar``, ``.tgz``, ``.tfrecord``, ``.tfrecords`` or ``.tfr``,
  optionally followed by ``.gz`` (case does not matter), and is not hidden (no leading
  dot); ``.tfrecord*`` and ``.tfr`` are TFRecord, the rest tar;
- a **shard-name pattern** (``out/shard-%06d.tar``, ``out/{shard:06d}.tar``) holds exactly
  one integer placeholder, at most :data:`MAX_PATTERN_WIDTH` characters wide. In a
  ``%`` pattern every ``%`` is a conversion (``%%`` is a literal ``%``); in a pattern with
  ``{shard}``, ``%`` is an ordinary character (URL escapes such as ``%20`` stay);
- a **bare name** (a shard or part named by a manifest or a journal, read back from a
  folder) is one path component: not empty, not ``.`` or ``..``, no ``/``, ``\\`` or NUL;
- a **name in a JSON file** shardkit writes (manifest, index) is strict UTF-8: names that
  are not valid UTF-8 (a class folder or file name from a Linux file system) come to
  Python as str holding lone surrogates U+DC80..U+DCFF (PEP 383, ``surrogateescape``),
  which no strict JSON/UTF-8 parser accepts, so :func:`encode_name` writes each such byte
  0xNN as the private-use character U+EFNN (the range U+EF80..U+EFFF, as MirBSD's OPTU-8
  does) and :func:`decode_name` maps them back: ``os.fsencode(decode_name(name))`` gives
  the original bytes. So that a *real* character of that range (or U+EF7F, the escape
  mark) is not taken for an escaped byte, it is written after the mark U+EF7F: the
  mapping round-trips every name. Any other lone surrogate is written as U+FFFD; other
  valid names are written as they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Literal

from ..errors import ConfigError

__all__ = [
    "FORMATS",
    "GZIP_SUFFIX",
    "INDEX_SUFFIX",
    "MANIFEST_NAME",
    "MAX_PATTERN_WIDTH",
    "MEGATRON_SUFFIX",
    "SHARD_SUFFIXES",
    "TEMPORARY_MARK",
    "TFRECORD_SUFFIXES",
    "Format",
    "bare_name_problem",
    "check_pattern",
    "decode_name",
    "encode_name",
    "is_megatron",
    "format_from_name",
    "is_pattern",
    "is_shard_name",
    "lone_surrogate",
    "shard_name",
    "shard_name_format",
]

Format = Literal["tar", "tfrecord"]
FORMATS: tuple[Format, ...] = ("tar", "tfrecord")

INDEX_SUFFIX = ".idx"  # a shard's index lies beside it: its name + this
MANIFEST_NAME = "manifest.json"

TEMPORARY_MARK = ".tmp-"
"""In the name of every file being written (``.NAME.tmp-RANDOM``, made by
:mod:`shardkit._temporary` alone), and in no finished file's: what a cleanup may remove."""

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
SHARD_SUFFIXES = (".tar", ".tgz", *TFRECORD_SUFFIXES)  # each optionally followed by .gz
GZIP_SUFFIX = ".gz"

MAX_PATTERN_WIDTH = 20

# %% | %[0][width]d | any other conversion (refused); {shard[:spec]}
_PRINTF_TOKEN = re.compile(r"%(?:(?P<pct>%)|0?(?P<width>\d*)d|(?P<other>.?))")
_BRACE_TOKEN = re.compile(r"\{shard(?P<spec>:[^}]*)?\}")
_BRACE_SPEC = re.compile(r":0?(?P<width>\d*)d?")
# What makes an output a pattern rather than one file (a %-escape such as %20 does not).
_PLACEHOLDER = re.compile(r"%0?\d*d|\{shard(:[^}]*)?\}")

_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_OTHER_SURROGATE = re.compile("[\ud800-\udfff]")
_MARK = "\uef7f"  # before a real character of U+EF7F..U+EFFF: it stands for itself
_REAL_PRIVATE = re.compile("[\uef7f-\uefff]")
_ENCODED = re.compile("\uef7f(.)|[\uef80-\uefff]", re.DOTALL)
_OFFSET = 0xEF80 - 0xDC80


def _stem(name: str) -> str:
    lower = name.lower()
    return lower[: -len(GZIP_SUFFIX)] if lower.endswith(GZIP_SUFFIX) else lower


def is_shard_name(name: str) -> bool:
    """Whether a file name is a shard's (see the module docs); hidden files are not."""
    return not name.startswith(".") and _stem(name).endswith(SHARD_SUFFIXES)


def format_from_name(name: str) -> tuple[Format, bool]:
    """(format, gzip) implied by a name's extension (tar unless it says TFRecord)."""
    lower = name.lower()
    gz = lower.endswith((GZIP_SUFFIX, ".tgz"))
    return ("tfrecord" if _stem(lower).endswith(TFRECORD_SUFFIXES) else "tar"), gz


def shard_name_format(name: str) -> Format | None:
    """The format a shard name states, or None when the name is not a shard's."""
    base = name.rsplit("/", 1)[-1]
    return format_from_name(base)[0] if _stem(base).endswith(SHARD_SUFFIXES) else None


# --------------------------------------------------------------------------- patterns


def is_pattern(url: str) -> bool:
    """Whether an output names numbered shards (``%06d`` or ``{shard:06d}``) rather than
    one file; :func:`check_pattern` then says whether the pattern is usable."""
    return bool(_PLACEHOLDER.search(url))


def check_pattern(pattern: str, *, option: str = "pattern") -> None:
    """ConfigError naming ``option`` unless ``pattern`` holds exactly one integer
    placeholder no wider than :data:`MAX_PATTERN_WIDTH` (see the module docs)."""
    if not isinstance(pattern, str):
        raise ConfigError(f"{option} must be a string, not {type(pattern).__name__}")
    found = 0
    for match in _tokens(pattern):
        if match.re is _PRINTF_TOKEN:
            if match.group("pct"):
                continue
            if match.group("other") is not None:
                raise ConfigError(
                    f"{option} {pattern!r}: {match.group(0)!r} is not a shard-number "
                    "placeholder (use one '%06d' or '{shard:06d}'; '%%' is a literal '%')"
                )
            width_text = match.group("width")
        else:
            brace = _BRACE_SPEC.fullmatch(match.group("spec") or ":")
            if brace is None:
                raise ConfigError(
                    f"{option} {pattern!r}: {match.group(0)!r} is not an integer placeholder"
                )
            width_text = brace.group("width")
        if width_text and int(width_text) > MAX_PATTERN_WIDTH:
            raise ConfigError(
                f"{option} {pattern!r}: placeholder width {int(width_text)} is over "
                f"{MAX_PATTERN_WIDTH}"
            )
        found += 1
    if found != 1:
        raise ConfigError(
            f"{option} {pattern!r} must hold exactly one shard-number placeholder "
            f"('%06d' or '{{shard:06d}}'), not {found}"
        )


def shard_name(pattern: str, index: int) -> str:
    """Fill a shard pattern (``%06d`` or ``{shard:06d}``) with an index."""
    check_pattern(pattern)
    out, last = [], 0
    for match in _tokens(pattern):
        out.append(pattern[last : match.start()])
        last = match.end()
        if match.re is _BRACE_TOKEN:
            out.append(format(index, (match.group("spec") or ":d")[1:] or "d"))
        else:
            out.append("%" if match.group("pct") else match.group(0) % index)
    out.append(pattern[last:])
    return "".join(out)


def _tokens(pattern: str) -> Iterator[re.Match[str]]:
    """The placeholders of a pattern: ``{shard...}`` ones if it has any, else ``%`` ones."""
    brace = list(_BRACE_TOKEN.finditer(pattern))
    return iter(brace) if brace else _PRINTF_TOKEN.finditer(pattern)


# --------------------------------------------------------------------------- bare names


def bare_name_problem(name: object) -> str | None:
    """Why ``name`` is not a bare file name inside one folder, or None when it is."""
    if not isinstance(name, str):
        return f"{name!r} is not a file name"
    if name in ("", ".", ".."):
        return f"{name!r} is not a file name"
    if "/" in name or "\\" in name or "\0" in name:
        return f"{name!r} is not a bare file name (it holds a path separator or NUL)"
    return None


# --------------------------------------------------------------------------- names in JSON


def encode_name(text: str) -> str:
    """A str safe in strict UTF-8 JSON (see the module docs); valid text is unchanged."""
    if text.isascii():
        return text
    text = _REAL_PRIVATE.sub(lambda m: _MARK + m.group(), text)  # first: only real ones
    text = _ESCAPED_BYTE.sub(lambda m: chr(ord(m.group()) + _OFFSET), text)
    return _OTHER_SURROGATE.sub("\ufffd", text)


def lone_surrogate(text: str, what: str = "name") -> str:
    """Why ``text`` cannot be a name on disk or in a shard, or ``""``: it holds a lone
    surrogate that stands for no byte (U+D800..U+DC7F, U+DD00..U+DFFF: what a JSON
    ``"\\ud800"`` escape or a Python str can hold, and no UTF-8 can encode, even with
    ``surrogateescape``). The reason names the first one; the caller skips the item."""
    if text.isascii():
        return ""
    for char in _OTHER_SURROGATE.findall(text):
        if not _ESCAPED_BYTE.match(char):
            return f"the {what} holds a lone surrogate U+{ord(char):04X} (not UTF-8 text)"
    return ""


def decode_name(text: str) -> str:
    """The name :func:`encode_name` wrote, as Python holds file names (surrogateescape)."""
    if text.isascii():
        return text
    return _ENCODED.sub(_decode_one, text)


def _decode_one(match: re.Match[str]) -> str:
    real = match.group(1)
    return real if real is not None else chr(ord(match.group()) - _OFFSET)


#: A Megatron-LM indexed dataset is named by its token file; its ``.idx`` lies beside it.
MEGATRON_SUFFIX = ".bin"


def is_megatron(source: object) -> bool:
    """Whether ``source`` names a Megatron-LM indexed dataset: a path ending ``.bin``."""
    return isinstance(source, (str, os.PathLike)) and os.fspath(source).endswith(MEGATRON_SUFFIX)
