"""Builds into S3 (SeaweedFS): workers write their parts straight into the bucket, the
journal and the lock live there too, and resume needs nothing but the bucket."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, run_cli
from helpers.procs import descendants, still_alive
from helpers.scale import address_of, s3_bucket, snapshot_local, snapshot_s3, text_samples

import shardkit
from shardkit import BuildOptions, BuildProgress, storage
from shardkit.demo import make_image_folder
from shardkit.errors import BuildError

__all__ = ["s3_bucket"]  # the fixture, used by name

IMAGES = {"max_count": 16, "seed": 7}
PYTHON = {"max_count": 9, "max_size": 4000, "seed": 3}
LOCK = ".shardkit-build.lock"
_DRIVER_WRITES = (".shardkit-build/", "manifest.json", LOCK)


def _fs() -> Any:
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL"], skip_instance_cache=True)


def _names(url: str) -> list[str]:
    root = url.removeprefix("s3://")
    return sorted(p[len(root) + 1 :] for p in _fs().find(root))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("remote") / "images"), count=90)


@pytest.fixture(scope="module")
def references(corpus: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Local single-process builds of both sources: what every S3 build must equal."""
    base = tmp_path_factory.mktemp("ref")
    shardkit.build(corpus, base / "images", options=BuildOptions(workers=1, **IMAGES))  # type: ignore[arg-type]
    shardkit.build(text_samples(60), base / "python", options=BuildOptions(workers=1, **PYTHON))  # type: ignore[arg-type]
    return {kind: snapshot_local(str(base / kind)) for kind in ("images", "python")}


def _record_driver_uploads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every URL this process (the driver) uploads (every write goes through open_atomic)."""
    uploads: list[str] = []
    real = storage.open_atomic

    def recording(url: str, **kwargs: Any) -> Any:
        uploads.append(url)
        return real(url, **kwargs)

    monkeypatch.setattr(storage, "open_atomic", recording)
    return uploads


def _files_under(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file()]


@pytest.mark.parametrize(
    ("kind", "engine"),
    [("images", "local"), ("images", "ray"), ("python", "local"), ("python", "dask")],
)
def test_workers_write_parts_straight_into_the_bucket(
    kind: str,
    engine: str,
    corpus: str,
    references: dict[str, Any],
    s3_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"  # where a staging copy would go: it must stay empty
    cache.mkdir()
    monkeypatch.setenv("SHARDKIT_CACHE_DIR", str(cache))
    uploads = _record_driver_uploads(monkeypatch)
    seen: list[str] = []

    def watch(progress: BuildProgress) -> None:
        seen.extend(_files_under(cache))

    url = f"s3://{s3_bucket}/{kind}"
    source, options = (corpus, IMAGES) if kind == "images" else (text_samples(60), PYTHON)
    opts = BuildOptions(workers=2, engine=engine, address=address_of(engine), **options)  # type: ignore[arg-type]
    result = shardkit.build(source, url, options=opts, progress=watch)
    assert snapshot_s3(url) == references[kind]
    assert result.manifest == f"{url}/manifest.json" and len(result.shards) >= 5
    assert seen == [] and _files_under(cache) == []  # no staging copy on the driver's disk
    # The driver uploaded only journal records and the manifest: every part and every
    # shard (assembled or not) came from a worker process.
    names = [u.removeprefix(url + "/") for u in uploads]
    # an index (renamed with its shard) and the skipped list: the driver's few bytes about
    # the shards, never shard bytes
    moved = [n for n in names if not n.startswith(_DRIVER_WRITES) and not n.endswith(".idx")]
    assert names and moved in ([], ["skipped.jsonl"]), moved
    assert any(n.startswith(".shardkit-build/task-") for n in names)
    assert (kind == "python") == any(n.startswith(".shardkit-build/shard-") for n in names)


@pytest.mark.parametrize("extra", [[], ["--resize", "32"]], ids=["renamed", "assembled"])
def test_interrupted_build_resumes_from_another_process(
    extra: list[str], corpus: str, s3_bucket: str, tmp_path: Path
) -> None:
    args = ["--max-count", "16", "--seed", "7", "--workers", "2", "-q", *extra]
    assert run_cli(corpus, str(tmp_path / "local"), *args).returncode == 0
    url = f"s3://{s3_bucket}/resume"

    class Stop(Exception):
        pass

    def stop_after_two_shards(progress: BuildProgress) -> None:
        if progress.shards >= 2:
            raise Stop

    resize = {"resize": 32} if extra else {}
    options = BuildOptions(max_count=16, seed=7, workers=2, **resize)  # type: ignore[arg-type]
    with pytest.raises(Stop):
        shardkit.build(corpus, url, options=options, progress=stop_after_two_shards)
    partial = _names(url)
    assert "manifest.json" not in partial and LOCK not in partial
    assert ".shardkit-build/header.json" in partial
    assert len([n for n in partial if n.startswith("shard-")]) >= 2  # in any order

    # A fresh process elsewhere, with its own cache and temp folders: only the bucket.
    # (Short: the forkserver's socket goes in TMPDIR; Unix socket paths are 108 bytes.)
    elsewhere = Path(tempfile.mkdtemp(prefix="skt-", dir="/tmp"))
    env = {**os.environ, "SHARDKIT_CACHE_DIR": str(elsewhere), "TMPDIR": str(elsewhere)}
    rerun = subprocess.run(
        [sys.executable, "-m", "shardkit", "build", corpus, url, *args],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    shutil.rmtree(elsewhere)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot_s3(url) == snapshot_local(str(tmp_path / "local"))
    manifest = json.loads(_fs().cat_file(f"{url.removeprefix('s3://')}/manifest.json"))
    assert manifest["timing"]["resumed_tasks"] > 0
    assert LOCK not in _names(url) and not [n for n in _names(url) if n.startswith(".")]


def _wait_for(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


# A driver that stops (and waits to be killed) once 3 shards are committed: the kill lands
# at a known point, with workers still uploading the parts of the tasks in flight.
_PAUSING_DRIVER = """
import sys, time
import shardkit

