"""Stand-in: the one name ``streaming`` imports from here (see ../../README.md)."""

from __future__ import annotations


class VisionDataset:
    """Never used by the benchmark; only its name is imported."""


__all__ = ["VisionDataset"]
