"""Hostile and careless sources for ``build``: symbolic links, FIFOs, unreadable files.

The walk of an image folder stays inside SRC and packs no folder twice; special files are
skipped with their kind and never opened for a blocking read; what cannot be read is
skipped with the reason (docs/build.md, "Links, special files and unreadable files").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.build import make_corpus_jpeg, read_samples, run_cli, write

import shardkit
from shardkit import BuildOptions

NOBODY = 65534


def _manifest(out: str) -> dict[str, object]:
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)  # type: ignore[no-any-return]


def _skipped(out: str) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in _manifest(out)["skipped"]}  # type: ignore[attr-defined]


@pytest.fixture
def src(tmp_path: Path) -> str:
    """cat/a.jpg, cat/b.jpg, dog/c.jpg."""
    root = str(tmp_path / "src")
    for i, rel in enumerate(["cat/a.jpg", "cat/b.jpg", "dog/c.jpg"]):
        write(root, rel, make_corpus_jpeg(i))
    return root


def _keys_and_labels(out: str) -> dict[str, int]:
    return {s["__key__"]: int(s["cls"]) for s in read_samples(out)}


def test_a_link_back_to_an_enclosing_folder_is_a_loop_and_skipped(src: str, tmp_path: Path) -> None:
    os.symlink("..", os.path.join(src, "cat", "up"))  # SRC itself: dog would be packed as cat
    os.symlink(".", os.path.join(src, "dog", "here"))
    os.makedirs(os.path.join(src, "dog", "deep", "er"))
    os.symlink("../..", os.path.join(src, "dog", "deep", "er", "back"))
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    assert _keys_and_labels(out) == {"cat/a": 0, "cat/b": 0, "dog/c": 1}
    skipped = _skipped(out)
    for link in ("cat/up", "dog/here", "dog/deep/er/back"):
        assert skipped[link].startswith("symbolic link loop"), skipped


def test_a_link_to_another_class_is_not_packed_again_under_the_wrong_label(
    src: str, tmp_path: Path
) -> None:
    os.symlink("../dog", os.path.join(src, "cat", "dogs"))
    os.symlink("cat", os.path.join(src, "kitty"))  # a class that is another class's folder
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    assert _keys_and_labels(out) == {"cat/a": 0, "cat/b": 0, "dog/c": 1}
    assert _manifest(out)["class_to_idx"] == {"cat": 0, "dog": 1}
    skipped = _skipped(out)
    assert skipped["cat/dogs"] == "symbolic link to a folder that is packed already: dog"
    assert skipped["kitty"] == "symbolic link to a folder that is packed already: cat"


def test_links_that_leave_the_source_are_skipped(src: str, tmp_path: Path) -> None:
    outside = str(tmp_path / "outside")
    write(outside, "photos/x.jpg", make_corpus_jpeg(7))
    write(outside, "secret.jpg", make_corpus_jpeg(8))
    os.symlink(os.path.join(outside, "photos"), os.path.join(src, "cat", "more"))
    os.symlink("../../outside/secret.jpg", os.path.join(src, "cat", "s.jpg"))
    os.symlink(os.path.join(outside, "photos"), os.path.join(src, "bird"))
    os.symlink("/nonexistent/nothing.jpg", os.path.join(src, "dog", "gone.jpg"))
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    assert _keys_and_labels(out) == {"cat/a": 0, "cat/b": 0, "dog/c": 1}
    skipped = _skipped(out)
    for link in ("cat/more", "cat/s.jpg", "bird"):
        assert skipped[link] == "symbolic link leads outside the source folder", skipped
    assert skipped["dog/gone.jpg"].startswith("broken symbolic link")


def test_links_inside_the_source_are_followed_once(src: str, tmp_path: Path) -> None:
    write(src, ".pool/extra/e.jpg", make_corpus_jpeg(5))
    write(src, ".pool/birds/f.jpg", make_corpus_jpeg(6))
    os.symlink("../dog/c.jpg", os.path.join(src, "cat", "alias.jpg"))  # a file: packed as cat
    os.symlink("../.pool/extra", os.path.join(src, "cat", "more"))
    os.symlink("../.pool/extra", os.path.join(src, "dog", "same"))  # that folder again
    os.symlink(".pool/birds", os.path.join(src, "bird"))  # a class folder elsewhere in SRC
    out = str(tmp_path / "out")
    shardkit.build(src, out, options=BuildOptions(workers=1))
    assert _manifest(out)["class_to_idx"] == {"bird": 0, "cat": 1, "dog": 2}
    assert _keys_and_labels(out) == {
        "bird/f": 0,
        "cat/a": 1,
        "cat/alias": 1,
        "cat/b": 1,
        "cat/more/e": 1,
        "dog/c": 2,
    }
    assert _skipped(out) == {
        "dog/same": "symbolic link to a folder that is packed already: .pool/extra"
    }


def _fifo_build_script(src: str, out: str, swap: str) -> str:
    """A build that turns ``swap`` into a FIFO after the listing, before any read."""
    return f"""
