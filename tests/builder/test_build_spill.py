"""The driver in bounded memory: listings and orders larger than ORDER_BUDGET go through
spill files (sorted runs, hash buckets) in a private temporary folder.

The budget is forced tiny here so a small corpus takes the spilled path."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from helpers.build import make_corpus, read_samples, snapshot, write

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _spill as spill_module
from shardkit.builder._folders import list_image_folder
from shardkit.builder._plan import chunk_stream, order_items
from shardkit.builder._pysources import list_python
from shardkit.builder._spill import Spill, remove_stale
from shardkit.builder.options import BuildOptions as _Options
from shardkit.errors import BuildError

BUDGET = 16


def _tiny(monkeypatch: pytest.MonkeyPatch, budget: int = BUDGET) -> list[str]:
    """Force the budget; returns the spill files made from then on (as they are made)."""
    monkeypatch.setattr(spill_module, "ORDER_BUDGET", budget)
    made: list[str] = []
    new_file = Spill.new_file

    def counted(self: Spill, batch: int = 4096) -> spill_module.RecordFile:
        file = new_file(self, batch)
        made.append(file.path)
        return file

    monkeypatch.setattr(Spill, "new_file", counted)
    return made


def _corpus(tmp_path: Path) -> str:
    """100 images plus files whose keys collide (a.jpg/a.png) and the names the key rules
    then give or count past (a_jpg, a_jpg_2)."""
    src = make_corpus(str(tmp_path / "src"), count=100, bad=False)
    image = Path(src, "circle").glob("*.jpg").__next__().read_bytes()
    for rel in ("circle/dup.jpg", "circle/dup.png", "circle/dup_jpg.jpg", "circle/x/dup_jpg_2.jpg"):
        write(src, rel, image)
    write(src, "square/a.b.jpg", image)
    write(src, "square/a_b.jpg", image)
    return src


def _keys(out: str) -> list[str]:
    return [sample["__key__"] for sample in read_samples(out)]


def _left(made: list[str]) -> list[str]:
    """The spill folders of the files in ``made`` that still exist."""
    return [folder for folder in {os.path.dirname(path) for path in made} if os.path.exists(folder)]


def test_spilled_listing_gives_the_same_bytes_in_listing_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _corpus(tmp_path)
    options = BuildOptions(max_count=10, shuffle=False, workers=1)
    held = str(tmp_path / "held")
    shardkit.build(src, held, options=options)
    made = _tiny(monkeypatch)
    spilled = str(tmp_path / "spilled")
    shardkit.build(src, spilled, options=options)
    assert len(made) > 10  # runs, the sorted listing, key buckets
    # sorted runs + a k-way merge, keys resolved from disk: the same listing, byte for byte
    assert snapshot(spilled) == snapshot(held)
    assert {"circle/dup_jpg", "circle/dup_png", "circle/dup_jpg_2"} <= set(_keys(spilled))
    assert not _left(made)


def test_spilled_shuffle_is_a_seeded_permutation_whatever_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _corpus(tmp_path)
    listed = str(tmp_path / "listed")
    shardkit.build(src, listed, options=BuildOptions(shuffle=False, workers=1))
    in_memory = str(tmp_path / "in-memory")
    shardkit.build(src, in_memory, options=BuildOptions(max_count=10, workers=1))
    made = _tiny(monkeypatch)
    outs = {}
    for name, workers, seed in (("one", 1, 0), ("two", 2, 0), ("seed1", 2, 1)):
        outs[name] = str(tmp_path / name)
        options = BuildOptions(max_count=10, workers=workers, seed=seed)
        shardkit.build(src, outs[name], options=options)
    order = _keys(outs["one"])
    assert sorted(order) == sorted(_keys(listed))  # every item once
    assert snapshot(outs["two"]) == snapshot(outs["one"])
    assert _keys(outs["seed1"]) != order
    assert order != _keys(in_memory)  # bucketed: not the in-memory order
    assert made
    assert not _left(made)


def test_spilled_build_resumes_to_the_same_bytes_and_leaves_no_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _corpus(tmp_path)
    made = _tiny(monkeypatch)
    out = str(tmp_path / "out")
    options = BuildOptions(max_count=10, workers=1)

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=options, progress=stop)
    assert made and not _left(made)  # removed on error too
    result = shardkit.build(src, out, options=options)
    assert result.resumed_tasks >= 3
    fresh = str(tmp_path / "fresh")
    shardkit.build(src, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)
    assert not _left(made)


def _ordering_peak(items_of: object, count: int, options: _Options) -> int:
    """Bytes tracemalloc saw at the peak while listing, ordering and cutting."""
    tracemalloc.start()
    try:
        with Spill() as spill:
            listing = items_of(spill)  # type: ignore[operator]
            assert listing.items is not None and len(listing.items) == count
            tasks = sum(1 for _ in chunk_stream(order_items(listing.items, options, spill), 64))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tasks == -(-count // 64)
    return peak


def test_ordering_does_not_hold_the_items(monkeypatch: pytest.MonkeyPatch) -> None:
    count, budget = 60_000, 2_000
    _tiny(monkeypatch, budget)
    peak = _ordering_peak(lambda spill: list_python(range(count), None), count, _Options())
    # Holding the items (a list of 60,000) alone takes > 8 MB; a bucket of ~1,000 does not.
    assert peak < 2_500_000, peak


def test_folder_listing_does_not_hold_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "many"
    for cls in range(3):
        for sub in range(20):  # the walk holds one folder's names at a time
            folder = src / f"c{cls}" / f"{sub:02d}"
            folder.mkdir(parents=True)
            for i in range(200):
                (folder / f"image-{i:05d}.jpg").write_bytes(b"")
    _tiny(monkeypatch, 500)
    peak = _ordering_peak(lambda spill: list_image_folder(str(src), spill), 12_000, _Options())
    assert peak < 2_500_000, peak  # holding the 12,000 files: > 4 MB


def _list(tmp_path: Path, src: str, rows: list[str]) -> str:
    listing = tmp_path / "list.csv"
    listing.write_text("\n".join(["path,label,n,note", *rows]) + "\n")
    return str(listing)


def _rows(src: str) -> list[str]:
    """Every image of ``src`` (by absolute path: keys from their common folder), class
    names as labels, a number column, a text column; a missing file, a non-image."""
    rows = []
    for i, image in enumerate(sorted(Path(src).rglob("*.*"))):
        rows.append(f"{image},{image.parent.name},{i},note {i % 7}")
    return [*rows, f"{src}/missing.jpg,circle,1,x", f"{src}/notes.txt,circle,2,y"]


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_spilled_list_gives_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    src = _corpus(tmp_path)
    listing = _list(tmp_path, src, _rows(src))
    outs = {}
    made: list[str] = []
    for name, budget in (("held", 0), ("spilled", BUDGET)):
        if budget:
            made = _tiny(monkeypatch)
        for shuffle in (False, True):
            outs[name, shuffle] = str(tmp_path / f"{name}-{shuffle}")
            options = BuildOptions(max_count=10, shuffle=shuffle, workers=1, format=fmt)  # type: ignore[arg-type]
            result = shardkit.build(listing, outs[name, shuffle], options=options)
            assert {p.rpartition("/")[2] for p, _ in result.skipped} == {"missing.jpg", "notes.txt"}
    # rows, files, labels, typed columns and keys from spill files: the same listing
    assert made
    assert snapshot(outs["spilled", False]) == snapshot(outs["held", False])
    assert sorted(_keys_of(outs["spilled", True])) == sorted(_keys_of(outs["held", True]))
    assert not _left(made)


def _keys_of(out: str) -> list[str]:
    from shardkit.reader import read_shard

    return [
        s["__key__"]
        for name in sorted(os.listdir(out))
        if name.startswith("shard-") and not name.endswith(".idx")
        for s in read_shard(os.path.join(out, name))
    ]


def test_spilled_list_skips_every_row_listed_twice_or_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _corpus(tmp_path)
    rows = _rows(src)
    first = rows[40].split(",")[0]
    again = first.replace(src, f"{src}/x/..")
    later = rows[70].split(",")[0]
    rows[60] = f"{again},circle,0,x"  # repeats row 41
    rows[50] = f"{later},circle,0,x"  # listed before row 71, which is then the repeat
    rows[80] = ",circle,0,x"  # an empty path
    listing = _list(tmp_path, src, rows)
    _tiny(monkeypatch)
    result = shardkit.build(listing, str(tmp_path / "out"), options=BuildOptions(workers=1))
    reasons = dict(result.skipped)
    assert reasons[again] == f"listed twice: row 41 lists it already as {first!r}"
    assert reasons[later] == "listed twice: row 51 lists it already"
    assert reasons["row 81"] == "empty 'path' cell"


def test_spilled_shards_reshard_to_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = make_corpus(str(tmp_path / "src"), count=40, bad=False)
    shards = tmp_path / "shards"
    shards.mkdir()
    for prefix, seed in (("a", 0), ("b", 3)):  # the same keys twice: shard numbers added
        options = BuildOptions(max_count=15, seed=seed, prefix=prefix)
        for shard in shardkit.build(src, str(tmp_path / prefix), options=options).shards:
            (shards / shard.name).write_bytes((tmp_path / prefix / shard.name).read_bytes())
    outs = {}
    made: list[str] = []
    for name in ("held", "spilled"):
        if name == "spilled":
            made = _tiny(monkeypatch)
        outs[name] = str(tmp_path / name)
        options = BuildOptions(max_count=25, shuffle=False, workers=1)
        shardkit.build(str(shards), outs[name], options=options)
    assert made
    assert snapshot(outs["spilled"]) == snapshot(outs["held"])
    assert _keys(outs["spilled"])[0].startswith("000000/")
    assert not _left(made)


class _Tiny:
    """A map-style dataset of ``count`` samples of a few bytes, in 10 classes."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, int]:
        return {"cls": index % 10}


