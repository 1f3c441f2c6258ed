"""The files of a folder as samples: which files form one sample, and its field names.

Files that share a path without their extension form one sample (webdataset's convention,
and img2dataset's output): ``a/0001.jpg``, ``a/0001.txt`` and ``a/0001.seg.png`` are the
fields ``jpg``, ``txt`` and ``seg.png`` of the sample ``a/0001``. A name's extension is
everything after its first dot, lower-cased; an image extension is spelled one way
(``JPEG`` -> ``jpg``, as :func:`shardkit.codecs.normalize_image_extension` does).

* A file whose extension no codec knows (and a file with none) is skipped by its name
  (:func:`field_problem`); the rest of its sample is packed.
* A sample holds at least one media file (image, audio or video), else its files are
  skipped: a stray ``README.txt`` or img2dataset's ``00000_stats.json`` is no sample.
* Two files that give one field (``a.jpg`` and ``a.jpeg``) skip their whole sample.
* In the class layout the folder gives ``cls``: a ``cls`` file is skipped. A sample made
  only of images is packed as before, one sample per image file (``a.jpg`` and ``a.png``
  stay two samples, keyed ``a_jpg`` and ``a_png``), so an image folder packs as it did.

Groups are found in one pass over the files sorted by path, holding only the groups whose
files may still come (those whose path prefix the current path starts with), and come out
in the order of their first file: an image folder's items keep their order.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..codecs import (
    AUDIO_EXTENSIONS,
    IMAGE_EXTENSIONS,
    VIDEO_EXTENSIONS,
    default_codecs,
    normalize_image_extension,
)

if TYPE_CHECKING:
    from ._sources import SkippedItems

__all__ = [
    "FILE_TYPES",
    "FOLDER_EXTENSIONS",
    "MEDIA_EXTENSIONS",
    "field_name",
    "field_problem",
    "group_samples",
]

#: Image file extensions a folder recognises (case-insensitively).
FOLDER_EXTENSIONS = frozenset(
    {"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm"}
)
#: Media kinds: a sample needs one of these.
MEDIA_EXTENSIONS = FOLDER_EXTENSIONS | AUDIO_EXTENSIONS | VIDEO_EXTENSIONS
#: Every field extension a folder packs (by its last component): media, and the value
#: kinds the codecs know (text, json, cls, npy, ...); other image formats are not.
FILE_TYPES = MEDIA_EXTENSIONS | (default_codecs.extensions() - IMAGE_EXTENSIONS)

_NO_MEDIA = "no image, audio or video file shares its name (extension {!r})"
_CLS_FILE = "the class folder gives cls in the class layout"

# label, path relative to SRC (an item: or its files), size, version (an item: or theirs)
Entry = tuple[int, Any, int, Any]


def field_name(name: str) -> str:
    """The field a file named ``name`` gives: ``0001.Seg.JPEG`` -> ``seg.jpg``."""
    field = name.partition(".")[2].lower()
    if field.rpartition(".")[2] in FOLDER_EXTENSIONS:
        return normalize_image_extension(field)
    return field


def field_problem(name: str) -> str:
    """The reason to skip a file of a folder by its name, or ''."""
    field = name.partition(".")[2].lower()
    if not field:
        return "no extension: a field needs one"
    last = field.rpartition(".")[2]
    if last not in FILE_TYPES:
        return f"unknown field extension {last!r}"
    return ""


def _last(field: str) -> str:
    return field.rpartition(".")[2]


def _prefix(rel: str) -> str:
    """The path every file of ``rel``'s sample starts with: ``a/0001.``."""
    head, _, name = rel.rpartition("/")
    stem = name.partition(".")[0]
    return f"{head}/{stem}." if head else f"{stem}."


class _Group:
    __slots__ = ("done", "entries", "prefix")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.entries: list[Entry] = []
        self.done = False