import os, shardkit
swapped = []
def progress(p):
    if not swapped:
        os.unlink({swap!r}); os.mkfifo({swap!r}); swapped.append(1)
r = shardkit.build({src!r}, {out!r}, options=shardkit.BuildOptions(workers=1), progress=progress)
print(r.samples, dict(r.skipped)[os.path.relpath({swap!r}, {src!r})])
"""


def test_an_image_swapped_for_a_fifo_after_listing_is_skipped_not_waited_on(
    src: str, tmp_path: Path
) -> None:
    out = str(tmp_path / "out")
    swap = os.path.join(src, "cat", "b.jpg")
    done = subprocess.run(
        [sys.executable, "-c", _fifo_build_script(src, out, swap)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1) == ["2", "not a regular file (a FIFO)\n"]


def test_a_fifo_swapped_in_between_stat_and_open_does_not_block(tmp_path: Path) -> None:
    """The narrowest race: ``stat`` still saw the image, ``open`` gets the FIFO."""
    fifo, image = str(tmp_path / "swapped.jpg"), str(tmp_path / "image.jpg")
    os.mkfifo(fifo)
    Path(image).write_bytes(b"x" * 10)
    script = f"""
import os
from shardkit.builder import _inputs as inputs
real_stat = os.stat
os.stat = lambda path, *a, **k: real_stat({image!r} if path == {fifo!r} else path, *a, **k)
try:
    inputs.read_file({fifo!r}, 10)
except inputs.DataError as exc:
    print(exc.message)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "not a regular file (a FIFO)\n", done.stderr


def test_fifos_in_a_folder_and_in_a_list_are_skipped(src: str, tmp_path: Path) -> None:
    os.mkfifo(os.path.join(src, "cat", "pipe.jpg"))
    os.mkfifo(os.path.join(src, "dog", "pipe.png"))
    out = str(tmp_path / "out")
    done = run_cli(src, out, "-q", "--workers", "1", timeout=60)
    assert done.returncode == 0, done.stderr
    skipped = _skipped(out)
    assert skipped["cat/pipe.jpg"] == skipped["dog/pipe.png"] == "not a regular file (a FIFO)"
    listing = tmp_path / "list.csv"
    listing.write_text("path,label\nsrc/cat/a.jpg,cat\nsrc/cat/pipe.jpg,cat\nsrc/dog/c.jpg,dog\n")
    out = str(tmp_path / "from-list")
    done = run_cli(str(listing), out, "-q", "--workers", "1", timeout=60)
    assert done.returncode == 0, done.stderr
    assert _skipped(out) == {"src/cat/pipe.jpg": "not a regular file (a FIFO)"}
    assert _manifest(out)["samples"] == 2


def test_a_fifo_as_the_list_is_one_line() -> None:
    folder = tempfile.mkdtemp()
    try:
        os.mkfifo(os.path.join(folder, "list.csv"))
        done = run_cli(os.path.join(folder, "list.csv"), os.path.join(folder, "out"), timeout=60)
        assert done.returncode == 2
        assert done.stderr.strip().endswith("list.csv: not a regular file (a FIFO)")
    finally:
        shutil.rmtree(folder)


