"""WebDataset's naming rules for tar members, shared by the reader, the grouping and the
writer (:mod:`shardkit.formats.tar` is their public door): a member name splits into key
and extension at the first dot of its last path component; the same key twice in a row is
refused by every writer (readers would merge the two samples); a member no sample takes is
a data error."""

from __future__ import annotations

from ..errors import EncodeError, FormatError
from ._tarparse import RawMember, member_kind

__all__ = ["SAME_KEY", "check_key_order", "odd_member", "split_name"]

SAME_KEY = "the same __key__ twice in a row: readers would merge the two samples"


def split_name(name: str) -> tuple[str, str] | None:
    """Split a member name into (key, extension) by the first-dot rule, or None."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot <= slash:  # no dot, or the last component starts with one: no key
        return None
    return name[:dot], name[dot + 1 :]


def check_key_order(previous: str | None, key: str) -> str:
    """``key``, refused (EncodeError) when it repeats the previous sample's key: readers
    would merge the two samples. Every writer calls this."""
    if key == previous:
        raise EncodeError(SAME_KEY, key=key)
    return key


def odd_member(member: RawMember, url: str | None) -> FormatError:
    """The data error for a non-regular member (a link, a device, a fifo)."""
    kind = member_kind(member.typeflag)
    return FormatError(
        f"non-regular member {member.name!r} ({kind})", url=url, offset=member.offset
    )
