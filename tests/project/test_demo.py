from __future__ import annotations

import os

import pytest

from shardkit.cli import main


def test_demo_builds_verifies_and_reads_back(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = os.path.join(str(tmp_path), "demo")
    assert main(["demo", out, "--images", "60"]) == 0
    text = capsys.readouterr().out
    assert "build: 60 samples" in text
    assert text.count("  skipped ") == 3  # the three broken files, each with its reason
    assert "verify: 60 samples, 0 problems" in text
    assert "read: 60 decoded samples (HxWx3 uint8)" in text
    assert os.path.exists(os.path.join(out, "shards", "manifest.json"))
