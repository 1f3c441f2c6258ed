from __future__ import annotations

import io
import os
import types
from collections.abc import Iterator

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class NonSeekable(io.RawIOBase):
    """A stream that only reads, in short chunks, like a pipe or an HTTP body."""

    def __init__(self, data: bytes, chunk: int = 3000) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._chunk, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


@pytest.fixture
def nonseekable() -> type[NonSeekable]:
    return NonSeekable


@pytest.fixture
def image_folder(tmp_path: os.PathLike[str]) -> Iterator[str]:
    from shardkit.demo import make_image_folder

    folder = os.path.join(str(tmp_path), "images")
    make_image_folder(folder, count=30)
    yield folder


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]) -> types.ModuleType:
    """``datasets`` with no network and its caches under ``tmp_path``."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", os.path.join(tmp_path, "hf"))
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    return datasets
