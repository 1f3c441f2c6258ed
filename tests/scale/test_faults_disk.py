"""A full disk under a build and under ShardWriter: one clear error, nothing partial left.

The disk is a real size-limited tmpfs mounted by the test (the tests run as root in CI).
Where ``mount`` is not permitted the same tests run with ``RLIMIT_FSIZE`` instead (a
write past the limit fails with EFBIG, SIGXFSZ ignored): one file fills up rather than
the whole disk, and the checks are the same. ``test_shardwriter_past_rlimit_fsize``
always uses that fallback, and the manifest case injects ENOSPC into its one write.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.build import make_corpus, snapshot

FINAL = re.compile(r"shard-\d{6}\.tar")
ARGS = ["--max-count", "50", "--seed", "3", "--workers", "2", "-q"]
NO_SPACE = ("No space left on device", "File too large")


class Disk:
    """A folder with ``free`` bytes left: a tmpfs, or a per-file size limit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mounted = _mount(root)
        self.limit: int | None = None

    def leave_free(self, free: int) -> None:
        filler = self.root / "filler"
        with contextlib.suppress(FileNotFoundError):
            filler.unlink()
        if not self.mounted:
            self.limit = max(free, 1)
            return
        avail = os.statvfs(self.root).f_bavail * os.statvfs(self.root).f_frsize
        with open(filler, "wb") as f:
            f.truncate(0)
            f.write(bytes(max(avail - free, 0)))

    def free_all(self) -> None:
        self.limit = None
        with contextlib.suppress(FileNotFoundError):
            (self.root / "filler").unlink()

    def preexec(self) -> None:
        if self.limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, self.limit))


def _mount(root: Path) -> bool:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(root)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    root = tmp_path / "disk"
    root.mkdir()
    result = Disk(root)
    try:
        yield result
    finally:
        if result.mounted:
            subprocess.run(["umount", "-l", str(root)], check=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("src")), count=600, bad=False)


_REFERENCES: dict[str, dict[str, object]] = {}


def _build(
    src: str, out: str, args: list[str], disk: Disk | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shardkit", "build", src, out, *args],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=None if disk is None else disk.preexec,
        check=False,
    )


def _reference(src: str, folder: Path, args: list[str]) -> dict[str, object]:
    """The uninterrupted build's snapshot (once per option set in this process)."""
    key = " ".join(args)
    if key not in _REFERENCES:
        done = _build(src, str(folder / "reference"), args)
        assert done.returncode == 0, done.stderr
        _REFERENCES[key] = snapshot(str(folder / "reference"))
    return _REFERENCES[key]


@pytest.mark.parametrize("extra", [[], ["--resize", "40"]], ids=["renamed", "assembled"])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.8, 0.97])
@pytest.mark.slow
def test_build_on_a_full_disk(
    tmp_path: Path, disk: Disk, corpus: str, extra: list[str], fraction: float
) -> None:
    args = [*ARGS, *extra]
    expected = _reference(corpus, tmp_path, args)
    total = sum(len(v) for v in expected.values() if isinstance(v, bytes))
    out = str(disk.root / "out")
    os.mkdir(out)
    disk.leave_free(int(total * fraction))
    done = _build(corpus, out, args, disk)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert any(reason in lines[0] for reason in NO_SPACE), lines[0]
    names = os.listdir(out)
    assert "manifest.json" not in names
    for name in names:  # completed shards intact, nothing partial under a final name
        assert ".tmp-" not in name, names  # complete parts of finished tasks may stay
        if FINAL.fullmatch(name):
            assert (Path(out) / name).read_bytes() == expected[name], name
    disk.free_all()
    rerun = _build(corpus, out, args, disk)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(out) == expected


_WRITER = textwrap.dedent(
    """
    import json, os, sys
    from shardkit import ShardWriter
    from shardkit.errors import StorageError
    committed = []
    try:
        with ShardWriter(sys.argv[1], max_count=20, on_shard=committed.append) as sink:
            for i in range(400):
                sink.write({"__key__": f"s{i:05d}", "bin": os.urandom(3000) + bytes(i)})
    except StorageError as exc:
        print(json.dumps({"error": str(exc), "url": exc.url,
                          "shards": [[s.url, s.bytes, s.digest] for s in committed]}))
    else:
        print(json.dumps({"error": None}))
    """
)