# ----------------------------------------------------------------------- unreadable files


@pytest.fixture
def shared() -> Iterator[str]:
    """A folder every user may enter (pytest's own tmp folder is root's alone)."""
    folder = tempfile.mkdtemp(prefix="shardkit-perm-")
    os.chmod(folder, 0o755)
    yield folder
    for top, dirs, _ in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(top, name), 0o755)
    shutil.rmtree(folder)


def _build_unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """``shardkit build`` as an unprivileged user: root reads through ``chmod 000``."""
    command = [sys.executable, "-m", "shardkit", "build", *args]
    if os.geteuid() == 0:
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        command += [sys.executable, "-m", "shardkit", "build", *args]
    env = {**os.environ, "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def _output_for_nobody(shared: str) -> str:
    out = os.path.join(shared, "out")
    os.mkdir(out)
    if os.geteuid() == 0:
        os.chown(out, NOBODY, NOBODY)
    return out


def test_unreadable_folders_and_files_inside_the_source_are_skipped(shared: str) -> None:
    src = os.path.join(shared, "src")
    for i, rel in enumerate(["cat/a.jpg", "cat/locked/x.jpg", "dog/c.jpg", "dog/d.jpg"]):
        write(src, rel, make_corpus_jpeg(i))
    os.chmod(os.path.join(src, "cat", "locked"), 0)
    os.chmod(os.path.join(src, "dog", "d.jpg"), 0)
    out = _output_for_nobody(shared)
    done = _build_unprivileged(src, out, "-q", "--workers", "1")
    assert done.returncode == 0, done.stderr
    assert _skipped(out) == {
        "cat/locked": "cannot list the folder: Permission denied",
        "dog/d.jpg": "cannot read: Permission denied",
    }
    assert _manifest(out)["samples"] == 2


def test_an_unreadable_source_is_one_line_and_exit_2(shared: str) -> None:
    src = os.path.join(shared, "src")
    write(src, "cat/a.jpg", make_corpus_jpeg(0))
    os.chmod(src, 0)
    out = _output_for_nobody(shared)
    done = _build_unprivileged(src, out)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"Error: {src}: cannot list the folder: Permission denied"]
    assert os.listdir(out) == []


def test_a_very_deep_folder_is_walked_without_recursion() -> None:
    # Outside pytest's tmp_path: its clean-up (shutil.rmtree) recurses too; rm -rf does not.
    top = tempfile.mkdtemp(prefix="shardkit-deep-")
    here, depth = os.getcwd(), 1500
    try:
        src = os.path.join(top, "src")
        write(src, "cat/a.jpg", make_corpus_jpeg(0))
        os.chdir(os.path.join(src, "cat"))  # relative mkdirs: no path too long for one call
        for _ in range(depth):
            os.mkdir("d")
            os.chdir("d")
        with open("deep.jpg", "wb") as f:
            f.write(make_corpus_jpeg(9))
        os.chdir(here)
        out = os.path.join(top, "out")
        assert shardkit.build(src, out, options=BuildOptions(workers=1)).samples == 2
        assert set(_keys_and_labels(out)) == {"cat/a", "cat/" + "d/" * depth + "deep"}
    finally:
        os.chdir(here)
        subprocess.run(["rm", "-rf", top], check=True)


def test_a_bind_mount_of_the_source_inside_it_is_not_walked_again(src: str) -> None:
    """Not a link but the same folder twice (needs root, as CI runs; the disk tests mount too)."""
    loop = os.path.join(src, "cat", "loop")
    os.mkdir(loop)
    subprocess.run(["mount", "--bind", src, loop], check=True)
    try:
        out = os.path.join(os.path.dirname(src), "out")
        shardkit.build(src, out, options=BuildOptions(workers=1))
        assert _keys_and_labels(out) == {"cat/a": 0, "cat/b": 0, "dog/c": 1}
        assert _skipped(out) == {"cat/loop": "the same folder as one packed already"}
    finally:
        subprocess.run(["umount", "-l", loop], check=True)
