"""Build sources: what to pack, listed up front as :class:`Item` records.

A source lists its items in a fixed order (the plan shuffles them with the seed) and
knows how to load one item in a worker. Listing happens once, in the driver; loading
happens in the workers, so a source object must pickle small (a root folder, a dataset).

* a folder (``root/<class>/**/<file>``, torchvision's ImageFolder layout, or with
  ``layout="samples"`` ``root/**/<file>`` and no classes), on disk or under an
  object-store prefix (``s3://bucket/train``: one listing request per 1,000 objects, then
  one GET per file in the workers); files that share a path without their extension are
  one sample (:mod:`.samples`);
* a CSV/JSONL/parquet list (:mod:`.tables`, rows of parquet from :mod:`.parquet`);
* a Python map-style dataset or one-pass iterable (:mod:`.pysources`);
* existing shards (:mod:`.shards`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NamedTuple, NoReturn, Protocol

from .. import config
from ..codecs import normalize_image_extension
from ..errors import BuildError, DataError, EmptyBuildError
from .keys import make_keys, path_key, spilled_keys
from .samples import FOLDER_EXTENSIONS, field_problem, group_samples
from .spill import RecordFile, Sorter, Spill
from .store import endpoint_options
from .walk import FolderWalk, Found, file_kind

__all__ = [
    "FileSource",
    "Item",
    "Items",
    "Listing",
    "SampleFileError",
    "SampleFiles",
    "Source",
    "SpilledItems",
    "check_listed_size",
    "folder_json",
    "image_extension",
    "list_image_folder",
    "list_remote_folder",
    "read_file",
]


class Item(NamedTuple):
    """One input sample as listed: small, picklable, loaded later by a worker."""

    ref: Any  # path (relative to the source root, absolute, or a URL), index, or raw item;
    # a folder's sample of several files: a tuple of (path, field, size)
    key: str
    label: int  # -1 when the source has no labels
    ext: str  # field extension of the image ("jpg"); "" for samples from Python or files
    size: int  # input bytes as listed (0 when unknown)
    meta: str  # JSON text of the sample's ``json`` field ("" for none)
    # A sample of several fields: each (ext, kind, value, size), in member order (.fields)
    fields: tuple[tuple[str, str, str, int], ...] = ()


class SampleFiles(dict[str, bytes]):
    """The fields of a folder's sample of several files, as loaded (field -> bytes)."""


class SampleFileError(DataError):
    """A bad file of a sample of several files: its whole sample is skipped, and the file
    (``url``, relative to the source) is listed with the reason."""


class Source(Protocol):
    """Loads one item in a worker: file bytes, or a ready sample dict."""

    @property
    def kind(self) -> str: ...

    def load(self, item: Item) -> bytes | Mapping[str, Any]: ...

    def describe(self, item: Item) -> str: ...

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str: ...


class Items(Protocol):
    """Listed items: how many, and one pass over them in listing order (a list, or
    :class:`SpilledItems` when there are more than the driver holds at once)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Item]: ...


class SpilledItems:
    """Items kept in a spill file as compact records, made into :class:`Item` s as read."""

    def __init__(self, records: RecordFile, decode: Callable[[Any], Item]) -> None:
        self.records = records
        self.decode = decode

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Item]:
        return map(self.decode, self.records)


@dataclass
class Listing:
    """Everything the driver knows about a source before planning."""

    kind: str
    path: str
    source: Source
    items: Items | None  # None for a one-pass iterable
    classes: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    fingerprint: str = ""
    stream: Iterator[Item] | None = None  # the items of a one-pass iterable
    sizes_known: bool = True  # item.size is the exact input size of every item

    @property
    def splittable(self) -> bool:
        return self.items is not None

    def _held(self) -> Listing:
        """This listing with its items in memory (before its spill folder goes)."""
        if self.items is not None and not isinstance(self.items, list):
            self.items = list(self.items)
        return self


def read_file(path: str, size: int) -> bytes:
    """The bytes of a local file that was listed with ``size`` bytes (one read call).

    Anything but a regular file is a :class:`DataError`, and never blocks: a FIFO or
    device is refused from its ``stat`` before it is opened, and the file is opened
    non-blocking and checked again with ``fstat``, in case it was swapped since. Where
    permitted (the file's owner), the read leaves its access time alone (``O_NOATIME``):
    packing a dataset is no reason to write to every inode on the source disk."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            fd = _open_regular(path)
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", url=path) from exc
    if not stat.S_ISREG(mode):
        raise DataError(f"not a regular file ({file_kind(mode)})", url=path)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise DataError(f"not a regular file ({file_kind(mode)})", url=path)
        data = os.read(fd, size + 1) if size < 0x7FFFF000 else _read_all(fd)
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", url=path) from exc
    finally:
        os.close(fd)
    if len(data) != size:
        raise DataError(f"file changed during the build ({size} -> {len(data)} bytes)", url=path)
    return data


_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
# O_NOATIME (Linux) is refused with EPERM unless this process owns the file: dropped for
# the rest of the process at the first refusal (a dataset mostly has one owner).
_no_atime = getattr(os, "O_NOATIME", 0)


def _open_regular(path: str) -> int:
    global _no_atime
    if _no_atime:
        try:
            return os.open(path, _READ_FLAGS | _no_atime)
        except PermissionError as exc:
            if exc.errno != errno.EPERM:  # EACCES: unreadable, whatever the flags
                raise
            _no_atime = 0
    return os.open(path, _READ_FLAGS)


def _read_url(url: str, size: int, options: dict[str, Any]) -> bytes:
    from .. import storage

    try:
        with storage.open_read(url, storage_options=options) as stream:
            data = stream.read()
    except OSError as exc:
        raise DataError(f"cannot read: {exc}", url=url) from exc
    check_listed_size(data, size, url)
    return data


def check_listed_size(data: bytes, size: int, url: str) -> None:
    """Raise a :class:`DataError` when a URL listed with ``size`` bytes (0: unknown) has
    another size now."""
    if size and len(data) != size:
        raise DataError(f"file changed during the build ({size} -> {len(data)} bytes)", url=url)


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 26):
        parts.append(chunk)
    return b"".join(parts)


