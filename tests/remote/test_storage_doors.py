"""The guarded doors of storage/: the writing door (exclusive random temporaries, no link
followed, write errors never swallowed) and the reading door (regular files only, opened
without blocking, size-bounded, bounded JSON)."""

from __future__ import annotations

import errno
import io
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.tools import samples, write_shards

from shardkit import storage
from shardkit.cli import main
from shardkit.errors import StorageError

OUTSIDE = b"a file outside the output folder\n"


def test_two_atomic_files_for_one_name_never_share_a_temporary(tmp_path: Any) -> None:
    # issue 20 R3: both used `.x.bin.tmp-PID`: the first commit gave BBBBAAAAAA and the
    # second raised.
    target = str(tmp_path / "x.bin")
    first = storage.open_atomic(target)
    second = storage.open_atomic(target)
    first.write(b"A" * 10)
    second.write(b"B" * 4)
    second.commit()
    assert Path(target).read_bytes() == b"B" * 4
    first.commit()
    assert Path(target).read_bytes() == b"A" * 10
    assert os.listdir(tmp_path) == ["x.bin"]


def test_a_link_at_the_old_predictable_temporary_name_is_not_followed(tmp_path: Any) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / f".x.bin.tmp-{os.getpid()}")
    with storage.open_atomic(str(out / "x.bin")) as file:
        file.write(b"data")
    assert outside.read_bytes() == OUTSIDE
    assert not os.path.islink(out / "x.bin") and (out / "x.bin").read_bytes() == b"data"


@pytest.fixture
def planted_draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Make every second temporary suffix drawn the same token (the one returned), so a
    test can plant links at it: a writer that meets one must draw another name."""
    import shardkit._temporary as temporary

    token = "0" * 16
    counter = itertools.count()

    def draw(nbytes: int | None = None) -> str:
        n = next(counter)
        return token if n % 2 == 0 else f"{n:016x}"

    monkeypatch.setattr(temporary.secrets, "token_hex", draw)
    yield token


def plant(folder: Any, names: list[str], target: Any, token: str) -> None:
    """Links to ``target`` at each temporary name a writer of ``names`` could be given."""
    os.makedirs(folder, exist_ok=True)
    for name in names:
        for suffix in (str(os.getpid()), token):
            os.symlink(target, os.path.join(folder, f".{name}.tmp-{suffix}"))


def test_a_link_at_a_drawn_temporary_name_is_not_followed(
    tmp_path: Any, planted_draws: str
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    plant(tmp_path / "out", ["x.bin"], outside, planted_draws)
    with storage.open_atomic(str(tmp_path / "out" / "x.bin")) as file:
        file.write(b"data")
    assert outside.read_bytes() == OUTSIDE
    assert (tmp_path / "out" / "x.bin").read_bytes() == b"data"


def _cli_cases(src: str, out: str) -> dict[str, tuple[list[str], list[str]]]:
    """argv and the names written in ``out`` for each writing CLI tool."""
    shard = os.path.join(src, "shard-000000.tar")
    return {
        "cat": (["cat", shard, "-o", f"{out}/all.tar"], ["all.tar"]),
        "split": (
            ["split", shard, "-o", f"{out}/s-%06d.tar", "--max-count", "4"],
            ["s-000000.tar", "s-000001.tar", "s-000002.tar"],
        ),
        "convert": (["convert", shard, "-o", f"{out}/all.tfrecord"], ["all.tfrecord"]),
        "index": (["index", os.path.join(out, "shard-000000.tar")], ["shard-000000.tar.idx"]),
    }


@pytest.mark.parametrize("tool", ["cat", "split", "convert", "index"])
def test_writing_tools_never_write_through_a_planted_link(
    tmp_path: Any, planted_draws: str, tool: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    write_shards(src, samples(10), per_shard=10)
    os.makedirs(out)
    if tool == "index":  # it writes beside the shard
        os.link(os.path.join(src, "shard-000000.tar"), os.path.join(out, "shard-000000.tar"))
    argv, names = _cli_cases(src, out)[tool]
    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    plant(out, names, outside, planted_draws)
    assert main(argv) == 0, capsys.readouterr().err
    assert outside.read_bytes() == OUTSIDE
    for name in names:
        path = os.path.join(out, name)
        assert os.path.isfile(path) and not os.path.islink(path), name


def test_the_manifest_write_never_follows_a_planted_link(
    tmp_path: Any, planted_draws: str, image_folder: str
) -> None:
    import shardkit
    from shardkit.builder import BuildOptions

    outside = tmp_path / "outside.txt"
    outside.write_bytes(OUTSIDE)
    out = tmp_path / "out"
    plant(out, ["manifest.json", "shard-000000.tar"], outside, planted_draws)
    shardkit.build(image_folder, str(out), options=BuildOptions(workers=1))
    assert outside.read_bytes() == OUTSIDE
    assert os.path.isfile(out / "manifest.json") and not os.path.islink(out / "manifest.json")


# --------------------------------------------------------------------------- the cache


class _Body(io.RawIOBase):
    """A remote body for the caching reader: ``data``, with its size announced."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.size: int | None = len(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._data.readinto(buffer)


