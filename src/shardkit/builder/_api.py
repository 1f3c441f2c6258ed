"""``shardkit.build(source, out, ...)``: the entry point of the build package."""

from __future__ import annotations

import os
from typing import Any

from .. import storage
from ..errors import BuildError, ConfigError, StorageError
from ..formats.names import is_megatron, is_shard_name
from ..pipeline import find_shards, is_manifest
from ._folders import list_image_folder
from ._kinds import is_table
from ._results import BuildResult, ProgressFn
from ._run import run_build
from ._sources import Listing
from ._spill import Spill
from ._store import LocalStore, ObjectStore, Store
from .options import BuildOptions

__all__ = ["list_source", "run"]


def run(
    source: Any, out_path: str, options: BuildOptions, to_sample: Any, progress: ProgressFn | None
) -> BuildResult:
    """:func:`shardkit.build` once its arguments are checked (this is its implementation)."""
    if options.tokenizer is not None or is_megatron(source):
        from ._tokens import build_tokens

        return build_tokens(source, _output_store(out_path, options), options, progress)
    if options.transforms:
        from ._transform import check_available

        check_available()
    if options.engine != "local":  # before anything is listed or written
        from ..engines import check_reachable

        check_reachable(options.engine, options.address)
    with Spill() as spill:  # a large listing is sorted and ordered here, then removed
        listing = list_source(source, out_path, options, to_sample, spill=spill)
        if options.transforms and listing.kind not in ("image_folder", "table"):
            raise ConfigError(
                "resize, max_side and encode apply to image files (a folder, a CSV/JSONL/"
                f"parquet list or a Hugging Face dataset); a {listing.kind} source packs its "
                "samples as they are: transform them in to_sample, or with shardkit proc / "
                "map_shards"
            )
        return run_build(_output_store(out_path, options), options, listing, progress, spill)


def _output_store(out_path: str, options: BuildOptions) -> Store:
    """Where a build writes: an object-store prefix (s3://, gs://: workers write straight
    into it, :mod:`.store`) or a local folder (made here; ``file://`` names one too)."""
    if _is_remote(out_path):
        return ObjectStore(out_path, hash=options.hash)
    folder = storage.local_path(out_path)
    _make_folder(folder)
    return LocalStore(folder, hash=options.hash)


_LAYOUT_FOLDER = "layout='samples' applies to a folder"


def _is_remote(out: str) -> bool:
    return storage.url_scheme(out) not in ("", "file")


def list_source(
    source: Any,
    out: str,
    options: BuildOptions,
    to_sample: Any = None,
    *,
    spill: Spill | None = None,
) -> Listing:
    """List any supported source (checks that ``out`` is not inside a source folder).

    With a ``spill``, a large listing stays on disk there (:mod:`.spill`)."""
    if not isinstance(source, (str, os.PathLike)):
        from ._pysources import is_hf_dataset, list_hf, list_python

        if options.layout != "classes":
            raise ConfigError(_LAYOUT_FOLDER)
        if to_sample is None and is_hf_dataset(source):  # a list of its rows
            return list_hf(source, options, spill)
        return list_python(source, to_sample)
    path = os.fspath(source)
    if to_sample is not None:
        raise ConfigError("to_sample applies to Python datasets, not to a path source")
    if path.startswith("file:"):
        path = storage.local_path(path)
    remote = bool(storage.url_scheme(path))
    table = is_table(path)
    if options.root is not None and not table:
        raise ConfigError("root applies to a CSV/JSONL list only")
    if options.layout != "classes" and (table or not (remote or os.path.isdir(path))):
        raise ConfigError(_LAYOUT_FOLDER)
    if table:
        if not remote and not os.path.isfile(path):
            raise BuildError(_not_a_file(path), url=path)
        from ._tables import list_table

        return list_table(path, options, spill)
    if not remote and not os.path.isdir(path) and "{" not in path:
        if not os.path.exists(path):
            raise BuildError("no such file or folder", url=path)
        if not is_shard_name(os.path.basename(path)) and not is_manifest(path):
            raise BuildError(
                "not a source shardkit can build from: expected an image folder, "
                "a .csv/.jsonl/.parquet list or shards (.tar, .tfrecord)",
                url=path,
            )
    return _shards_or_images(path, out, options, spill)


def _shards_or_images(path: str, out: str, options: BuildOptions, spill: Spill | None) -> Listing:
    """Shards when the one resolver (:func:`shardkit.pipeline._urls.find_shards`) says
    ``path`` names some (a folder by its manifest or shard files, a manifest, a pattern,
    a shard); only a folder holding neither is an image folder."""
    remote = bool(storage.url_scheme(path))
    folder = remote and not ("{" in path or is_shard_name(path) or is_manifest(path))
    local_folder = not remote and os.path.isdir(path)
    if local_folder and not _is_remote(out):
        _check_not_inside(out, path)
    if folder and (out.rstrip("/") + "/").startswith(path.rstrip("/") + "/"):
        raise BuildError(
            f"the output {out!r} is inside the source folder: pick one outside it", url=path
        )
    try:
        part = find_shards(path.rstrip("/") + "/" if folder else path)
    except StorageError:
        if not (folder or local_folder):
            raise
        part = None  # unlisted: the image-folder listing reports it
    if part is None:
        if folder:  # an image folder under an object-store prefix
            from ._folders import list_remote_folder

            return list_remote_folder(path, spill, options.layout)
        return list_image_folder(path, spill, options.layout)
    if options.layout != "classes":
        raise ConfigError(_LAYOUT_FOLDER + f" of files; {path} holds shards")
    from ._shards import manifest_classes

    classes = () if part.contents is None else manifest_classes(part.contents.document)
    return _list_shards(list(part.urls), out, options, path, spill, classes)


def _list_shards(
    spec: list[str],
    out: str,
    options: BuildOptions,
    path: str,
    spill: Spill | None = None,
    classes: tuple[str, ...] = (),
) -> Listing:
    from ._shards import list_shards

    for url in spec:
        if storage.is_local(url):
            folder = os.path.dirname(os.path.abspath(storage.local_path(url)))
            if os.path.realpath(folder) == os.path.realpath(out):
                raise BuildError("the output folder holds the input shards", url=url)
    return list_shards(spec, options.format, path=path, spill=spill, classes=classes)


def _not_a_file(path: str) -> str:
    from ._walk import file_kind

    try:
        return f"not a regular file ({file_kind(os.stat(path).st_mode)})"
    except OSError as exc:
        return "no such file" if isinstance(exc, FileNotFoundError) else f"cannot read: {exc}"


def _check_not_inside(out: str, source: str) -> None:
    src = os.path.realpath(source)
    dst = os.path.realpath(out)
    if dst == src or dst.startswith(src.rstrip(os.sep) + os.sep):
        raise BuildError(
            f"the output folder {out!r} is inside the source folder: pick one outside it",
            url=source,
        )


def _make_folder(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise BuildError("the output exists and is not a folder", url=out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise BuildError(
            f"cannot create the output folder: {exc.strerror or exc}", url=out
        ) from exc
