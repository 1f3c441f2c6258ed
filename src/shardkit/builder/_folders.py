"""Listing a folder of images or samples, on disk or under an object-store prefix
(``s3://bucket/train``: one listing request per 1,000 objects, then one GET per file in
the workers), into a :class:`~.sources.Listing`: ``root/<class>/**/<file>``
(torchvision's ImageFolder layout), or with ``layout="samples"`` ``root/**/<file>`` and
no classes; files that share a path without their extension are one sample
(:mod:`.samples`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from ..codecs import normalize_image_extension
from ..errors import BuildError
from ._inputs import FileSource, sample_path
from ._keys import make_keys, path_key, spilled_keys
from ._plan import new_item
from ._samples import FOLDER_EXTENSIONS, field_problem, group_samples
from ._skipped import SkippedLog
from ._sources import Item, Items, Listing, SpilledItems, nothing_found
from ._spill import Sorter, Spill
from ._walk import FolderWalk

__all__ = ["list_image_folder", "list_remote_folder"]


_NO_CLASSES = (
    "no class subfolders: expected SRC/<class>/<image> (ImageFolder layout), "
    "or --layout samples for a folder of samples without classes"
)


def list_image_folder(root: str, spill: Spill | None = None, layout: str = "classes") -> Listing:
    """List ``root/<class>/**/<file>`` (classes: the sorted subfolder names), or with
    ``layout="samples"`` ``root/**/<file>`` with no classes; files form samples as
    :mod:`.samples` says.

    Links, special files and unreadable folders follow the rules of :mod:`.walk`. With a
    ``spill``, a folder of more files than the driver holds at once is sorted and kept
    on disk (:mod:`.spill`); the items and their order are the same either way."""
    if not os.path.isdir(root):
        raise BuildError("no such folder", url=root)
    if spill is None:
        with Spill() as own:  # everything is held in the end anyway
            return list_image_folder(root, own, layout)._held()
    sorter = Sorter(spill)  # sorted by (class, path): the (label, path) order
    skipped = SkippedLog(spill)  # spilled past a budget
    walk = FolderWalk(root, field_problem, sorter.extend, skipped)
    try:
        top = walk.top()
    except OSError as exc:
        raise BuildError(f"cannot list the folder: {exc.strerror or exc}", url=root) from exc
    if layout == "samples":
        walk.walk_all()
    elif not any(entry.is_dir() for entry in top):
        raise BuildError(_NO_CLASSES, url=root)
    else:
        walk.walk(top)
    source = FileSource(os.path.abspath(root))
    return _folder_listing(root, source, sorter, walk.classes, skipped, spill, layout)


def _folder_listing(
    root: str,
    source: FileSource,
    sorter: Sorter,
    classes: list[str],
    skipped: SkippedLog,
    spill: Spill,
    layout: str = "classes",
) -> Listing:
    """The listing of a folder, local or remote, from its walk: ``sorter`` holds
    (class, path, size, version) in path order."""
    label_of = {name: label for label, name in enumerate(classes)}
    label_of[""] = -1  # the samples layout: no class
    spilled = sorter.spilled  # before sorted(), which may spill the last run
    entries = ((label_of[c], rel, size, v) for c, rel, size, v in sorter.sorted())
    grouped = group_samples(entries, layout, skipped)
    items: Items
    if spilled:
        items, (fingerprint, samples) = _spilled_folder_items(grouped, classes, spill)
    else:
        found = list(grouped)
        fingerprint, samples = _fingerprint(classes, found)
        items = _folder_items(found, classes)
    if not len(items):
        what = "files" if layout == "samples" else "images found in the class folders"
        nothing_found(f"no {what}", skipped, root)
    return Listing(
        kind="image_folder",
        path=root,
        source=source,
        items=items,
        classes=classes,
        skipped=skipped,  # sorted as it is read
        fingerprint=fingerprint,
        sizes_known=not samples,  # a sample's output size is known only once packed
    )


def list_remote_folder(url: str, spill: Spill | None = None, layout: str = "classes") -> Listing:
    """List ``url/<class>/**/<file>`` (or ``url/**/<file>``) in an object store (the same
    rules as on disk).

    Folder by folder (one paginated listing per folder, dropped from the filesystem's
    listing cache once read), up to :data:`~shardkit.storage.REQUESTS_IN_FLIGHT` folders
    at once, so the driver holds at most that many folders' listings at a time; the files
    go through the same sorted runs as a local folder's, so the order in which the
    listings come back does not matter."""
    from .. import storage

    root = url.rstrip("/")
    if spill is None:
        with Spill() as own:  # everything is held in the end anyway
            return list_remote_folder(url, own, layout)._held()
    sorter = Sorter(spill)
    skipped = SkippedLog(spill)  # spilled past a budget
    try:
        fs, base = storage.filesystem(root)
        classes = _walk_remote(fs, base.rstrip("/"), sorter, skipped, layout == "samples")
    except FileNotFoundError:
        classes = None
    except OSError as exc:
        raise BuildError(f"cannot list the source: {exc}", url=root) from exc
    if classes is None:
        raise BuildError("no such folder, or it holds no objects", url=root)
    if not classes and layout == "classes":
        raise BuildError(_NO_CLASSES, url=root)
    return _folder_listing(root, FileSource(root), sorter, classes, skipped, spill, layout)


def _walk_remote(
    fs: Any, base: str, sorter: Sorter, skipped: SkippedLog, flat: bool = False
) -> list[str] | None:
    """Walk ``base`` folder by folder into ``sorter`` (class, path, size, version) and
    ``skipped``; returns the class names, sorted (None: ``base`` holds no object).

    A class is a top-level folder that holds any object (hidden ones too); names starting
    with ``.`` are left out, as on disk. ``flat`` (the samples layout): no classes, every
    file's class is ''."""
    classes: set[str] = set()
    anything = False

    def visit(folder: str, rel: str, listed: list[dict[str, Any]]) -> list[tuple[str, str]]:
        nonlocal anything
        folders = []
        for info in sorted(listed, key=lambda i: str(i["name"])):
            name, is_dir = str(info["name"]), info.get("type") == "directory"
            if (name.endswith("/") and not is_dir) or name.rstrip("/") == folder:
                continue  # a directory marker, or the folder itself
            anything = True
            leaf = name.rstrip("/").rpartition("/")[2]
            path = f"{rel}/{leaf}" if rel else leaf
            if rel and not flat:
                classes.add(rel.split("/", 1)[0])
            if leaf.startswith("."):
                continue
            if is_dir:
                folders.append((name.rstrip("/"), path))
            elif not rel and not flat:
                skipped.append((path, "not inside a class folder"))
            elif problem := field_problem(leaf):
                skipped.append((path, problem))
            else:
                version = info.get("ETag") or info.get("etag") or info.get("mtime") or ""
                size = int(info.get("size") or 0)
                cls = "" if flat else path.split("/", 1)[0]
                sorter.add((cls, path, size, str(version)))
        return folders

    _list_folders(fs, base, visit)
    return sorted(classes) if anything else None


