"""What a build costs per file: the worker's reads and imports, the listing's memory."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from shardkit.builder import _folders as folders
from shardkit.builder import _inputs as inputs
from shardkit.errors import DataError
from shardkit.storage import _doors


def _atime_ns(path: Path) -> int:
    return os.stat(path).st_atime_ns


def test_reading_a_source_file_leaves_its_access_time_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.jpg"
    path.write_bytes(b"x" * 100)
    mtime = os.stat(path).st_mtime_ns
    # An access time before the modification time: any ordinary read updates it (relatime).
    os.utime(path, ns=(0, mtime))
    with open(path, "rb") as f:
        f.read()
    assert _atime_ns(path) != 0, "this filesystem must record reads for the test to mean much"
    os.utime(path, ns=(0, mtime))
    assert inputs.read_file(str(path), 100) == b"x" * 100
    assert _atime_ns(path) == 0


def test_a_file_of_another_owner_is_read_without_noatime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O_NOATIME is refused (EPERM) on files this process does not own: the file is read
    all the same, and the flag is not tried again. An unreadable file (EACCES) is skipped
    and keeps the flag."""
    noatime = os.O_NOATIME
    path, unreadable = tmp_path / "a.jpg", tmp_path / "b.jpg"
    path.write_bytes(b"abc")
    unreadable.write_bytes(b"abc")
    real_open = os.open
    flags_seen: list[int] = []

    def fake_open(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        flags_seen.append(flags)
        if os.fspath(name) == str(unreadable):
            raise PermissionError(errno.EACCES, "Permission denied")
        if flags & noatime:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(_doors, "_no_atime", noatime)
    monkeypatch.setattr(os, "open", fake_open)
    with pytest.raises(DataError, match="cannot read: Permission denied"):
        inputs.read_file(str(unreadable), 3)
    assert _doors._no_atime == noatime
    assert inputs.read_file(str(path), 3) == b"abc"
    assert inputs.read_file(str(path), 3) == b"abc"
    assert [bool(f & noatime) for f in flags_seen] == [True, True, False, False]


def test_a_worker_does_not_import_what_its_build_does_not_read() -> None:
    """Starting a worker of an image-folder build imports neither the shard reader nor the
    downloader (tens of milliseconds before each worker's first task)."""
    code = (
        "import sys\n"
        "from shardkit.builder import _worker as worker\n"
        "from shardkit.builder.options import BuildOptions\n"
        "from shardkit.builder._inputs import FileSource\n"
        "from shardkit.builder._store import LocalStore\n"
        "context = worker.WorkerContext(LocalStore('.'), BuildOptions(), FileSource('.'), ())\n"
        "worker.init_worker(context, None).close()\n"
        "print(sorted(m for m in sys.modules if m.endswith(('builder.shards', 'builder.fetch',"
        " 'shardkit.reader'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_listing_keeps_a_few_hundred_bytes_per_file_at_its_peak(tmp_path: Path) -> None:
    """Not a whole ``os.stat_result`` per file (~0.5 KB more: 979 B per file at the peak)."""
    for c in range(4):
        folder = tmp_path / f"class_{c:03d}"
        folder.mkdir()
        for i in range(500):
            (folder / f"img_{i:06d}.jpg").touch()
    tracemalloc.start()
    try:
        listing = folders.list_image_folder(str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert listing.items is not None and len(listing.items) == 2000
    assert peak / 2000 < 600


def test_the_worker_server_boots_before_the_build_machinery_loads(tmp_path: Path) -> None:
    """``shardkit.build`` starts the worker server first: it imports shardkit while the
    calling process imports the build modules (~50 ms) and lists the source."""
    from helpers.build import make_corpus

    src = make_corpus(str(tmp_path / "src"), count=6, bad=False)
    script = f"""
import sys
from shardkit.engines import _local
seen = []
real = _local.warm_up
def warm_up(preload=()):
    seen.append(("shardkit.builder._api" in sys.modules, tuple(preload)))
    real(preload)
_local.warm_up = warm_up
import shardkit
if __name__ == "__main__":
    shardkit.build({src!r}, {str(tmp_path / "out")!r}, options=shardkit.BuildOptions(workers=2))
    print(seen[0])
"""
    path = tmp_path / "script.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "(False, ('shardkit.builder._worker',))", done.stdout


def test_the_server_preloads_the_worker_module() -> None:
    from shardkit.builder import _worker as worker

    assert worker.WORKER_MODULE == worker.__name__ == "shardkit.builder._worker"
