"""Sample keys from file paths: unique, stable, and safe for the first-dot rule.

A key is the file's path without its extension, with ``/`` separators: ``cat/img_001``.
Readers split a member name at the first dot of its last component, so dots in the
stem become ``_`` (``a.b.jpg`` -> ``a_b``). Two files that would get the same key (``a.jpg``
and ``a.png``; ``a.b.jpg`` and ``a_b.jpg``) are told apart deterministically: first by
adding the extension (``a_jpg``, ``a_png``), then, if that still collides, a counter
(``_2``, ``_3``, ...) in sorted path order. Spaces and non-ASCII letters are kept.

The paths of a CSV/JSONL list become keys through :func:`key_base` and
:func:`relative_path`: relative to the list's root folder when every listed file lies
inside it, else relative to the deepest folder that holds them all (so ``../imgs/a.jpg``
never becomes ``__/imgs/a``, and an absolute path or a URL does not drag its whole prefix
or its host into the key). A URL's query stays in its key, before the extension
(``a.jpg?w=2`` -> ``a?w=2``; its ``%``, ``/``, ``\\`` and ``.`` percent-escaped), so URLs
that differ only there get distinct keys; a fragment is dropped.

The keys a Python dataset gives (``__key__``) are known only as the workers load them:
:class:`GivenKeys` takes them as the driver commits each task, in the output's order,
whatever the format (tar, TFRecord) or the store (a folder, an object store).
"""

from __future__ import annotations

import posixpath
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from ..errors import BuildError
from . import _spill
from ._plan import later_repeats
from ._spill import RecordFile, Spill, bucket_count, bucketed

__all__ = [
    "GivenKeys",
    "key_base",
    "make_keys",
    "path_key",
    "relative_path",
    "spilled_keys",
]

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
    if not _unusual(path):  # the common case, fast: what _split and _stem give for it
        head, _, name = path.rpartition("/")
        stem = name.rpartition(".")[0].replace(".", "_")
        if stem:
            return f"{head}/{stem}" if head else stem
    dirs, stem, _ = _split(path)
    return "/".join([*dirs, _stem(stem)])


def make_keys(paths: Sequence[str]) -> list[str]:
    """One unique key per path (paths must be distinct), in the order of ``paths``."""
    base = [path_key(p) for p in paths]
    if len(set(base)) == len(base):
        return base  # the usual case: what the rules below give when nothing collides
    return _resolve(paths, base)


def spilled_keys(paths: Callable[[], Iterable[str]], count: int, spill: Spill) -> dict[str, str]:
    """:func:`make_keys` for ``count`` paths, perhaps too many to hold: ``paths()`` gives
    one pass over them. Returns the paths whose key is not their :func:`path_key`, with
    their key.

    Colliding base keys are found bucket by bucket (spilled above the budget); a second
    pass, only if some collide, gathers every path whose key the rules could touch: those
    of a colliding base key and those whose base key extends one (``a_jpg``, ``a_jpg_2``
    for ``a``). Memory grows with those paths only.
    """
    buckets = bucket_count(count)

    def bucket_of(base: str) -> int:
        return zlib.crc32(base.encode("utf-8", "surrogateescape")) % buckets

    clashing: set[str] = set()
    for chunk in bucketed((path_key(p) for p in paths()), buckets, bucket_of, spill):
        seen: set[str] = set()
        for base in chunk:
            if base in seen:
                clashing.add(base)
            seen.add(base)
    if not clashing:
        return {}
    involved = [p for p in paths() if _extends(path_key(p), clashing)]
    return {
        path: key
        for path, key in zip(involved, make_keys(involved), strict=True)
        if key != path_key(path)
    }


def _extends(base: str, clashing: set[str]) -> bool:
    """Whether ``base`` is in ``clashing`` or is one of them plus ``_...``."""
    if base in clashing:
        return True
    end = base.find("_")
    while end > 0:
        if base[:end] in clashing:
            return True
        end = base.find("_", end + 1)
    return False


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


def key_base(locations: Iterable[str], root: str) -> list[str]:
    """The folder a list's paths are made relative to (one pass; as components): ``root``
    if every location lies inside it, else their deepest common folder.

    Locations and ``root`` are absolute: a local path (``/data/a.jpg``) or a URL
    (``s3://bucket/a.jpg``; the host is the first folder). ``.`` and ``..`` are resolved
    first, by name. Distinct locations give distinct paths (:func:`relative_path`; feed
    them to :func:`make_keys`)."""
    base = _components(root)
    inside, common = True, None
    for location in locations:
        parts = _components(location)
        if inside and not (len(parts) > len(base) and parts[: len(base)] == base):
            inside = False
        common = parts[:-1] if common is None else _common(common, parts)
    return base if inside else (common or [])