_Visit = Callable[[str, str, list[dict[str, Any]]], list[tuple[str, str]]]


def _list_folders(fs: Any, base: str, visit: _Visit) -> None:
    """List ``base`` and every folder ``visit`` returns, up to ``REQUESTS_IN_FLIGHT`` at
    once, each on a thread of its own; ``visit(folder, rel, listed)`` runs on this thread
    as each listing comes back (in any order) and returns the (folder, rel) to list next.
    The first error is raised once the listings in flight are back; none starts after it."""
    from .. import storage

    threads = storage.REQUESTS_IN_FLIGHT
    pending = [(base, "")]  # depth first, as a stack: few folders wait at a time
    running: dict[Future[list[dict[str, Any]]], tuple[str, str]] = {}
    with ThreadPoolExecutor(threads, thread_name_prefix="shardkit-list") as pool:
        while pending or running:
            while pending and len(running) < threads:
                folder, rel = pending.pop()
                running[pool.submit(_ls, fs, folder)] = (folder, rel)
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                folder, rel = running.pop(future)
                pending.extend(reversed(visit(folder, rel, future.result())))


def _ls(fs: Any, folder: str) -> list[dict[str, Any]]:
    """One folder's listing, dropped from the filesystem's listing cache once read."""
    listed: list[dict[str, Any]] = fs.ls(folder, detail=True)
    fs.invalidate_cache(folder)
    return listed


