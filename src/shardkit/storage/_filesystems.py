"""fsspec, imported only when a remote URL is opened."""

from __future__ import annotations

import os
from typing import Any

from .._optional import missing
from ..errors import StorageError
from ._urls import is_local, local_path

__all__ = ["filesystem", "url_exists"]


def _fs(url: str, storage_options: dict[str, Any] | None) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - fsspec is a required dependency
        raise StorageError("fsspec is required for remote URLs", url=url) from exc
    try:
        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as exc:
        scheme = url.partition("://")[0].lower()
        if scheme in _SCHEME_MODULES:
            raise missing(_SCHEME_MODULES[scheme], f"{scheme}:// URLs") from exc
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    except ValueError as exc:
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    return fs, path


# The fsspec implementations shardkit's extras install (see shardkit._optional.EXTRAS).
_SCHEME_MODULES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "http": "aiohttp",
    "https": "aiohttp",
}


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of a remote URL and the path inside it."""
    return _fs(url, storage_options)


def url_exists(url: str, storage_options: dict[str, Any] | None = None) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = _fs(url, storage_options)
    return bool(fs.exists(path))