def relative_path(location: str, base: list[str]) -> str:
    """``location`` relative to ``base`` (from :func:`key_base`)."""
    return "/".join(_components(location)[len(base) :])


def _components(location: str) -> list[str]:
    """``["s3", "bucket", "a", "b.jpg"]`` for ``s3://bucket/a/b.jpg``; ``["", ...]`` local."""
    match = _SCHEME.match(location)
    scheme, path = (match.group()[:-3], location[match.end() :]) if match else ("", location)
    query = ""
    if match:  # a URL: its query stays in the key (before the extension), not its fragment
        path, _, query = path.partition("#")[0].partition("?")
    path = posixpath.normpath("/" + path.replace("\\", "/"))
    parts = [scheme, *(p for p in path.split("/") if p)]
    if query and len(parts) > 1:
        stem, dot, ext = parts[-1].rpartition(".")
        query = _escape_query(query)
        parts[-1] = f"{stem}?{query}.{ext}" if dot and stem else f"{parts[-1]}?{query}"
    return parts


def _escape_query(query: str) -> str:
    """A URL's query as a key may hold it: ``%``, ``/``, ``\\`` and ``.`` percent-escaped,
    so no two queries give the same text and the extension after it stays the last."""
    for char, code in (("%", "%25"), ("/", "%2F"), ("\\", "%5C"), (".", "%2E")):
        query = query.replace(char, code)
    return query


def _common(common: list[str], parts: list[str]) -> list[str]:
    """The leading components of ``common`` that the folder of ``parts`` shares."""
    n = 0
    while n < len(common) and n < len(parts) - 1 and common[n] == parts[n]:
        n += 1
    del common[n:]
    return common


class GivenKeys:
    """The keys a Python dataset gave, in the order the build writes them (each task's, as
    the driver commits it): a key equal to the one written just before it is refused at
    once, before the shard that holds both is assembled (a tar reader would merge the two
    samples); any other repeat at the end (:meth:`refuse_repeats`), bucket by bucket in
    bounded memory (:func:`.plan.later_repeats`). Both are the same BuildError, naming
    the key and where it is written twice; the build then writes no manifest."""

    def __init__(self, spill: Spill | None, out: str) -> None:
        self._own = spill is None  # a spill folder of its own, made only if it spills
        self._spill = spill if spill is not None else Spill()
        self._out = out
        self._held: list[str] | RecordFile = []
        self._last: str | None = None

    def __len__(self) -> int:
        return len(self._held)

    def add(self, keys: list[str]) -> None:
        """The keys of the next task's samples written, in order."""
        last = self._last
        for n, key in enumerate(keys):
            if key == last:
                n += len(self._held)
                where = f"samples {n - 1:,} and {n:,} written, one after the other"
                raise _twice(key, f"{where}: a reader would merge them", self._out)
            last = key
        self._last = last
        self._held.extend(keys)
        if isinstance(self._held, list) and len(self._held) > _spill.ORDER_BUDGET // 4:
            file = self._spill.new_file()
            file.extend(self._held)
            self._held = file

    def close(self) -> None:
        if self._own:
            self._spill.close()

    def refuse_repeats(self, where: Callable[[int], str]) -> None:
        """Raise the BuildError for the first key written again, if any; ``where(n)``
        names the place of the ``n``-th sample written (its shard and number there)."""
        later = later_repeats(iter(self._held), len(self._held), self._spill)
        if not later:
            return
        position = min(later)
        first = later[position]
        key = next(k for n, k in enumerate(self._held) if n == position)
        count = len(later)
        again = f"{count:,} {'sample' if count == 1 else 'samples'} written again in all"
        raise _twice(key, f"{where(first)} and {where(position)}; {again}", self._out)


def _twice(key: str, where: str, out: str) -> BuildError:
    shown = repr(key) if len(key) <= 100 else repr(key[:100]) + "..."
    return BuildError(
        f"the key {shown} is written twice ({where}): the keys a dataset gives (__key__) "
        "must be unique; no manifest.json was written",
        url=out,
    )
