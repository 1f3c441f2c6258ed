"""Reading a source's input files: a local file (:func:`read_file`, never blocking, its
access time left alone), a URL, a folder's sample of several files; :class:`FileSource`,
the source of folders and lists, and the ``json`` field of a folder's sample."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from .. import config, storage
from ..budget import allow, limit
from ..errors import DataError, StorageError
from ._sources import Item, SampleFileError, SampleFiles
from ._store import endpoint_options

__all__ = ["FileSource", "check_listed_size", "folder_json", "read_file", "sample_path"]


def read_file(path: str, size: int) -> bytes:
    """The bytes of a local file that was listed with ``size`` bytes, through the reading
    door (:func:`shardkit.storage.read_regular`: one read call, never blocking, its access
    time left alone); anything but a regular file of that size is a :class:`DataError`."""
    try:
        data = storage.read_regular(path, size)
    except StorageError as exc:
        raise DataError(exc.message, url=path) from exc
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", url=path) from exc
    if len(data) != size:
        raise DataError(f"file changed during the build ({size} -> {len(data)} bytes)", url=path)
    return data


def _read_url(url: str, size: int, options: dict[str, Any]) -> bytes:
    from .. import storage

    # the file becomes a tar member: over the member limit, it is refused from its listed
    # size, or (size unknown) once one byte past the limit is read, never read whole
    what = "a file to pack"
    bound = allow("member", size, what=what, url=url) if size else limit("member")
    try:
        with storage.open_read(url, access=storage.Access(options)) as stream:
            data = _read_upto(stream, bound + 1)
    except OSError as exc:
        raise DataError(f"cannot read: {exc}", url=url) from exc
    allow("member", len(data), what=what, url=url)
    check_listed_size(data, size, url)
    return data


def _read_upto(stream: Any, n: int) -> bytes:
    """At most ``n`` bytes of ``stream``, in reads of at most 16 MiB: ``read(n)`` would
    reserve ``n`` bytes up front, whatever the stream holds."""
    parts: list[bytes] = []
    while n > 0 and (chunk := stream.read(min(n, 1 << 24))):
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def check_listed_size(data: bytes, size: int, url: str) -> None:
    """Raise a :class:`DataError` when a URL listed with ``size`` bytes (0: unknown) has
    another size now."""
    if size and len(data) != size:
        raise DataError(f"file changed during the build ({size} -> {len(data)} bytes)", url=url)


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
        if storage.url_scheme(self.root) and not storage.url_scheme(ref):
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
        if storage.url_scheme(ref):
            return _read_url(ref, size, endpoint_options(ref, self.s3_endpoint))
        return read_file(os.path.join(self.root, ref), size)

    def describe(self, item: Item) -> str:
        """The item's path; a sample of several files: its path without extensions."""
        return sample_path(item.ref)

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


def sample_path(ref: Any) -> str:
    """The path a folder item's key comes from: a sample of several files has its path
    without extensions (``a/0001``)."""
    if isinstance(ref, tuple):
        head, _, name = str(ref[0][0]).rpartition("/")
        stem = name.partition(".")[0]
        return f"{head}/{stem}" if head else stem
    return str(ref)