def _build_peak(out: Path, count: int) -> int:
    options = BuildOptions(workers=1, format="tfrecord", max_count=5000)
    tracemalloc.start()
    try:
        shardkit.build(_Tiny(count), out, options=options)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_whole_build_does_not_hold_per_sample_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of 256 samples are assembled into shards: their per-sample sizes and class
    # counts are folded in as they are cut, so the driver's peak grows by a few bytes per
    # sample (one small record per chunk), not by every sample's figures.
    _tiny(monkeypatch, 2000)
    _build_peak(tmp_path / "warm", 3000)  # imports, caches
    small = _build_peak(tmp_path / "small", 10_000)
    large = _build_peak(tmp_path / "large", 40_000)
    assert large - small < 30_000 * 10, (small, large)  # holding them: ~15 bytes/sample


def _gone_pid() -> int:
    """The pid of a process that has exited (as a pid of another namespace looks here)."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(gone.stdout)


def _spill_folder(parent: str, pid: int) -> Path:
    """A spill folder as a build makes it (named for ``pid``), with its lock file and a
    spill file; nobody holds its lock."""
    folder = Path(parent, f"shardkit-spill-{pid}-test")
    folder.mkdir()
    (folder / "lock").touch()
    (folder / "000001.bin").write_bytes(b"x")
    return folder


@contextlib.contextmanager
def _locked_elsewhere(lock: Path) -> Iterator[None]:
    """Hold the flock on ``lock`` from another live process for the block: a build in
    another container, whose pid means nothing here."""
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()


def test_a_spilled_build_removes_what_a_killed_build_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Liveness is the folder's lock, not the pid in its name: a folder nobody locks goes
    even if its pid names a live process (a recycled pid); one locked by a live process
    stays even if its pid exists nowhere here (another pid namespace sharing TMPDIR)."""
    left = _spill_folder(tempfile.gettempdir(), os.getpid())
    held = _spill_folder(tempfile.gettempdir(), _gone_pid())
    try:
        made = _tiny(monkeypatch)
        with _locked_elsewhere(held / "lock"):
            options = BuildOptions(workers=1)
            shardkit.build(_corpus(tmp_path), str(tmp_path / "out"), options=options)
            assert made
            assert (left.exists(), (held / "000001.bin").exists()) == (False, True)
        assert not _left(made)
    finally:
        for folder in (left, held):
            shutil.rmtree(folder, ignore_errors=True)


