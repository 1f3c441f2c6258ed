"""Helpers that watch processes through /proc: descendants, liveness, waiting for exit.

A process can vanish between any two reads of /proc: opening its file then fails with
FileNotFoundError, and reading a file opened a moment before fails with
ProcessLookupError. Both mean "gone", and every helper here treats them so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

GONE = (FileNotFoundError, ProcessLookupError)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except GONE:
        return False


def children(pid: int) -> list[int]:
    """The children of every thread of ``pid``; empty once it is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except GONE:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
        except GONE:
            continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every living descendant of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    found: list[int] = []
    for child in children(pid):
        if alive(child):
            found += [child, *descendants(child)]
    return found


def still_alive(pids: Iterable[int], timeout: float = 10) -> set[int]:
    """The processes of ``pids`` still running after waiting up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    left = set(pids)
    while True:
        left = {p for p in left if alive(p)}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)