def _full_disk(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Writes of cache copies fail with ENOSPC once ``after`` bytes are written."""
    from shardkit.storage import _cache

    class Full(io.FileIO):
        written = 0

        def write(self, data: Any) -> int:
            Full.written += len(data)
            if Full.written > after:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

    real_open = open

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, int) and "w" in mode:
            return io.BufferedWriter(Full(file, "wb"))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(_cache, "open", fake_open, raising=False)


@pytest.mark.parametrize("size", [3_000, 5_000_000])
def test_a_full_cache_disk_still_returns_every_byte(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, size: int, caplog: Any
) -> None:
    # issue 19 item 3: small shards read as empty, large ones gave a raw OSError.
    from shardkit.storage._cache import _CachingReader

    _full_disk(monkeypatch, after=1000)
    data = os.urandom(size)
    path = str(tmp_path / "cache" / "copy")
    reader = io.BufferedReader(_CachingReader(_Body(data), path, "http://x/s.tar", None))  # type: ignore[arg-type]
    with reader:
        assert reader.read() == data
    assert os.listdir(tmp_path / "cache") == []
    assert "not cached" in caplog.text and "No space left" in caplog.text


def test_an_unwritable_cache_folder_still_returns_every_byte(tmp_path: Any, caplog: Any) -> None:
    from shardkit.storage._cache import _CachingReader

    (tmp_path / "file").write_bytes(b"")
    path = str(tmp_path / "file" / "copy")  # its folder is a file: cannot be made
    data = os.urandom(5000)
    with io.BufferedReader(_CachingReader(_Body(data), path, "http://x/s.tar", None)) as r:  # type: ignore[arg-type]
        assert r.read() == data
    assert "not cached" in caplog.text


def test_a_fresh_cache_copy_is_locked_before_it_is_visible(tmp_path: Any) -> None:
    # issue 19 item 14: another process's eviction could take a fresh copy before its
    # reader locked it. While the stream that wrote it is open, it cannot be evicted.
    from shardkit.cachelimit import enforce_limit
    from shardkit.storage._cache import _CachingReader

    cache = tmp_path / "cache"
    path = str(cache / "copy")
    reader = _CachingReader(_Body(b"x" * 5000), path, "http://x/s.tar", None)  # type: ignore[arg-type]
    buffer = bytearray(1 << 16)
    while reader.readinto(buffer):
        pass
    assert os.path.exists(path)
    assert enforce_limit(str(cache), 0) == []  # in use: kept
    assert os.path.exists(path)
    reader.close()
    assert enforce_limit(str(cache), 0) == ["copy"]


def test_a_write_error_is_one_storage_error_naming_the_file(tmp_path: Any) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError, match=r"file/x\.bin"):
        storage.open_atomic(str(tmp_path / "file" / "x.bin"))


# --------------------------------------------------------------------------- reading door


DEEP = b"[" * 200_000 + b"]" * 200_000


@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "folder"])
def test_the_reading_door_refuses_what_is_not_a_regular_file(tmp_path: Any, plant: str) -> None:
    path = str(tmp_path / "manifest.json")
    if plant == "fifo":
        os.mkfifo(path)  # opened without blocking: no writer needed to get an answer
    elif plant == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        os.mkdir(path)
    with pytest.raises(StorageError, match="not a regular file"):
        storage.read_document(path, what="manifest")
    with pytest.raises(StorageError, match="not a regular file"):
        storage.open_regular(path)


def test_the_reading_door_bounds_the_size_before_reading(tmp_path: Any) -> None:
    path = tmp_path / "x.idx"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse
    with pytest.raises(StorageError, match="larger than the 1000-byte limit"):
        storage.read_document(str(path), limit=1000, what="index file")
    path.write_bytes(b"x" * 1000)
    assert storage.read_document(str(path), limit=1000) == b"x" * 1000


def test_a_small_document_is_read_without_reserving_the_whole_limit(tmp_path: Any) -> None:
    """Reading a 20-byte index under the 512 MiB limit allocates about 20 bytes, not the
    limit: ``read(limit + 1)`` reserved it whole (a failure where memory is not overcommitted)."""
    import tracemalloc

    path = tmp_path / "x.idx"
    path.write_bytes(b"a" * 20)
    step = 1 << 20
    path2 = tmp_path / "y.idx"
    path2.write_bytes(b"b" * (3 * step + 5))  # several steps, and not a multiple of one
    tracemalloc.start()
    try:
        assert storage.read_document(str(path)) == b"a" * 20
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * step, peak
    assert storage.read_document(str(path2)) == b"b" * (3 * step + 5)
    with pytest.raises(StorageError, match="larger than the 3145728-byte limit"):
        storage.read_document(str(path2), limit=3 * step)


def test_deep_json_is_one_format_error_everywhere() -> None:
    from shardkit.errors import FormatError, ManifestError
    from shardkit.formats.index import ShardIndex
    from shardkit.formats.jsondoc import load_json
    from shardkit.formats.manifest import parse_manifest

    with pytest.raises(FormatError, match="nested more than 128 levels deep"):
        load_json(DEEP)
    with pytest.raises(FormatError, match="nested more than 128 levels deep"):
        load_json(b"[" * 129 + b"]" * 129)  # within the interpreter's limit, over ours
    assert load_json(b"[" * 128 + b"]" * 128) is not None
    with pytest.raises(ManifestError, match="manifest is nested"):
        parse_manifest(DEEP, url="m.json")
    with pytest.raises(FormatError, match="index file is nested"):
        ShardIndex.from_json(DEEP, url="x.idx")


def test_a_fifo_at_a_cache_entry_is_refused_not_waited_on(tmp_path: Any) -> None:
    path = str(tmp_path / "entry")
    os.mkfifo(path)
    with pytest.raises(StorageError, match=r"not a regular file \(a FIFO\)"):
        storage.open_cached(path, 0)


def test_a_folder_listing_names_every_entry_but_sizes_only_regular_files(tmp_path: Any) -> None:
    (tmp_path / "a.tar").write_bytes(b"x" * 10)
    os.mkfifo(tmp_path / "b.tar")
    os.mkfifo(tmp_path / "a.tar.idx")
    os.symlink("/dev/zero", tmp_path / "c.tar")
    os.symlink(tmp_path / "a.tar", tmp_path / "d.tar")
    os.symlink(tmp_path / "gone", tmp_path / "e.tar")
    names, sizes = storage.folder_entries(str(tmp_path))
    assert names == {"a.tar", "b.tar", "a.tar.idx", "c.tar", "d.tar", "e.tar"}
    assert sizes == {"a.tar": 10, "d.tar": 10}


@pytest.mark.parametrize("entry", ["Dataset", "IndexedDataset", "verify", "build"])
def test_a_fifo_idx_in_a_shard_folder_is_named_not_taken_for_a_missing_index(
    tmp_path: Any, entry: str
) -> None:
    """Every entry that counts a folder's samples from its ``.idx`` files names the FIFO
    at once (it is listed, then refused by the reading door), under a 20 s alarm: never a
    wait on it, and never "no count known" as though there were no index."""
    import signal

    import shardkit
    from shardkit import tools

    folder = tmp_path / "src"
    tools.write_indexes(write_shards(str(folder), samples(6), per_shard=3))
    fifo = folder / "shard-000001.tar.idx"
    fifo.unlink()
    os.mkfifo(fifo)
    named = rf"{fifo}: not a regular file \(a FIFO\)"
    runs = {
        "Dataset": lambda: len(shardkit.Dataset(str(folder))),
        "IndexedDataset": lambda: len(shardkit.IndexedDataset(str(folder))),
        "verify": lambda: tools.verify([str(folder)]).shards[1].problems[0].message,
        "build": lambda: shardkit.build(str(folder), str(tmp_path / "out")),
    }

    def bound(signum: int, frame: Any) -> None:
        raise TimeoutError("waited on the FIFO")

    previous = signal.signal(signal.SIGALRM, bound)
    signal.alarm(20)
    try:
        if entry == "verify":  # a problem of that shard, named
            assert re.search(named, runs[entry]())
        else:
            with pytest.raises(StorageError, match=named):
                runs[entry]()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_full_temporary_folder_during_the_spill_is_one_line() -> None:
    from shardkit.builder._spill import RecordFile
    from shardkit.errors import BuildError

    records = RecordFile("/dev/full", batch=2)  # every write: ENOSPC
    records.append(("a", 1))
    with pytest.raises(BuildError, match=r"cannot spill .*No space left on device.*TMPDIR"):
        records.append(("b", 2))