def _groups(entries: Iterator[Entry], first: list[Entry] | None = None) -> Iterator[list[Entry]]:
    """The files of each sample, from ``entries`` sorted by path, in first-file order
    (``first``: the files of a sample that comes before them and is still open)."""
    open_: list[_Group] = []  # nested prefixes, the innermost last
    order: deque[_Group] = deque()
    if first:
        open_.append(_Group(_prefix(first[0][1])))
        open_[-1].entries = first
        order.append(open_[-1])
    for entry in entries:
        rel = entry[1]
        while open_ and not rel.startswith(open_[-1].prefix):
            open_.pop().done = True
        head, slash, name = rel.rpartition("/")  # _prefix(rel), inline: once per file
        prefix = f"{head}/{name.partition('.')[0]}." if slash else f"{name.partition('.')[0]}."
        if not (open_ and open_[-1].prefix == prefix):
            open_.append(_Group(prefix))
            order.append(open_[-1])
        open_[-1].entries.append(entry)
        while order and order[0].done:
            yield order.popleft().entries
    for group in order:
        yield group.entries


def group_samples(entries: Iterable[Entry], layout: str, skipped: SkippedItems) -> Iterator[Entry]:
    """The items of sorted file ``entries`` (label, path, size, version), appending the
    files left out to ``skipped``.

    An item is a file as listed (one image, or a sample of one file whose name has one
    dot) or ``(label, files, size, versions)``: ``files`` a tuple of (path, field, size),
    ``size`` their total, ``versions`` theirs.

    While no folder name holds a dot, the files of one sample are consecutive (they share
    the prefix ``folder/stem.``, and no other file's path starts with it): samples are
    runs of one prefix, found here in one comparison per file, and a lone image file is
    an item as it is. From the first file in a folder named with a dot on, a sample may
    nest in another's prefix (``a/x.jpg``, ``a/x.d/y.jpg``, ``a/x.txt``): :func:`_groups`
    takes over, with the sample still open."""
    entries = iter(entries)
    group: list[Entry] = []
    prefix = ""
    lone = False  # whether the open group's first file is an image named with one dot
    for entry in entries:
        head, slash, name = entry[1].rpartition("/")
        if "." in head:
            for files in _groups(itertools.chain([entry], entries), group):
                yield from _group_items(files, layout, skipped)
            return
        stem, _, ext = name.partition(".")
        here = f"{head}/{stem}." if slash else f"{stem}."
        if here == prefix:
            group.append(entry)
            continue
        if len(group) == 1 and lone:
            yield group[0]
        elif group:
            yield from _items(group, layout, skipped)
        group, prefix = [entry], here
        lone = "." not in ext and ext.lower() in FOLDER_EXTENSIONS
    if len(group) == 1 and lone:
        yield group[0]
    elif group:
        yield from _items(group, layout, skipped)


def _group_items(group: list[Entry], layout: str, skipped: SkippedItems) -> Iterator[Entry]:
    """The items of one sample's files (:func:`group_samples`)."""
    if len(group) == 1:  # the usual file: one image named with one dot is itself
        name = group[0][1].rpartition("/")[2]
        ext = name.partition(".")[2]
        if "." not in ext and ext.lower() in FOLDER_EXTENSIONS:
            yield group[0]
            return
    yield from _items(group, layout, skipped)


def _items(group: list[Entry], layout: str, skipped: SkippedItems) -> Iterator[Entry]:
    classes = layout == "classes"
    files = []
    for entry in group:
        field = field_name(entry[1].rpartition("/")[2])
        if classes and field == "cls":
            skipped.append((entry[1], _CLS_FILE))
        else:
            files.append((entry, field))
    if not files:
        return
    images = [_last(field) in FOLDER_EXTENSIONS for _, field in files]
    if classes and all(images):  # an image folder: one sample per image, as before
        yield from (entry for entry, _ in files)
        return
    if not any(_last(field) in MEDIA_EXTENSIONS for _, field in files):
        skipped.extend((entry[1], _NO_MEDIA.format(_last(field))) for entry, field in files)
        return
    fields = [field for _, field in files]
    if len(set(fields)) < len(fields):
        twice = sorted({f for f in fields if fields.count(f) > 1})
        reason = f"two files give the field {twice[0]!r}: the sample is skipped"
        skipped.extend((entry[1], reason) for entry, _ in files)
        return
    if len(files) == 1 and images[0] and "." not in files[0][1]:  # one image, as it is
        yield files[0][0]
        return
    refs = tuple((entry[1], field, entry[2]) for entry, field in files)
    versions = tuple(entry[3] for entry, _ in files)
    yield files[0][0][0], refs, sum(entry[2] for entry, _ in files), versions
