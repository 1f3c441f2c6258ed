"""Crash safety, resume and the one-build-per-folder lock, against real subprocesses."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.build import make_corpus, run_cli, snapshot

import shardkit
from shardkit import BuildOptions
from shardkit.errors import BuildError

ARGS = ["--max-count", "10", "--validate", "full", "--seed", "5", "--workers", "2", "-q"]
FINAL = re.compile(r"shard-\d{6}\.tar")
LOCK = ".shardkit-build.lock"


def _wait_for(path: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and proc.poll() is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.002)


def _journaled_shards(out: str) -> set[str]:
    """The names of the assembled shards a killed build's journal records."""
    names: set[str] = set()
    try:
        with open(os.path.join(out, ".shardkit-build.journal"), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return names
    for line in lines[1:]:
        try:
            record = json.loads(line)
        except ValueError:  # a torn last line
            continue
        shard = record.get("shard") if isinstance(record, dict) else None
        if isinstance(shard, dict) and "name" in shard:
            names.add(shard["name"])
    return names


@pytest.mark.parametrize(
    ("extra", "trials"),
    [([], 4), (["--resize", "24", "--max-size", "40kB"], 3)],
    ids=["pass-through", "resize-assembled"],
)
@pytest.mark.slow
def test_kill_9_at_a_random_moment_then_rerun_is_identical(
    tmp_path: Path, extra: list[str], trials: int
) -> None:
    src = make_corpus(str(tmp_path / "src"), count=400)
    args = [*ARGS, *extra]
    reference = str(tmp_path / "reference")
    assert run_cli(src, reference, *args).returncode == 0
    expected = snapshot(reference)
    rng = random.Random()
    interrupted = 0
    for trial in range(trials):
        out = str(tmp_path / f"killed{trial}")
        delay = rng.uniform(0.0, 0.35)
        cmd = [sys.executable, "-m", "shardkit", "build", src, out, *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(os.path.join(out, LOCK), proc)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        names = os.listdir(out)
        journaled = _journaled_shards(out)
        if "manifest.json" in names:  # only ever written once every shard is complete
            visible = {n: v for n, v in snapshot(out).items() if not n.startswith(".")}
            assert visible == expected, f"manifest before completion (delay {delay:.3f})"
        else:
            interrupted += 1
        inodes = {}
        for name in names:
            if FINAL.fullmatch(name):  # never a partial file under a final name
                path = os.path.join(out, name)
                with open(path, "rb") as f:
                    assert f.read() == expected[name], f"{name} differs (delay {delay:.3f})"
                inodes[name] = os.stat(path).st_ino
        rerun = run_cli(src, out, *args)
        assert rerun.returncode == 0, rerun.stderr
        assert snapshot(out) == expected, f"resumed output differs (delay {delay:.3f})"
        # Finished shards were not written again. When workers assemble the shards, one a
        # worker had renamed but the driver had not journaled yet is assembled again (same
        # bytes); a journaled one never is. How many were renamed and not yet journaled
        # depends on how far the driver lagged behind the workers when it was killed.
        rewritten = [
            name
            for name, inode in inodes.items()
            if os.stat(os.path.join(out, name)).st_ino != inode
        ]
        if not extra:
            assert rewritten == [], (rewritten, delay)
        assert not set(rewritten) & journaled, (rewritten, journaled, delay)
    assert interrupted >= 1


def test_journal_resumes_only_missing_tasks(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=60, bad=False)
    out = str(tmp_path / "out")
    options = BuildOptions(max_count=10, workers=1)
    calls = []

    def stop_after_three(progress: shardkit.BuildProgress) -> None:
        calls.append(progress.shards)
        if progress.shards >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=options, progress=stop_after_three)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    result = shardkit.build(src, out, options=options)
    assert result.resumed_tasks >= 3 and result.samples == 60
    fresh = str(tmp_path / "fresh")
    shardkit.build(src, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)


def test_resume_with_other_options_is_refused(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=30, bad=False)
    out = str(tmp_path / "out")

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=BuildOptions(max_count=5, workers=1), progress=stop)
    with pytest.raises(BuildError, match="interrupted build with different options"):
        shardkit.build(src, out, options=BuildOptions(max_count=6, workers=1))
    result = shardkit.build(src, out, options=BuildOptions(max_count=6, overwrite=True))
    assert result.samples == 30 and result.resumed_tasks == 0


