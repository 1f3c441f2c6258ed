"""Sample keys from file paths: unique, stable, and safe for the first-dot rule.

A key is the file's path without its extension, with ``/`` separators: ``cat/img_001``.
Readers split a member name at the first dot of its last component, so dots in the
stem become ``_`` (``a.b.jpg`` -> ``a_b``). Two files that would get the same key (``a.jpg``
and ``a.png``; ``a.b.jpg`` and ``a_b.jpg``) are told apart deterministically: first by
adding the extension (``a_jpg``, ``a_png``), then, if that still collides, a counter
(``_2``, ``_3``, ...) in sorted path order. Spaces and non-ASCII letters are kept.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["make_keys", "path_key"]

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def _unusual(path: str) -> bool:
    """Whether a path needs the careful split (scheme, backslash, NUL, empty or dot parts)."""
    return (
        not path
        or path[0] in "./"
        or path[-1] == "/"
        or "/." in path
        or "//" in path
        or "\\" in path
        or "\0" in path
    )


def _split(path: str) -> tuple[list[str], str, str]:
    """(directory components, stem, extension) of a '/'-separated path."""
    if not _unusual(path):  # the common case, fast: a/b/c.jpg
        head, _, name = path.rpartition("/")
        stem, _, ext = name.rpartition(".")
        if stem:
            return ([head] if head else []), stem, ext
    path = _SCHEME.sub("", path).replace("\\", "/")
    parts = [p for p in path.split("/") if p]
    name = parts.pop() if parts else "_"
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    dirs = ["_" * len(p) if p in (".", "..") else p.replace("\0", "_") for p in parts]
    return dirs, stem, ext


def _stem(stem: str) -> str:
    return stem.replace(".", "_").replace("\0", "_") or "_"


def path_key(path: str) -> str:
    """The key of one path, before collisions are resolved: ``a/b.c.jpg`` -> ``a/b_c``."""
    dirs, stem, _ = _split(path)
    return "/".join([*dirs, _stem(stem)])


def make_keys(paths: Sequence[str]) -> list[str]:
    """One unique key per path (paths must be distinct), in the order of ``paths``."""
    base = [path_key(p) for p in paths]
    if len(set(base)) == len(base):
        return base  # the usual case: what the rules below give when nothing collides
    return _resolve(paths, base)


def _resolve(paths: Sequence[str], base: list[str]) -> list[str]:
    """Keys when some base keys collide (the rules in the module docstring)."""
    split = [_split(p) for p in paths]
    counts = Counter(base)
    wanted = [
        key if counts[key] == 1 or not ext else f"{key}_{_stem(ext.lower())}"
        for key, (_, _, ext) in zip(base, split, strict=True)
    ]
    keys: list[str] = [""] * len(paths)
    taken: set[str] = set()
    clashes = Counter(wanted)
    # Uncontested keys first, so a counter never steals a name another file wants.
    for i, key in enumerate(wanted):
        if clashes[key] == 1:
            keys[i] = key
            taken.add(key)
    for i in sorted(range(len(paths)), key=lambda j: paths[j]):
        if keys[i]:
            continue
        key, n = wanted[i], 1
        while key in taken:
            n += 1
            key = f"{wanted[i]}_{n}"
        keys[i] = key
        taken.add(key)
    return keys