def test_a_live_builds_spill_folder_outlives_another_builds_cleanup(tmp_path: Path) -> None:
    parent = str(tmp_path)
    gone = _spill_folder(parent, _gone_pid())
    with mock.patch.object(tempfile, "tempdir", parent), Spill() as spill:
        file = spill.new_file()  # the cleanup that comes first removes the dead folder
        assert spill.path is not None and not gone.exists()
        file.extend(range(10))
        file.flush()
        assert remove_stale(parent) == []  # another build's cleanup: this one is locked
        assert list(file) == list(range(10))
    assert os.listdir(parent) == []  # closed: removed


def test_the_spill_cleanup_removes_a_folder_without_a_lock_file_only_while_empty(
    tmp_path: Path,
) -> None:
    """No lock file: a folder being made this instant (its build locks it next) or one
    whose build died first. Removed only while empty, so never one a build has locked."""
    empty = tmp_path / f"shardkit-spill-{os.getpid()}-new"
    empty.mkdir()
    filled = tmp_path / f"shardkit-spill-{os.getpid()}-old"
    filled.mkdir()
    (filled / "000001.bin").write_bytes(b"x")
    (tmp_path / "shardkit-spill-a-file").write_bytes(b"not a folder")
    assert remove_stale(str(tmp_path)) == [empty.name]
    assert filled.exists() and (tmp_path / "shardkit-spill-a-file").exists()


def _racing_mkdtemp(monkeypatch: pytest.MonkeyPatch, parent: str, races: int) -> list[str]:
    """Make the first ``races`` new spill folders lose to another build's cleanup, which
    runs between their making and their locking; returns the folders made."""
    made: list[str] = []
    mkdtemp = tempfile.mkdtemp

    def raced(*args: Any, **kwargs: Any) -> str:
        path = mkdtemp(*args, **kwargs)
        made.append(path)
        if len(made) <= races:
            assert remove_stale(parent) == [os.path.basename(path)]
        return path

    monkeypatch.setattr(tempfile, "tempdir", parent)
    monkeypatch.setattr(tempfile, "mkdtemp", raced)
    return made


def test_a_spill_folder_a_cleanup_took_before_it_was_locked_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _racing_mkdtemp(monkeypatch, str(tmp_path), races=1)
    with Spill() as spill:
        file = spill.new_file()
        file.extend(range(5))
        assert spill.path == made[1] and list(file) == list(range(5))
    assert os.listdir(tmp_path) == []


def test_a_spill_folder_that_keeps_being_taken_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _racing_mkdtemp(monkeypatch, str(tmp_path), races=100)
    with pytest.raises(BuildError, match="cannot make a spill folder"), Spill() as spill:
        spill.new_file()
    assert os.listdir(tmp_path) == []
