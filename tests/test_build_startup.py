"""`shardkit build` of a plain image folder stays lean: its start-up is part of every
whole-process figure against GNU tar (issue 27), so what it imports is checked here, in
a fresh interpreter, not left to a benchmark to notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.cli import COMMANDS
from tests.conftest_build import make_corpus_jpeg

# Optional libraries a plain image-folder build never needs, in the driver or a worker.
HEAVY = ("numpy", "PIL", "fsspec", "pyarrow", "torch", "tqdm", "aiohttp", "asyncio", "cv2")

_PROBE = """
import json, sys
from shardkit.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _loaded(src: Path, out: Path, *args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", _PROBE, "build", str(src), str(out), "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0
    assert (out / "manifest.json").exists()
    return set(report["modules"])


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    for i in range(6):
        folder = tmp_path / "src" / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i}.jpg").write_bytes(make_corpus_jpeg(i))
    return tmp_path / "src"


def test_an_image_folder_build_imports_no_optional_library_nor_other_commands(
    image_folder: Path, tmp_path: Path
) -> None:
    # One worker: the workers' code runs in this process too, so it is checked as well.
    modules = _loaded(image_folder, tmp_path / "out", "--workers", "1")
    assert "shardkit.builder.worker" in modules  # the probe saw the build's own machinery
    heavy = sorted(m for m in modules if m.partition(".")[0] in HEAVY)
    assert heavy == []
    others = {f"shardkit.cli.{m}" for name, m in COMMANDS.items() if name != "build"}
    assert sorted(others & modules) == []
    assert "shardkit.engines._connect" not in modules  # a cluster's door: no local use


def test_a_pooled_image_folder_build_imports_no_optional_library(
    image_folder: Path, tmp_path: Path
) -> None:
    modules = _loaded(image_folder, tmp_path / "out", "--workers", "2")
    assert "concurrent.futures.process" in modules  # it did start a pool
    assert sorted(m for m in modules if m.partition(".")[0] in HEAVY) == []
