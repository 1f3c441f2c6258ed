"""The manifest scales with what was built, not with what was skipped (issue 28, case 7).

A list whose rows are almost all skipped writes a manifest of a bounded size (the count
and the first items), every skipped item in ``skipped.jsonl`` beside it, and the driver's
memory stays flat in skipped rows (they are sorted through spill files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.build import make_corpus_jpeg

import shardkit
from shardkit.builder._skipped import IN_MANIFEST, SKIPPED_NAME
from shardkit.builder.options import BuildOptions
from shardkit.tools import verify


def _list(folder: Path, missing: int) -> str:
    """A list of one real image and ``missing`` rows naming files that do not exist."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "real.jpg").write_bytes(make_corpus_jpeg())
    path = folder / "list.csv"
    with open(path, "w") as f:
        f.write("path,label\nreal.jpg,0\n")
        f.writelines(f"gone/{i:07d}.jpg,0\n" for i in range(missing))
    return str(path)


def test_the_manifest_does_not_grow_with_skipped_rows(tmp_path: Path) -> None:
    sizes = {}
    for missing in (1_500, 15_000):
        out = tmp_path / f"out{missing}"
        result = shardkit.build(_list(tmp_path / f"src{missing}", missing), str(out))
        assert result.samples == 1 and result.skipped_count == missing
        assert len(result.skipped) == IN_MANIFEST  # the first ones, by path
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["skipped_count"] == missing
        assert manifest["skipped"] == [
            {"path": f"gone/{i:07d}.jpg", "reason": "cannot read: No such file or directory"}
            for i in range(IN_MANIFEST)
        ]
        lines = (out / SKIPPED_NAME).read_text().splitlines()
        assert [json.loads(line)["path"] for line in lines] == [
            f"gone/{i:07d}.jpg" for i in range(missing)
        ]
        sizes[missing] = (out / "manifest.json").stat().st_size
        # Dataset and verify read the result.
        assert [s["__key__"] for s in shardkit.Dataset(str(out))] == ["real"]
        assert verify(str(out)).ok
    assert abs(sizes[15_000] - sizes[1_500]) < 100  # was 10x: 0.9 MB against 0.09 MB


def test_a_few_skipped_items_are_all_in_the_manifest_and_the_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = shardkit.build(_list(tmp_path / "src", 3), str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["skipped_count"] == 3 == len(manifest["skipped"]) == result.skipped_count
    assert len((out / SKIPPED_NAME).read_text().splitlines()) == 3
    # Nothing skipped: no file; an overwrite removes the old one.
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "real.jpg").write_bytes(make_corpus_jpeg())
    (clean / "list.csv").write_text("path,label\nreal.jpg,0\n")
    shardkit.build(str(clean / "list.csv"), str(out), options=BuildOptions(overwrite=True))
    assert not (out / SKIPPED_NAME).exists()
    assert json.loads((out / "manifest.json").read_text())["skipped_count"] == 0


_PEAK = """
import resource, sys
import shardkit
from shardkit.builder.options import BuildOptions
result = shardkit.build(sys.argv[1], sys.argv[2], options=BuildOptions(workers=1))
assert result.samples == 1, result
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
def test_the_drivers_memory_is_flat_in_skipped_rows(tmp_path: Path) -> None:
    peaks = {}
    for missing in (10_000, 160_000):
        src = _list(tmp_path / f"src{missing}", missing)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, src, str(tmp_path / f"out{missing}")],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        peaks[missing] = int(done.stdout.split()[-1]) / 1024  # MiB
    # Was: every skipped row held and written into manifest.json. What grows here is the
    # list's rows, held up to the spill budget (262,144 rows) as packed rows are.
    assert peaks[160_000] - peaks[10_000] < 80, peaks  # the base: +200 MB
