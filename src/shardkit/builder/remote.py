"""Building into object storage (``s3://``, ``gs://``, any fsspec URL that is not local).

Object stores have no rename and no append, so a remote build runs the ordinary local
build in a staging folder and uploads each final shard as soon as the driver commits it:

::

    local build (any engine) -> shard i committed in staging -> upload OUT/shard-i (atomic)
                             -> ... -> every upload done -> OUT/manifest.json last

An upload goes straight to the final name and is atomic (a failed or interrupted upload
is discarded; an object under a final name is always complete). Before the first upload
the driver writes ``OUT/.shardkit-build.json`` (the build's identity: output options and
input fingerprint); it is removed after the manifest. Resume against the store is derived
from the committed objects: with a matching identity object, a shard object whose size
matches is kept (shards are deterministic, so same identity + same name + same size is
the same bytes); the rest is uploaded again. ``shardkit verify`` re-reads every sha256.

The staging folder is ``$SHARDKIT_CACHE_DIR`` (or the temp folder) ``/shardkit-staging/<hash
of OUT and identity>``; it holds a full copy of the output until the manifest is uploaded
and is removed afterwards. Credentials and endpoints come from fsspec's usual places
(``AWS_*`` variables, ``~/.aws``, ``GOOGLE_APPLICATION_CREDENTIALS``, fsspec config); they
are never logged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from .. import config, storage
from ..errors import BuildError, StorageError
from .manifest import MANIFEST_NAME
from .options import BuildOptions
from .results import BuildProgress, BuildResult, ProgressFn, ShardRecord
from .run import run_build

__all__ = ["IDENTITY_NAME", "build_remote"]

logger = logging.getLogger(__name__)

IDENTITY_NAME = ".shardkit-build.json"
_UPLOADS = 8  # concurrent uploads
_CHUNK = 8 << 20


class _Remote:
    """The output prefix in the object store."""

    def __init__(self, url: str) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def sizes(self) -> dict[str, int]:
        """Name -> size of every object directly under OUT (one listing)."""
        try:
            entries = self.fs.ls(self.root, detail=True, refresh=True)
        except FileNotFoundError:
            return {}
        return {storage.basename(e["name"]): int(e.get("size") or 0) for e in entries}

    def read_json(self, name: str) -> dict[str, Any] | None:
        try:
            with self.fs.open(self.path(name), "rb") as f:
                data = json.loads(f.read())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write(self, name: str, data: bytes) -> None:
        with storage.atomic_write(storage.join(self.url, name)) as stream:
            stream.write(data)

    def upload(self, local: str, name: str) -> None:
        with open(local, "rb") as source, storage.atomic_write(storage.join(self.url, name)) as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)

    def remove(self, names: list[str]) -> None:
        paths = [self.path(n) for n in names]
        if paths:
            self.fs.rm(paths)


def build_remote(
    source: Any, out: str, options: BuildOptions, to_sample: Any, progress: ProgressFn | None
) -> BuildResult:
    """Build ``source`` into the object-store prefix ``out`` (see the module docstring)."""
    from .api import _make_folder, list_source

    remote = _Remote(out)
    listing = list_source(source, out, options, to_sample)
    identity = {
        "shardkit_remote_build": 1,
        "options": options.output_options(),
        "source": {"kind": listing.kind, "fingerprint": listing.fingerprint},
    }
    sizes = _check_remote(remote, options, identity)
    done = _already_built(remote, identity, sizes)
    if done is not None:
        return done
    if options.overwrite:
        sizes = {}
    remote.write(IDENTITY_NAME, json.dumps(identity, sort_keys=True).encode())
    staging = _staging(remote.url, identity)
    _make_folder(staging)
    uploader = _Uploader(remote, staging, options, sizes)

    def report(snapshot: BuildProgress) -> None:
        uploader.upto(snapshot.shards)
        if progress is not None:
            progress(snapshot)

    try:
        result = run_build(staging, replace(options, overwrite=False), listing, report)
        uploader.upto(len(result.shards))
        uploader.wait()
    finally:
        uploader.close()
    with open(os.path.join(staging, MANIFEST_NAME), "rb") as f:
        remote.write(MANIFEST_NAME, f.read())  # last: the dataset is now complete
    remote.remove([IDENTITY_NAME])
    shutil.rmtree(staging, ignore_errors=True)
    return replace(result, out=remote.url, manifest=storage.join(remote.url, MANIFEST_NAME))


def _check_remote(
    remote: _Remote, options: BuildOptions, identity: dict[str, Any]
) -> dict[str, int]:
    """Existing objects' sizes; clears them with ``overwrite``; refuses another build's."""
    sizes = remote.sizes()
    final = _final_pattern(options)
    if options.overwrite:
        old = remote.read_json(MANIFEST_NAME) or {}
        if MANIFEST_NAME in sizes:
            remote.remove([MANIFEST_NAME])  # first: readers stop trusting the shards
        named = {str(s.get("name")) for s in old.get("shards", []) if isinstance(s, dict)}
        ours = [n for n in sizes if n in named or final(n) or n == IDENTITY_NAME]
        remote.remove(sorted(set(ours) - {MANIFEST_NAME}))
        return {}
    if MANIFEST_NAME in sizes:
        return sizes
    started = remote.read_json(IDENTITY_NAME) if IDENTITY_NAME in sizes else None
    if started is not None and started != identity:
        raise BuildError(
            "the output holds an interrupted build with different options or inputs; rerun "
            "with the same ones to resume, or use --overwrite",
            url=remote.url,
        )
    if started is None and any(final(n) for n in sizes):
        raise BuildError(
            f"the output already holds {options.prefix}-*.{options.extension} shards of "
            "another build; use --overwrite to replace them",
            url=remote.url,
        )
    return sizes


def _already_built(
    remote: _Remote, identity: dict[str, Any], sizes: dict[str, int]
) -> BuildResult | None:
    if MANIFEST_NAME not in sizes:
        return None
    manifest = remote.read_json(MANIFEST_NAME) or {}
    source = manifest.get("source", {})
    same = manifest.get("options") == identity["options"] and all(
        source.get(k) == v for k, v in identity["source"].items()
    )
    if not same:
        raise BuildError(
            "the output holds a different dataset (manifest.json); use --overwrite to replace it",
            url=remote.url,
        )
    shards = [ShardRecord(**s) for s in manifest["shards"]]
    for shard in shards:
        if sizes.get(shard.name) != shard.bytes:
            raise BuildError(
                f"shard {shard.name} does not match the manifest (changed or missing); use "
                "--overwrite to build again",
                url=remote.url,
            )
    skipped = [(s["path"], s["reason"]) for s in manifest.get("skipped", [])]
    return BuildResult(
        out=remote.url,
        manifest=storage.join(remote.url, MANIFEST_NAME),
        shards=shards,
        samples=sum(s.samples for s in shards),
        skipped=skipped,
        resumed_tasks=-1,
        seconds=0.0,
    )


def _final_pattern(options: BuildOptions) -> Any:
    import re

    pattern = re.compile(rf"{re.escape(options.prefix)}-\d{{6}}\.{re.escape(options.extension)}")
    return pattern.fullmatch


def _staging(url: str, identity: dict[str, Any]) -> str:
    key = hashlib.sha256(json.dumps([url, identity], sort_keys=True).encode()).hexdigest()
    base = config.cache_dir() or tempfile.gettempdir()
    return os.path.join(base, "shardkit-staging", key[:24])


class _Uploader:
    """Uploads committed shards in the background, skipping complete ones already there."""

    def __init__(
        self, remote: _Remote, staging: str, options: BuildOptions, sizes: dict[str, int]
    ) -> None:
        self.remote = remote
        self.staging = staging
        self.options = options
        self.sizes = sizes
        self.next = 0
        self.pool = ThreadPoolExecutor(_UPLOADS, thread_name_prefix="shardkit-upload")
        self.futures: list[Future[None]] = []

    def upto(self, shards: int) -> None:
        """Start uploading shards ``next .. shards-1`` (committed in staging by now)."""
        for index in range(self.next, shards):
            name = f"{self.options.prefix}-{index:06d}.{self.options.extension}"
            self.futures.append(self.pool.submit(self._one, name))
        self.next = max(self.next, shards)

    def _one(self, name: str) -> None:
        local = os.path.join(self.staging, name)
        if self.sizes.get(name) == os.path.getsize(local):
            logger.info("%s: already uploaded", name)
            return
        self.remote.upload(local, name)

    def wait(self) -> None:
        for future in self.futures:
            try:
                future.result()
            except OSError as exc:
                if isinstance(exc, StorageError):
                    raise
                raise StorageError(f"upload failed: {exc}", url=self.remote.url) from exc

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
