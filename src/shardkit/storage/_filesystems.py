"""fsspec, imported only when a remote URL is opened."""

from __future__ import annotations

import os
from typing import Any

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
    except (ImportError, ValueError) as exc:
        raise StorageError(f"cannot open this URL scheme: {exc}", url=url) from exc
    return fs, path


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of a remote URL and the path inside it."""
    return _fs(url, storage_options)


def url_exists(url: str, storage_options: dict[str, Any] | None = None) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    fs, path = _fs(url, storage_options)
    return bool(fs.exists(path))
