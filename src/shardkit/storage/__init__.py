"""Open any shard URL for reading or writing: local paths, ``file:``, ``-`` (stdin/stdout),
``pipe:CMD``, and every fsspec protocol (``http(s)://``, ``s3://``, ``gs://``, ...).

Writing is atomic, through one object (:class:`AtomicFile`): a local file is written under
a hidden temporary name in the same folder and renamed when complete; an object store (s3,
gs) only makes an object visible when its upload completes, and an upload that fails is
discarded. No partial file ever carries a final name.

One module per job, behind these names: ``_urls`` (the URL grammar: brace patterns, local
paths; no fsspec), ``_filesystems`` (fsspec, imported on first remote use, and the fork
hooks of event loops that run in a thread), ``_reading`` (:func:`open_read`, and
:func:`map_file` for local files read in place), ``_remote`` (remote reads that resume
after transient failures), ``_cache`` (``cache_dir`` copies), ``_doors`` (the reading door:
:func:`open_regular`, :func:`read_document` and :func:`read_regular` for every file
shardkit did not just write)
and ``_writing`` (:class:`AtomicFile`, :class:`Tally`; temporaries from
:mod:`shardkit._temporary`, the writing door).
:func:`atomic_write` lives here and goes through :func:`open_atomic`, so every write in
shardkit passes one name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import BinaryIO, cast

from ._access import LOCAL, Access, StorageOptions
from ._cache import cache_path, open_cached, refresh_copy
from ._doors import folder_entries, open_regular, open_regular_fd, read_document, read_regular
from ._filesystems import REQUESTS_IN_FLIGHT, detach_loop_at_fork, filesystem, url_exists
from ._reading import map_file, open_read, opening
from ._remote import READ_RETRIES, is_transient, read_failure, wait_to_retry
from ._urls import (
    basename,
    check_data_url,
    data_url_problem,
    expand_urls,
    is_executing,
    is_local,
    join,
    local_path,
    url_scheme,
)
from ._writing import AtomicFile, CommitOrDiscard, Tally, open_atomic

__all__ = [
    "LOCAL",
    "READ_RETRIES",
    "REQUESTS_IN_FLIGHT",
    "Access",
    "AtomicFile",
    "CommitOrDiscard",
    "StorageOptions",
    "Tally",
    "atomic_write",
    "basename",
    "cache_path",
    "check_data_url",
    "data_url_problem",
    "detach_loop_at_fork",
    "expand_urls",
    "filesystem",
    "folder_entries",
    "is_executing",
    "is_local",
    "is_transient",
    "join",
    "local_path",
    "map_file",
    "open_atomic",
    "open_cached",
    "open_read",
    "open_regular",
    "open_regular_fd",
    "opening",
    "read_document",
    "read_failure",
    "read_regular",
    "refresh_copy",
    "url_exists",
    "url_scheme",
    "wait_to_retry",
]


@contextlib.contextmanager
def atomic_write(url: str, *, access: Access = LOCAL, fsync: bool = False) -> Iterator[BinaryIO]:
    """Open ``url`` for writing; it appears under its name only if the block succeeds."""
    with open_atomic(url, access=access, fsync=fsync) as file:
        yield cast(BinaryIO, file.stream)