def _run_writer(pattern: str, disk: Disk) -> dict[str, object]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _WRITER, pattern],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=disk.preexec,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _check_writer_result(result: dict[str, object], folder: Path) -> None:
    import blake3

    assert result["error"] is not None
    assert any(reason in str(result["error"]) for reason in NO_SPACE), result
    shards = result["shards"]
    assert isinstance(shards, list) and len(shards) >= 1
    on_disk = sorted(n for n in os.listdir(folder) if n != "filler")
    names = [os.path.basename(url) for url, _, _ in shards]
    # each shard with its index, no temporary file, no index of a shard not committed
    assert on_disk == sorted([*names, *(name + ".idx" for name in names)])
    assert str(result["url"]).endswith(f"{len(shards):04d}.tar")  # the shard in progress
    for url, size, sha in shards:
        data = Path(url).read_bytes()
        assert (len(data), "blake3:" + blake3.blake3(data).hexdigest()) == (size, sha)


def test_shardwriter_on_a_full_disk(disk: Disk) -> None:
    folder = disk.root / "w"
    folder.mkdir()
    disk.leave_free(300_000)
    _check_writer_result(_run_writer(str(folder / "part-%04d.tar"), disk), folder)


def test_shardwriter_past_rlimit_fsize(tmp_path: Path) -> None:
    disk = Disk.__new__(Disk)  # the fallback: no mount, a per-file limit
    disk.root, disk.mounted, disk.limit = tmp_path, False, 40_000
    result = _run_writer(str(tmp_path / "part-%04d.tar"), disk)  # shards are ~70 kB
    assert "File too large" in str(result["error"]), result
    assert result["shards"] == [] and os.listdir(tmp_path) == []


_MANIFEST_ENOSPC = textwrap.dedent(
    """
    import errno, importlib, sys
    manifest = importlib.import_module("shardkit.builder._manifest")
    from shardkit.cli import main

    real = manifest.atomic_write

    class Full:
        def __init__(self, stream):
            self.stream = stream
        def write(self, data):
            self.stream.write(data[:100])
            raise OSError(errno.ENOSPC, "No space left on device")

    import contextlib
    @contextlib.contextmanager
    def full(path, **kw):
        with real(path, **kw) as stream:
            yield Full(stream)

    manifest.atomic_write = full
    sys.exit(main(["build", *sys.argv[1:]]))
    """
)


@pytest.mark.slow
def test_manifest_write_on_a_full_disk(tmp_path: Path, corpus: str) -> None:
    out = str(tmp_path / "out")
    done = subprocess.run(
        [sys.executable, "-c", _MANIFEST_ENOSPC, corpus, out, *ARGS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {os.path.join(out, 'manifest.json')}: cannot write: No space left on device"
    ]
    names = sorted(os.listdir(out))
    assert "manifest.json" not in names and not [n for n in names if "manifest" in n]
    assert ".shardkit-build.journal" in names  # a rerun resumes
    rerun = subprocess.run(
        [sys.executable, "-m", "shardkit", "build", corpus, out, *ARGS],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "manifest.json" in os.listdir(out)


# --------------------------------------------------------------------------- the tools

_TOOLS = {
    "cat": ["cat", "{shard}", "-o", "{disk}/out.tar"],
    "cat-gz": ["cat", "{shard}", "-o", "{disk}/out.tar.gz"],
    "split": ["split", "{shard}", "-o", "{disk}/s-%03d.tar", "--max-count", "10"],
    "split-gz": ["split", "{shard}", "-o", "{disk}/s-%03d.tar.gz", "--max-count", "10"],
    "convert": ["convert", "{shard}", "-o", "{disk}/out.tfrecord"],
    "show-grid": ["show", "{shard}", "--grid", "{disk}/grid.png", "-c", "40"],
    "index": ["index", "{disk}/in-0.tar"],
}


@pytest.fixture(scope="module")
def image_shard(tmp_path_factory: pytest.TempPathFactory) -> str:
    from helpers.build import make_png

    from shardkit import ShardWriter

    folder = tmp_path_factory.mktemp("shard")
    with ShardWriter(str(folder / "in-%d.tar"), max_count=None, max_size=None) as sink:
        for i in range(40):
            sink.write({"__key__": f"s{i:03d}", "png": make_png(i, (60, 60)), "cls": i % 3})
    return sink.shards[0].url


@pytest.mark.parametrize("tool", sorted(_TOOLS))
def test_tools_on_a_full_disk(disk: Disk, image_shard: str, tool: str) -> None:
    """cat -o, split, convert -o, show --grid and index: one Error line, exit 2, nothing
    partial (they ended in an OSError traceback, exit 1)."""
    import shutil

    shard = image_shard
    if tool == "index":  # the index goes beside its shard
        shard = shutil.copy(image_shard, disk.root / "in-0.tar")
    before = set(os.listdir(disk.root))
    disk.leave_free(0)
    argv = [arg.format(shard=shard, disk=disk.root) for arg in _TOOLS[tool]]
    done = subprocess.run(
        [sys.executable, "-m", "shardkit", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=disk.preexec,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert any(reason in lines[0] for reason in NO_SPACE), lines[0]
    assert set(os.listdir(disk.root)) - {"filler"} == before  # no partial file, no temporary
