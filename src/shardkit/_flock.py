"""The one way shardkit takes an exclusive ``flock``: without waiting, on a file that is
still where it was looked for.

A lock belongs to a file, not to a name: whoever held it before may have removed or
replaced the file while we waited for our turn, and then the lock we got guards nothing.
So the lock counts only if the name still leads to the locked file. Used for the build
lock of an output folder (``builder/_journal.py``), the lock that keeps a build's spill
folder alive (``builder/_spill.py``) and the eviction of a cached copy (``cachelimit.py``).
``flock`` locks hold across processes of one machine (and across containers that share
the folder); not over NFS.
"""

from __future__ import annotations

import fcntl
import os

__all__ = ["lock_exclusive"]


def lock_exclusive(path: str, *, create: bool = False) -> int | None:
    """A descriptor of the file at ``path`` holding an exclusive ``flock`` on it, taken
    without waiting (close the descriptor to let go).

    Raises :class:`BlockingIOError` while another open file holds a lock on it. Returns
    None when there is no file there to lock: none to open (without ``create``), or the
    file was removed or replaced between our open and our lock. ``create`` opens it for
    writing and makes it if it is missing (mode 0644; a missing folder still raises
    :class:`FileNotFoundError`, a link at ``path`` an OSError: it is never followed);
    without it, the file is opened read-only.
    """
    # A lock file made here is never made through a link planted at its name.
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW if create else os.O_RDONLY
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        if create:
            raise
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = os.fstat(fd)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
    except BaseException:
        os.close(fd)
        raise
    # The descriptor keeps the locked file's inode allocated, so no other file can have
    # its number: equal numbers mean the very file.
    if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return None
    return fd
