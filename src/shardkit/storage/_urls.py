"""The URL grammar: brace patterns, local paths, joins, which URLs run a command (no
fsspec)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from .. import config
from ..errors import ConfigError

__all__ = [
    "basename",
    "check_data_url",
    "data_url_problem",
    "expand_urls",
    "is_executing",
    "is_local",
    "join",
    "local_path",
    "url_scheme",
]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}")


def expand_urls(spec: str | Sequence[str]) -> list[str]:
    """Brace-expand one URL spec (``a-{000..009}.tar``, ``{a,b}.tar``) or a list of them."""
    if not isinstance(spec, str):
        return [url for item in spec for url in expand_urls(item)]
    if is_executing(spec):
        return [spec]  # a shell command: braces are the shell's business
    start = spec.find("{")
    if start < 0:
        return [spec]
    depth, end = 0, -1
    for i in range(start, len(spec)):
        if spec[i] == "{":
            depth += 1
        elif spec[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end < 0:
        raise ConfigError(f"unbalanced '{{' in URL pattern {spec!r}")
    head, body, tail = spec[:start], spec[start + 1 : end], spec[end + 1 :]
    match = _RANGE.fullmatch("{" + body + "}")
    if match:
        lo_text, hi_text = match.group(1), match.group(2)
        width = len(lo_text) if lo_text.startswith("0") and len(lo_text) > 1 else 0
        lo, hi = int(lo_text), int(hi_text)
        step = 1 if hi >= lo else -1
        choices = [str(i).zfill(width) for i in range(lo, hi + step, step)]
    else:
        choices = _split_top_level(body)
    return [url for choice in choices for url in expand_urls(head + choice + tail)]


def _split_top_level(body: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[last:i])
            last = i + 1
    parts.append(body[last:])
    return parts


def url_scheme(url: str) -> str:
    """The scheme of a URL (``s3``, ``https``, ``file``), lowercased; ``""`` for a plain
    path. The one rule for "is this a URL": it starts with ``scheme://`` (what fsspec
    opens); ``pipe:`` and ``-`` have none."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else ""


def is_local(url: str) -> bool:
    """True for plain paths and ``file:`` URLs."""
    return (not url_scheme(url) and not is_executing(url) and url != "-") or url.startswith(
        "file://"
    )


def is_executing(url: str) -> bool:
    """Whether opening ``url`` runs a command (``pipe:CMD``)."""
    return url.startswith("pipe:")


def data_url_problem(url: str) -> str | None:
    """Why a URL read from a data file (a manifest, a CSV/JSONL list) may not be opened:
    it would run a command and ``SHARDKIT_ALLOW_PIPE`` is not ``all``
    (:func:`shardkit.config.pipe_policy`); None when it may."""
    if is_executing(url) and config.pipe_policy() != "all":
        return (
            "a pipe: URL read from a data file would run a shell command; only URLs given "
            "directly may (set SHARDKIT_ALLOW_PIPE=all to trust the file)"
        )
    return None


def check_data_url(url: str, *, found_in: str) -> None:
    """ConfigError naming ``found_in`` (a manifest) when :func:`data_url_problem` says no."""
    problem = data_url_problem(url)
    if problem is not None:
        raise ConfigError(f"{found_in}: {problem}", url=url)


def local_path(url: str) -> str:
    """The filesystem path of a local URL."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if url.startswith("file:"):
        return url[len("file:") :]
    return url


def join(base: str, name: str) -> str:
    """Join a folder URL and a name with exactly one '/'."""
    if is_local(base):
        return os.path.join(local_path(base), name)
    return base.rstrip("/") + "/" + name


def basename(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]