@dataclass(frozen=True)
class FileSource:
    """Loads files by path: relative to ``root``, absolute, or any URL storage opens.

    ``s3_endpoint`` is the driver's S3 endpoint (see :func:`.store.endpoint_options`).
    """

    root: str
    kind: str = "image_folder"
    s3_endpoint: str | None = field(default_factory=config.s3_endpoint)

    def _ref(self, item: Item) -> str:
        ref = str(item.ref)
        if "://" in self.root and "://" not in ref:
            ref = f"{self.root}/{ref}"  # relative to a remote folder or list
        return ref

    def http_url(self, item: Item) -> str:
        """The item's http(s) URL, which the worker downloads itself (:mod:`.fetch`), or ''."""
        ref = self._ref(item)
        return ref if ref[:8].lower().startswith(("http://", "https://")) else ""

    def load(self, item: Item) -> bytes | SampleFiles:
        if not isinstance(item.ref, tuple):
            return self._load(self._ref(item), item.size)
        files = SampleFiles()  # a sample of several files
        for rel, name, size in item.ref:
            try:
                files[name] = self._load(self._ref(item._replace(ref=rel)), size)
            except DataError as exc:
                raise SampleFileError(exc.message, url=rel) from exc
        return files

    def _load(self, ref: str, size: int) -> bytes:
        if "://" in ref:
            return _read_url(ref, size, endpoint_options(ref, self.s3_endpoint))
        return read_file(os.path.join(self.root, ref), size)

    def describe(self, item: Item) -> str:
        """The item's path; a sample of several files: its path without extensions."""
        return _key_path(item.ref)

    def json_text(self, item: Item, classes: tuple[str, ...]) -> str:
        """The ``json`` field: listed metadata, or path, class name and label (the path of
        a sample of several files: its first file's)."""
        if item.meta or item.label < 0:
            return item.meta
        path = item.ref[0][0] if isinstance(item.ref, tuple) else str(item.ref)
        return folder_json(path, classes[item.label], item.label)


def folder_json(path: str, name: str, label: int) -> str:
    """The ``json`` field of an image-folder sample (exactly what json.dumps writes)."""
    if _plain(path) and _plain(name):  # the common case, without json.dumps's overhead
        return f'{{"path": "{path}", "class": "{name}", "label": {label}}}'
    return json.dumps({"path": path, "class": name, "label": label})