def test_damaged_finished_shard_is_rebuilt_on_resume(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=40, bad=False)
    out = str(tmp_path / "out")
    options = BuildOptions(max_count=10, workers=1)

    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=options, progress=stop)
    with open(os.path.join(out, "shard-000000.tar"), "r+b") as f:
        f.write(b"garbage")
    shardkit.build(src, out, options=options)
    fresh = str(tmp_path / "fresh")
    shardkit.build(src, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)


_SLOW_BUILD = """
import os, sys, time
import shardkit

class Slow:
    def __len__(self):
        return 4

    def __getitem__(self, i):
        # Items are read only under the output's lock: say so, then wait for the release.
        open(sys.argv[3], "a").close()
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.005)  # poll without spinning: a spinner starves the other builds
        return {"txt": f"item {i}"}

if __name__ == "__main__":
    shardkit.build(Slow(), sys.argv[1], options=shardkit.BuildOptions(workers=1, max_count=2))
"""


@pytest.mark.slow
def test_second_concurrent_build_fails_fast(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=6, bad=False)
    out = str(tmp_path / "out")
    release = str(tmp_path / "release")
    locked = str(tmp_path / "locked")
    script = tmp_path / "slow.py"
    script.write_text(textwrap.dedent(_SLOW_BUILD))
    first = subprocess.Popen([sys.executable, str(script), out, release, locked])
    try:
        # Not the lock file: it exists a moment before it is locked.
        _wait_for(locked, first, timeout=120)
        second = run_cli(src, out, "-q")
        # Fails fast: it did not wait for the first build, which cannot end before release.
        assert first.poll() is None
        assert second.returncode == 2
        assert second.stderr.startswith("Error: ") and len(second.stderr.splitlines()) == 1
        assert "another build" in second.stderr
        with pytest.raises(BuildError, match="another build"):
            shardkit.build(src, out)
    finally:
        Path(release).touch()
        assert first.wait(timeout=120) == 0
    shards = ["shard-000000.tar", "shard-000001.tar"]
    assert sorted(os.listdir(out)) == sorted(
        ["manifest.json", *shards, *(s + ".idx" for s in shards)]
    )


_UNGUARDED = """
import sys, shardkit
shardkit.build(sys.argv[1], sys.argv[2], options=shardkit.BuildOptions(workers=2, max_count=4))
"""


@pytest.mark.slow
def test_a_script_without_a_main_guard_gets_one_line_per_worker(tmp_path: Path) -> None:
    src = make_corpus(str(tmp_path / "src"), count=12, bad=False)
    script = tmp_path / "unguarded.py"
    script.write_text(_UNGUARDED)
    out = str(tmp_path / "out")
    done = subprocess.run(
        [sys.executable, str(script), src, out], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "put the call to shardkit.build under `if __name__ == '__main__':`" in done.stderr
    assert "RuntimeError" not in done.stderr  # multiprocessing's page-long bootstrap error
    # The error the user reads last says what to do (rerunning never helps here).
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shardkit.errors.BuildError: worker processes could not start")
    assert "unguarded.py runs line 3 at import" in last
    assert last.endswith("put that call under `if __name__ == '__main__':`")
    assert not os.path.exists(os.path.join(out, "manifest.json"))


_GUARDED_KILLED = """
import os, signal, sys, shardkit

class Killer:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"__key__": f"k{i}", "txt": str(i)}

if __name__ == "__main__":
    shardkit.build(Killer(), sys.argv[1], options=shardkit.BuildOptions(workers=2, max_count=2))
"""


@pytest.mark.slow
def test_a_guarded_script_whose_worker_is_killed_is_told_to_rerun(tmp_path: Path) -> None:
    script = tmp_path / "guarded.py"
    script.write_text(_GUARDED_KILLED)
    out = str(tmp_path / "out")
    done = subprocess.run(
        [sys.executable, str(script), out], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("shardkit.errors.BuildError: a worker process died unexpectedly")
    assert last.endswith("rerun the same command to resume")
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_a_task_handed_to_a_pool_whose_worker_died_is_the_same_build_error() -> None:
    # Was: under load, the driver's next submit raised the pool's raw BrokenProcessPool
    # ("A child process terminated abruptly") rather than the one line that says what to do.
    from shardkit.engines import make_executor

    executor = make_executor("local", None, workers=2)
    try:
        with pytest.raises(BuildError, match="a worker process died"):
            executor.submit(os._exit, 3).result(timeout=60)
        with pytest.raises(BuildError, match="a worker process died"):
            executor.submit(os._exit, 3)
    finally:
        executor.close(cancel=True)
