"""What a build skipped is bounded however much it skips: an EmptyBuildError keeps the
first ``KEPT`` entries (each text cut) and reads no further, and the folder walk's
skipped list goes to the build's spill past its budget instead of a list in memory."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import EmptyBuildError


def test_an_empty_build_error_keeps_the_first_entries_and_reads_no_further() -> None:
    read = 0

    def skipped() -> Iterator[tuple[str, str]]:
        nonlocal read
        for n in range(100_000):  # the error read them all (and kept them)
            read += 1
            yield f"{n:09d}.txt" + "x" * (20_000 if n == 0 else 0), "not an image"

    error = EmptyBuildError("nothing packed", skipped=skipped(), url="out")
    assert len(error.skipped) == EmptyBuildError.KEPT == 1000
    assert read <= EmptyBuildError.KEPT + 1
    assert error.skipped[1] == ("000000001.txt", "not an image")
    assert len(error.skipped[0][0]) <= 4096 and error.skipped[0][0].startswith("000000000")
    again = EmptyBuildError("x", skipped=[("a", "b")])  # a list, as before
    assert again.skipped == [("a", "b")]


def test_a_folder_of_skipped_files_is_listed_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 stray files (200 folders of 100) beside one image: the walk's skipped list
    was held whole (every path and reason: 13.3 MB traced at the peak); now it is sorted runs on
    disk past the skipped log's budget (500 here: the default is 32,768)."""
    from shardkit.builder import _skipped

    monkeypatch.setattr(_skipped, "_BUDGET", 500)
    shardkit.demo.make_image_folder(str(tmp_path / "src"), count=1)
    stray = tmp_path / "src" / os.listdir(tmp_path / "src")[0]
    name = "n" * 150
    for folder in range(200):
        os.mkdir(stray / f"f{folder:03d}")
        for n in range(100):
            (stray / f"f{folder:03d}" / f"{name}{n:06d}.unknownext").touch()
    tracemalloc.start()
    try:
        result = shardkit.build(
            str(tmp_path / "src"), str(tmp_path / "out"), options=shardkit.BuildOptions(workers=1)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.samples == 1 and result.skipped_count == 20_000
    assert len(result.skipped) == 1000 and result.skipped[0][0].endswith("000000.unknownext")
    assert peak < 9 << 20, f"{peak:,} bytes at the peak"  # 13.3 MB before; 5.8 MB now