def _plain(text: str) -> bool:
    """Whether JSON writes ``text`` as it is between quotes."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


# --------------------------------------------------------------------------- image folder


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
    sorter = Sorter(spill)

    def found(f: Found) -> None:  # sorted by (class, path): the (label, path) order
        sorter.add((f.cls, f.rel, f.size, f.mtime_ns))

    walk = FolderWalk(root, field_problem, found)
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
    return _folder_listing(root, source, sorter, walk.classes, walk.skipped, spill, layout)


def _folder_listing(
    root: str,
    source: FileSource,
    sorter: Sorter,
    classes: list[str],
    skipped: list[tuple[str, str]],
    spill: Spill,
    layout: str = "classes",
) -> Listing:
    """The listing of a folder, local or remote, from its walk: ``sorter`` holds
    (class, path, size, version) in path order."""
    label_of = {name: label for label, name in enumerate(classes)}
    label_of[""] = -1  # the samples layout: no class
    spilled = sorter.spilled  # before sorted(), which may spill the last run
    entries = ((label_of[c], rel, size, v) for c, rel, size, v in sorter.sorted())
    grouped = _Grouped(group_samples(entries, layout, skipped))
    items: Items
    if spilled:
        items, fingerprint = _spilled_folder_items(grouped, classes, spill)
    else:
        found = list(grouped)
        fingerprint = _fingerprint(classes, _files(found))
        items = _folder_items(found, classes)
    if not len(items):
        what = "files" if layout == "samples" else "images found in the class folders"
        nothing_found(f"no {what}", sorted(skipped), root)
    return Listing(
        kind="image_folder",
        path=root,
        source=source,
        items=items,
        classes=classes,
        skipped=sorted(skipped),
        fingerprint=fingerprint,
        sizes_known=not grouped.samples,
    )


class _Grouped:
    """The items of a folder as they go by, noting whether one is a sample of several
    files (their output size is then known only once packed)."""

    def __init__(self, entries: Iterator[tuple[int, Any, int, Any]]) -> None:
        self._entries = entries
        self.samples = False

    def __iter__(self) -> Iterator[tuple[int, Any, int, Any]]:
        for entry in self._entries:
            if isinstance(entry[1], tuple):
                self.samples = True
            yield entry


def _files(
    entries: Iterable[tuple[int, Any, int, Any]],
) -> Iterator[tuple[str, int, Any]]:
    """(path, size, version) of each file of ``entries`` (a sample's files one by one)."""
    for _, ref, size, version in entries:
        if isinstance(ref, tuple):
            for (rel, _, each), v in zip(ref, version, strict=True):
                yield rel, each, v
        else:
            yield ref, size, version


def nothing_found(message: str, skipped: list[tuple[str, str]], url: str) -> NoReturn:
    """Raise for a listing with nothing to pack: with the reasons when files were skipped
    (:class:`EmptyBuildError`), else a plain :class:`BuildError`."""
    if skipped:
        what = f"{message}: all {len(skipped)} files found were skipped; nothing was written"
        raise EmptyBuildError(what, skipped=skipped, url=url)
    raise BuildError(message, url=url)


def not_an_image(name: str, *, url: bool = False) -> str:
    """The reason to skip a file of an image folder or list by its name, or ''.

    A URL's name (its path without the query and fragment) needs no image extension:
    the kind of a download whose name names none comes from its bytes."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    if ext in FOLDER_EXTENSIONS or url:
        return ""
    return f"not an image file (extension {ext or 'none'!r})"


def image_extension(name: str) -> str:
    """The field extension of an image file by its name (``JPEG`` -> ``jpg``); '' when
    the name has no image extension (the kind then comes from the bytes)."""
    ext = name.rpartition(".")[2].lower() if "." in name else ""
    return normalize_image_extension(ext) if ext in FOLDER_EXTENSIONS else ""


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
    skipped: list[tuple[str, str]] = []
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
    fs: Any, base: str, sorter: Sorter, skipped: list[tuple[str, str]], flat: bool = False
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
) -> tuple[SpilledItems, str]:
    """Sorted ``entries`` (label, path or files, size, version) written to a spill file as
    they are fingerprinted; their items are made as they are read (keys as
    :func:`make_keys`)."""
    records = spill.new_file()

    def recorded() -> Iterator[tuple[int, Any, int, Any]]:
        for label, ref, size, version in entries:
            records.append((label, ref, size))
            yield label, ref, size, version

    fingerprint = _fingerprint(classes, _files(recorded()))
    keys = spilled_keys(lambda: (_key_path(ref) for _, ref, _ in records), len(records), spill)
    make = _item_maker()

    def decode(record: tuple[int, Any, int]) -> Item:
        path = _key_path(record[1])
        return make(record, keys.get(path) or path_key(path))

    return SpilledItems(records, decode), fingerprint


def _folder_items(found: list[tuple[int, Any, int, Any]], classes: list[str]) -> list[Item]:
    """Turn ``found`` (label, path or files, size, version) into Items in place: the
    listing's peak memory is one list of entries, not two."""
    keys = make_keys([_key_path(ref) for _, ref, _, _ in found])
    make = _item_maker()
    items: list[Any] = found
    for i, key in enumerate(keys):
        items[i] = make(found[i], key)
    return items


def _key_path(ref: Any) -> str:
    """The path a folder item's key comes from: a sample of several files has its path
    without extensions (``a/0001``)."""
    if isinstance(ref, tuple):
        head, _, name = str(ref[0][0]).rpartition("/")
        stem = name.partition(".")[0]
        return f"{head}/{stem}" if head else stem
    return str(ref)


def _item_maker() -> Callable[[tuple[Any, ...], str], Item]:
    normal = {ext: normalize_image_extension(ext) for ext in FOLDER_EXTENSIONS}

    def make(entry: tuple[Any, ...], key: str) -> Item:
        label, ref, size = entry[:3]
        if isinstance(ref, tuple):  # a sample of several files
            return Item(ref, key, label, "", size, "")
        return Item(ref, key, label, normal[ref.rpartition(".")[2].lower()], size, "")

    return make


def _fingerprint(classes: list[str], entries: Iterator[tuple[str, int, Any]]) -> str:
    digest = hashlib.sha256(json.dumps(classes).encode())
    for rel, size, mtime in entries:
        digest.update(f"{rel}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()
