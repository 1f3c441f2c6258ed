"""Stand-in: the one name ``streaming`` imports from here (see ../../README.md)."""

from __future__ import annotations

from typing import Any


def to_tensor(picture: Any) -> Any:
    raise NotImplementedError("the benchmark's torchvision stand-in does not convert images")


__all__ = ["to_tensor"]