def _spilled_folder_items(
    entries: Iterable[tuple[int, Any, int, Any]], classes: list[str], spill: Spill
) -> tuple[SpilledItems, tuple[str, bool]]:
    """Sorted ``entries`` (label, path or files, size, version) written to a spill file as
    they are fingerprinted; their items are made as they are read (keys as
    :func:`make_keys`)."""
    records = spill.new_file()

    def recorded() -> Iterator[tuple[int, Any, int, Any]]:
        for label, ref, size, version in entries:
            records.append((label, ref, size))
            yield label, ref, size, version

    fingerprint = _fingerprint(classes, recorded())
    keys = spilled_keys(lambda: (sample_path(ref) for _, ref, _ in records), len(records), spill)
    make = _item_maker()

    def decode(record: tuple[int, Any, int]) -> Item:
        path = sample_path(record[1])
        return make(record, keys.get(path) or path_key(path))

    return SpilledItems(records, decode), fingerprint


def _folder_items(found: list[tuple[int, Any, int, Any]], classes: list[str]) -> list[Item]:
    """Turn ``found`` (label, path or files, size, version) into Items in place: the
    listing's peak memory is one list of entries, not two."""
    keys = make_keys([ref if ref.__class__ is str else sample_path(ref) for _, ref, _, _ in found])
    make = _item_maker()
    items: list[Any] = found
    for i, key in enumerate(keys):
        items[i] = make(found[i], key)
    return items


def _item_maker() -> Callable[[tuple[Any, ...], str], Item]:
    normal = {ext: normalize_image_extension(ext) for ext in FOLDER_EXTENSIONS}
    as_listed: dict[str, str] = {}  # the extension as a name spells it -> its field

    def make(entry: tuple[Any, ...], key: str) -> Item:
        label, ref, size = entry[0], entry[1], entry[2]
        if ref.__class__ is not str:  # a sample of several files
            return new_item((ref, key, label, "", size, "", ()))
        spelled = ref.rpartition(".")[2]
        ext = as_listed.get(spelled)
        if ext is None:
            ext = as_listed[spelled] = normal[spelled.lower()]
        return new_item((ref, key, label, ext, size, "", ()))

    return make


_FINGERPRINT_BATCH = 4096  # lines hashed at once


def _fingerprint(
    classes: list[str], entries: Iterable[tuple[int, Any, int, Any]]
) -> tuple[str, bool]:
    """The listing's fingerprint: its classes, then each file's path, size and version,
    item by item (a sample's files in turn); and whether an item is a sample of several
    files. Lines are hashed in batches: the same bytes as one at a time."""
    digest = hashlib.sha256(json.dumps(classes).encode())
    samples = False
    lines: list[str] = []
    for _, ref, size, version in entries:
        if ref.__class__ is str:
            lines.append(f"{ref}\0{size}\0{version}\n")
        else:
            samples = True
            for (rel, _, each), v in zip(ref, version, strict=True):
                lines.append(f"{rel}\0{each}\0{v}\n")
        if len(lines) >= _FINGERPRINT_BATCH:
            digest.update("".join(lines).encode("utf-8", "surrogateescape"))
            lines = []
    digest.update("".join(lines).encode("utf-8", "surrogateescape"))
    return digest.hexdigest(), samples
