"""WebDataset tar shards: a streaming reader and a byte-reproducible writer.

The rules are webdataset's:

* A member name splits into key and extension at the FIRST dot of its last path
  component: ``a/b.c.d.jpg`` is key ``a/b``, extension ``c.d.jpg``.
* A sample is a run of consecutive members with the same key. Extensions are lower-cased
  on read. Read samples carry ``__key__`` and ``__url__``.
* Directory members and webdataset's ``__meta__`` members at the archive root are skipped;
  other non-regular members (links, devices, fifos), names without a key and duplicate
  extensions within a sample are *data errors*, passed to the ``handler`` policy.

These rules are written once: :class:`Grouping` applies them for the sample reader and
for every tool (``cat``, ``split``, ``verify``, ``stats``), over the one member parser,
:class:`TarScanner` (:mod:`shardkit.formats._tarparse`), which the tools use for their
extra powers (raw member bytes, resync after garbage) and the reader without read-ahead.
The parser only reads (``read``/``readinto``): no seeking, so pipes and HTTP bodies work.
It understands ustar, GNU (long names, base-256 sizes) and PAX headers, so it reads what
GNU tar, Python's tarfile and webdataset write.

Bytes already in memory (a memory-mapped shard, an index span read on its own) are read
by :func:`buffer_samples` and :func:`span_sample`: plain ustar members
(:func:`~shardkit.formats._tarparse.plain_header`, the stream's own fast rule) are walked
and grouped directly, by the same rules (:func:`split_name`, extensions lower-cased, none
twice); at the first member that is anything else, or that :class:`Grouping` would
report or skip, the scanner takes over over the same buffer
(:meth:`TarScanner.over_buffer`), so every outcome is the stream's. Over a whole shard,
the walk can note the shard's member table as it goes (:class:`TableNotes`), so that a
reader that keeps it slices the shard's samples next time instead of parsing it.

Untrusted archives are safe to read: every malformed input ends in a
:class:`~shardkit.errors.FormatError`; a member is read whole only up to
the budget's ``member`` limit, or ``max_member_size`` (refused from its header before
anything is read), and in pieces, so
a size that lies allocates nothing; the reader never touches the file system. Member
names come back exactly as stored (``../x``, ``/etc/x``): code that turns them into paths
uses :func:`safe_member_path`. The limits are :mod:`shardkit.budget`'s and
:mod:`shardkit.formats.limits`'.

The writer emits plain ustar: one 512-byte header per member (a GNU long-name header only
for names over 255 bytes), fixed mtime, owner and mode, members in the sample's order. The
same samples always give the same bytes. It refuses (:class:`EncodeError`) what the reader
would refuse: a member over the member limit, a name over the name limit, extensions equal
once lower-cased, the same key twice in a row (:func:`check_key_order`, which every writer
calls).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from ..errors import FormatError
from ..handlers import Handler, reraise
from ._io import read_exact
from ._tarderive import TableNotes
from ._targroup import Grouping, buffer_samples, iter_samples, span_sample
from ._tarparse import (
    BLOCK,
    DIRECTORY,
    REGULAR_TYPES,
    Buffer,
    RawMember,
    TarScanner,
    Write,
    member_limit,
)
from ._tarrules import SAME_KEY, check_key_order, odd_member, split_name
from ._tarwrite import END_OF_ARCHIVE, Members, TarWriter, encode_sample, tar_chunks, tar_sample

__all__ = [
    "BLOCK",
    "END_OF_ARCHIVE",
    "SAME_KEY",
    "Buffer",
    "Grouping",
    "Members",
    "RawMember",
    "TableNotes",
    "TarMember",
    "TarScanner",
    "TarWriter",
    "Write",
    "buffer_samples",
    "check_key_order",
    "encode_sample",
    "iter_members",
    "iter_samples",
    "member_limit",
    "read_exact",
    "safe_member_path",
    "span_sample",
    "split_name",
    "tar_chunks",
    "tar_sample",
]


class TarMember(NamedTuple):
    """One regular member: its (possibly long) name, its bytes, its header's offset."""

    name: str
    data: bytes
    offset: int


def iter_members(
    stream: BinaryIO,
    *,
    url: str | None = None,
    handler: Handler = reraise,
    max_member_size: int | None = None,
) -> Iterator[TarMember]:
    """Yield the regular members of a tar stream, in order.

    Structural errors (a bad header checksum, a truncated member) raise: the rest of the
    stream cannot be trusted. Non-regular members go to ``handler``. Members are read
    whole into memory, so one whose header declares more than the budget's ``member``
    limit (``SHARDKIT_MAX_MEMBER``, 1 GiB), or ``max_member_size`` bytes where it is
    given, raises :class:`FormatLimitError` before anything is read (PAX and GNU long-name headers
    are limited to 1 MiB); other members are streamed past, never held. Names are
    returned as they are, ``../`` and all: see :func:`safe_member_path`.
    """
    members = TarScanner(stream, url=url, max_member_size=max_member_size, readahead=False)
    for member in members:
        if member.typeflag in REGULAR_TYPES:
            yield TarMember(member.name, members.read_data(), member.offset)
        elif member.typeflag != DIRECTORY and not handler(odd_member(member, url)):
            return


def safe_member_path(name: str, root: str | None = None) -> str:
    """``name`` (a member name or sample key) as a path that stays inside a folder.

    The reader returns names as the archive has them; anything that turns them into file
    paths must go through this. Raises :class:`FormatError` (a data error: ``handler``
    policies apply) for an absolute path, a ``..`` component, an empty component
    (``a//b``, a trailing ``/``), a NUL character, or a drive (on Windows). ``.``
    components are dropped: ``./a/b.jpg`` gives ``a/b.jpg``. With ``root``, returns
    ``root`` joined with that path, after checking that no symlink already inside
    ``root`` leads the path out of it.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    slashed = name.replace(os.altsep, "/") if os.altsep else name
    if os.sep != "/":
        slashed = slashed.replace(os.sep, "/")
    parts = [part for part in slashed.split("/") if part != "."]
    problem = _path_problem(name, slashed, parts)
    if problem is not None:
        raise FormatError(f"unsafe member name {name!r}: {problem}", key=name)
    path = "/".join(parts)
    if root is None:
        return path
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, *parts))
    if os.path.commonpath([base, target]) != base:
        raise FormatError(
            f"unsafe member name {name!r}: a symlink in {root!r} leads it outside", key=name
        )
    return os.path.join(root, *parts)


def _path_problem(name: str, slashed: str, parts: list[str]) -> str | None:
    if "\0" in name:
        return "it contains NUL"
    if slashed.startswith("/") or os.path.splitdrive(name)[0]:
        return "it is absolute"
    if ".." in parts:
        return "it has a '..' component"
    if not parts:
        return "it is empty"
    if "" in parts:
        return "it has an empty component"
    return None