def progress(p):
    if p.shards >= 3:
        print("@@ committed", flush=True)
        time.sleep(600)

if __name__ == "__main__":
    resize = {"resize": int(sys.argv[3])} if len(sys.argv) > 3 else {}
    options = shardkit.BuildOptions(max_count=40, validate="full", seed=11, workers=2, **resize)
    shardkit.build(sys.argv[1], sys.argv[2], options=options, progress=progress)
"""


@pytest.mark.parametrize("resize", [[], ["32"]], ids=["renamed", "assembled"])
def test_kill_9_of_the_driver_then_resume(
    resize: list[str], s3_bucket: str, tmp_path: Path
) -> None:
    corpus = str(tmp_path / "src")
    make_image_folder(corpus, count=600, seed=4)
    args = ["--max-count", "40", "--validate", "full", "--seed", "11", "--workers", "2", "-q"]
    args += [a for size in resize for a in ("--resize", size)]
    assert run_cli(corpus, str(tmp_path / "local"), *args).returncode == 0
    expected = snapshot_local(str(tmp_path / "local"))
    url = f"s3://{s3_bucket}/killed"
    script = tmp_path / "driver.py"
    script.write_text(_PAUSING_DRIVER)
    proc = subprocess.Popen(
        [sys.executable, str(script), corpus, url, *resize], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "@@ committed"
        kids = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert kids and not still_alive(kids), "workers outlived the killed driver"
    names = _names(url)
    assert "manifest.json" not in names
    assert len([n for n in names if n.startswith("shard-")]) >= 3  # in any order
    assert LOCK in names  # the dead driver's lease stays behind...
    partial = snapshot_s3(url)
    for name, digest in partial.items():  # ...and nothing partial under a final name
        if name.startswith("shard-"):
            assert digest == expected[name], name
    started = time.monotonic()
    rerun = run_cli(corpus, url, *args)  # ...and is taken over: its pid is gone
    assert rerun.returncode == 0, rerun.stderr
    assert time.monotonic() - started < 50  # did not wait for the lease to expire (60 s)
    assert snapshot_s3(url) == expected


def _slow_build(url: str, entered: threading.Event, release: threading.Event) -> dict[str, Any]:
    """Start a build into ``url`` in a thread that pauses in its first progress report."""
    out: dict[str, Any] = {}

    def hold(progress: BuildProgress) -> None:
        entered.set()
        release.wait(60)

    def run() -> None:
        options = BuildOptions(workers=1, max_count=8)
        out["result"] = shardkit.build(text_samples(40), url, options=options, progress=hold)

    out["thread"] = threading.Thread(target=run)
    out["thread"].start()
    return out


def test_second_build_into_the_same_bucket_fails_fast(corpus: str, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/locked"
    entered, release = threading.Event(), threading.Event()
    first = _slow_build(url, entered, release)
    try:
        assert entered.wait(60)
        assert LOCK in _names(url)
        started = time.monotonic()
        second = run_cli(corpus, url, "-q")
        # Well under the lease's 60 s, which a build that waited for it would take (a CLI
        # start took 20 s once at load 35; about 2 s on a quiet machine).
        assert time.monotonic() - started < 45
        assert second.returncode == 2 and len(second.stderr.splitlines()) == 1, second.stderr
        line = second.stderr.strip()
        assert line.startswith(f"Error: {url}: another build is writing to this output")
        assert f"on host {socket.gethostname()}, pid {os.getpid()}" in line
        assert "wait for it to finish" in line
    finally:
        release.set()
        first["thread"].join(60)
    assert first["result"].samples == 40
    names = _names(url)
    assert LOCK not in names and "manifest.json" in names


def test_a_live_lease_from_another_pid_namespace_of_this_host_is_not_taken_over(
    s3_bucket: str,
) -> None:
    # Regression: a lease naming this host and a pid that does not exist here was taken
    # over at once, as a killed build's. But containers that share the host name (host
    # networking) each have their own pids: the holder was a live build in another
    # container, whose next renewal then found its lease gone. Its pid space differs.
    from shardkit.builder import _lease as lease

    url = f"s3://{s3_bucket}/namespaced"
    lock = f"{s3_bucket}/namespaced/{LOCK}"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    holder = {
        "owner": "x",
        "host": socket.gethostname(),
        "pid": int(gone.stdout),
        "ttl": 60.0,
        "pid_space": "another-boot/4026531836",
        "expires": time.time() + 300,
    }
    _fs().pipe_file(lock, json.dumps(holder).encode())
    options = BuildOptions(workers=1, max_count=8)
    with pytest.raises(BuildError, match="another build is writing to this output"):
        shardkit.build(text_samples(20), url, options=options)
    # The same dead pid in this very pid space is a killed build's: taken over at once.
    _fs().pipe_file(lock, json.dumps({**holder, "pid_space": lease._pid_space()}).encode())
    assert shardkit.build(text_samples(20), url, options=options).samples == 20


def test_an_expired_lease_is_taken_over_and_a_live_one_is_not(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/leased"
    lock = f"{s3_bucket}/leased/{LOCK}"
    fs = _fs()
    live = {"owner": "x", "host": "elsewhere.example", "pid": 4242, "ttl": 60.0}
    fs.pipe_file(lock, json.dumps({**live, "expires": time.time() + 300}).encode())
    held = fs.cat_file(lock)
    options = BuildOptions(workers=1, max_count=8)
    with pytest.raises(BuildError, match=r"on host elsewhere\.example, pid 4242"):
        shardkit.build(text_samples(20), url, options=options)
    assert _names(url) == [LOCK] and fs.cat_file(lock) == held  # untouched, nothing written

    fs.pipe_file(lock, json.dumps({**live, "expires": time.time() - 1}).encode())
    result = shardkit.build(text_samples(20), url, options=options)
    assert result.samples == 20
    names = _names(url)
    assert LOCK not in names and "manifest.json" in names


def test_the_lease_is_renewed_and_a_lost_lease_is_noticed(s3_bucket: str) -> None:
    from shardkit.builder._lease import hold_lease
    from shardkit.builder._store import ObjectStore

    lock = f"{s3_bucket}/lease/{LOCK}"
    fs = _fs()
    with hold_lease(ObjectStore(f"s3://{s3_bucket}/lease"), ttl=1.2) as lease:
        first = json.loads(fs.cat_file(lock))
        assert first["pid"] == os.getpid() and first["host"] == socket.gethostname()
        time.sleep(0.7)
        second = json.loads(fs.cat_file(lock))
        assert second["owner"] == first["owner"] and second["expires"] > first["expires"]
        lease.check()
        fs.pipe_file(lock, json.dumps({**second, "owner": "thief"}).encode())

        def noticed() -> bool:
            try:
                lease.check()
            except BuildError as exc:
                return "lost its lease" in str(exc) and "took it over" in str(exc)
            return False

        _wait_for(noticed, "the lost lease went unnoticed", timeout=5)
    assert json.loads(fs.cat_file(lock))["owner"] == "thief"  # not ours: left alone


def test_refused_credentials_are_one_line_naming_the_url(corpus: str, s3_bucket: str) -> None:
    # In a subprocess: see test_remote_s3.test_a_wrong_secret_is_refused.
    url = f"s3://{s3_bucket}/refused"
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "wrong-secret"}
    done = subprocess.run(
        [sys.executable, "-m", "shardkit", "build", corpus, url, "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"Error: {url}/") and "wrong-secret" not in done.stderr
    assert _names(url) == []
