"""``shardkit view`` in a real browser: Debian's headless Chromium (``make system-deps``
installs it; no browser is downloaded). It loads the grid, opens a sample page, runs
nothing from a hostile sample, and draws the thumbnails (a screenshot is not blank).

``SHARDKIT_VIEW_SCREENSHOTS=docs`` also saves the screenshots there (docs/view.md shows
them), reduced to a small palette.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.view import evil_dataset, image_dataset

from shardkit.tools.view import Viewer

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(profile: Path, *args: str) -> str:
    assert BROWSER, "Chromium is not installed: `make system-deps` (apt-get install chromium)"
    done = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    """The demo pictures, served from a relative path (the screenshots show no
    machine's folders)."""
    root = tmp_path_factory.mktemp("browser")
    image_dataset(root)
    before = os.getcwd()
    os.chdir(root)
    try:
        with Viewer("data", port=0, page_size=24).start() as served:
            yield served
    finally:
        os.chdir(before)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    root = tmp_path_factory.mktemp("hostile")
    with Viewer(evil_dataset(root), port=0).start() as served:
        yield served


def _dom(viewer: Viewer, path: str, profile: Path) -> str:
    return _chromium(profile, "--dump-dom", viewer.url.rstrip("/") + path)


def _assert_nothing_ran(dom: str) -> None:
    assert re.search(r"<title>shardkit view</title>", dom), dom[:500]
    assert "pwned" not in dom.split("</title>")[0]  # document.title unchanged
    assert "<pwned" not in dom and "<script" not in dom


def test_grid_loads_with_thumbnails_and_class_names(viewer: Viewer, tmp_path: Path) -> None:
    grid = _dom(viewer, "/", tmp_path)
    assert len(re.findall(r'<a class="tile" href="/sample/\d+">', grid)) == 24
    assert len(re.findall(r'<img src="/thumb/\d+"', grid)) == 24
    assert len(re.findall(r"<b>(circle|square|stripes)</b>", grid)) == 24
    last = _dom(viewer, "/?page=3", tmp_path)
    assert "samples 49-60 of 60" in last and last.count("<img") == 12


def test_hostile_sample_runs_nothing_in_the_grid(hostile: Viewer, tmp_path: Path) -> None:
    grid = _dom(hostile, "/", tmp_path)
    assert "evil&lt;img src=x onerror=" in grid
    _assert_nothing_ran(grid)
    assert grid.count("<img") == 4  # three pictures and the hostile sample's thumbnail


def test_sample_page_shows_every_field_and_runs_nothing(hostile: Viewer, tmp_path: Path) -> None:
    page = _dom(hostile, "/sample/3", tmp_path)
    _assert_nothing_ran(page)
    for name in ("cls", "html", "jpg", "json", "svg", "txt"):
        assert f"<td>{name} <a" in page
    assert "&lt;script&gt;document.title='pwned-script'&lt;/script&gt;" in page
    assert page.count("<img") == 1  # the jpg field; the caption's <img> is text
    assert "byte offset" in page and "shard-000000.tar" in page


def _colourful(png: Path) -> float:
    """The share of pixels that are neither page background nor text: saturated colour."""
    import numpy as np
    from PIL import Image

    with Image.open(png) as img:
        pixels = np.asarray(img.convert("RGB")).astype(int)
    spread = pixels.max(axis=2) - pixels.min(axis=2)
    return float((spread > 60).mean())


def _keep(png: Path, name: str) -> None:
    folder = os.environ.get("SHARDKIT_VIEW_SCREENSHOTS")
    if not folder:
        return
    from PIL import Image

    with Image.open(png) as img:
        small = img.convert("RGB").quantize(colors=64)
        small.save(Path(folder) / name, optimize=True)


def test_screenshots_show_the_thumbnails(viewer: Viewer, tmp_path: Path) -> None:
    grid, sample = tmp_path / "grid.png", tmp_path / "sample.png"
    _chromium(tmp_path / "p", f"--screenshot={grid}", "--window-size=1000,700", viewer.url)
    assert _colourful(grid) > 0.15  # the demo's pictures are drawn, not blank tiles
    _chromium(
        tmp_path / "p", f"--screenshot={sample}", "--window-size=1000,700", viewer.url + "sample/1"
    )
    assert _colourful(sample) > 0.01  # the full-size picture
    _keep(grid, "view-grid.png")
    _keep(sample, "view-sample.png")
