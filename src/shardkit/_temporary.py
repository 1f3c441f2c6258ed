"""The one owner of temporary names: every file shardkit writes before it is final.

A temporary name is the final name, hidden, with :data:`~shardkit.formats.names.TEMPORARY_MARK`
and a random suffix: ``.NAME.tmp-RANDOM`` (beside the final file, so that the rename that
commits it stays in one folder). The suffix is random, not the process id: two writers of one
name in one process (or in two containers with the same pid) never share a temporary, and
nobody can plant a file or a link at a name before it is made. A local temporary is created
exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``): whatever already sits at the name (a link
out of the folder included) is never opened or followed; another name is drawn instead.

Used by ``storage.AtomicFile`` (every shard, index, manifest shardkit writes), the read cache
(``cache_dir`` copies), the cache limit (which never counts nor evicts a temporary) and the
build's cleanup of its output folder.
"""

from __future__ import annotations

import os
import secrets

from .formats.names import TEMPORARY_MARK

__all__ = [
    "create_temporary",
    "is_temporary",
    "temporary_name",
    "temporary_prefix",
]

_ATTEMPTS = 32
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def temporary_name(path: str, *, hidden: bool = True) -> str:
    """A fresh temporary name for the file ``path``: ``.NAME.tmp-RANDOM`` in its folder
    (``NAME.tmp-RANDOM`` with ``hidden=False``, for an object store's key)."""
    if not hidden:
        return f"{path}{TEMPORARY_MARK}{secrets.token_hex(8)}"
    folder, name = os.path.split(path)
    return os.path.join(folder, f"{temporary_prefix(name)}{secrets.token_hex(8)}")


def temporary_prefix(name: str) -> str:
    """What every temporary name of the file ``name`` (in its folder) starts with."""
    return f".{name}{TEMPORARY_MARK}"


def create_temporary(path: str, mode: int = 0o666) -> tuple[int, str]:
    """Create a temporary file for the local file ``path``, exclusively and without
    following links: its descriptor (open for writing) and its name.

    A name already taken (by anything: a file, a link, a FIFO) is never opened; another is
    drawn. OSErrors other than a taken name (a full disk, a missing folder) propagate."""
    for _ in range(_ATTEMPTS):
        name = temporary_name(path)
        try:
            return os.open(name, _FLAGS, mode), name
        except FileExistsError:
            continue
    raise FileExistsError(f"{_ATTEMPTS} temporary names for {path} were all taken")


def is_temporary(name: str) -> bool:
    """Whether ``name`` (a file name or a path) is a file still being written: one a
    cleanup may remove and a cache never counts."""
    return TEMPORARY_MARK in os.path.basename(name)
