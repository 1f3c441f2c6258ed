"""kill -9 of ``shardkit build`` (local engine) at 20 seeded moments, then rerun.

Half the kills land at a random time over the whole build; the other half land exactly
before or after one of the build's renames (a shard taking its final name, the manifest
taking its name), found by a hook that announces each rename on stderr and pauses 20 ms.
After every kill: no partial file under a final name, no manifest unless every shard is
complete, and no worker left running; the rerun completes and the output is
byte-identical to an uninterrupted build (manifest compared without ``timing``).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.build import snapshot
from helpers.procs import descendants, still_alive

from shardkit.cli import main
from shardkit.demo import make_image_folder

FINAL = re.compile(r"shard-\d{6}\.tar")
ARGS = ["--max-count", "40", "--validate", "full", "--seed", "11", "--workers", "2", "-q"]
LOCK = ".shardkit-build.lock"

# os.replace announced on stderr ("@@ before NAME" / "@@ after NAME") and a pause after each
# announcement, so that a kill lands on a chosen side of a rename. It is installed as a
# sitecustomize module in every process of the hooked build (the driver renames the
# manifest, and shards when they are cut up front; workers write the shards they assemble).
HOOK = textwrap.dedent(
    """
    import os, sys, time
    real = os.replace
    def replace(src, dst, **kw):
        name = os.path.basename(os.fspath(dst))
        if not name.startswith("."):
            sys.stderr.write(f"@@ before {name}\\n"); sys.stderr.flush(); time.sleep(0.02)
        real(src, dst, **kw)
        if not name.startswith("."):
            sys.stderr.write(f"@@ after {name}\\n"); sys.stderr.flush(); time.sleep(0.02)
    os.replace = replace
    """
)
HOOKED = "import sys; from shardkit.cli import main; sys.exit(main(['build', *sys.argv[1:]]))"


@pytest.fixture(scope="module")
def hooked_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a hooked build: the hook on the path of every process it starts."""
    folder = tmp_path_factory.mktemp("hook")
    (folder / "sitecustomize.py").write_text(HOOK)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("src"))
    make_image_folder(folder, count=600, seed=4)  # 15 shards of 40
    return folder


def _kill_at_time(cmd: list[str], out: str, delay: float) -> list[int]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, LOCK)) and proc.poll() is None:
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.002)
    time.sleep(delay)
    kids = descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return kids


def _kill_at_event(cmd: list[str], event: str, env: dict[str, str]) -> list[int]:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line.strip())
        if line.strip() == event:
            break
    kids = descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert seen and seen[-1] == event, f"{event!r} never came; saw {seen[-3:]}"
    return kids


def _check_after_kill(out: str, expected: dict[str, Any], what: str) -> bool:
    """The invariants of a killed build; True when it had already finished."""
    names = os.listdir(out)
    for name in names:
        if FINAL.fullmatch(name):  # never a partial file under a final name
            assert (Path(out) / name).read_bytes() == expected[name], f"{name} ({what})"
    if "manifest.json" in names:  # written only once every shard is complete
        visible = {n: v for n, v in snapshot(out).items() if not n.startswith(".")}
        assert visible == expected, f"manifest before completion ({what})"
        return True
    return False


def _reference(corpus: str, out: str, args: list[str]) -> float:
    """Build ``out`` uninterrupted; returns seconds from the lock appearing to the exit."""
    cmd = [sys.executable, "-m", "shardkit", "build", corpus, out, *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(os.path.join(out, LOCK)) and proc.poll() is None:
        time.sleep(0.002)
    started = time.perf_counter()
    assert proc.wait(timeout=60) == 0
    return time.perf_counter() - started


def _events(corpus: str, out: str, args: list[str], env: dict[str, str]) -> list[str]:
    """The renames an uninterrupted hooked build announces, in order."""
    done = subprocess.run(
        [sys.executable, "-c", HOOKED, corpus, out, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("@@ ")]


def _rerun(corpus: str, out: str, args: list[str]) -> tuple[int, str]:
    """``shardkit build`` again, in this process (a process other than the killed one, as
    a user's rerun is; its pool's forkserver, already started here, is reused)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["build", corpus, out, *args])
    return status, err.getvalue()


@pytest.mark.parametrize(
    ("extra", "seed"), [([], 1), (["--resize", "32"], 2)], ids=["renamed", "assembled"]
)
@pytest.mark.slow
def test_kill_9_at_ten_seeded_moments_then_rerun_is_identical(
    tmp_path: Path, corpus: str, extra: list[str], seed: int, hooked_env: dict[str, str]
) -> None:
    args = [*ARGS, *extra]
    reference = str(tmp_path / "reference")
    duration = _reference(corpus, reference, args)
    expected = snapshot(reference)
    events = _events(corpus, str(tmp_path / "hooked"), args, hooked_env)
    assert snapshot(str(tmp_path / "hooked")) == expected
    assert "@@ before manifest.json" in events and "@@ after manifest.json" in events
    rng = random.Random(seed)
    # 5 kills at a random time over the whole run (from the lock on), 5 at renames:
    # the manifest's two sides always, and three shard renames.
    shard_events = [e for e in events if "manifest" not in e]
    plan: list[tuple[str, Any]] = [("time", rng.uniform(0, 0.9 * duration)) for _ in range(5)]
    plan += [("event", "@@ before manifest.json"), ("event", "@@ after manifest.json")]
    plan += [("event", e) for e in rng.sample(shard_events, 3)]
    finished = 0
    timings: list[str] = []
    for trial, (kind, when) in enumerate(plan):
        out = str(tmp_path / f"killed{trial}")
        begun = time.perf_counter()
        what = f"trial {trial}: {kind} {when}"
        if kind == "time":
            cmd = [sys.executable, "-m", "shardkit", "build", corpus, out, *args]
            kids = _kill_at_time(cmd, out, when)
        else:
            cmd = [sys.executable, "-c", HOOKED, corpus, out, *args]
            kids = _kill_at_event(cmd, when, hooked_env)
        assert not still_alive(kids), f"workers outlived the killed build ({what})"
        finished += _check_after_kill(out, expected, what)
        status, stderr = _rerun(corpus, out, args)
        assert status == 0, f"{what}: {stderr}"
        assert snapshot(out) == expected, f"resumed output differs ({what})"
        timings.append(f"{kind}:{time.perf_counter() - begun:.2f}")
    print(f"build {duration:.2f} s; {finished} of 10 kills came after the manifest", *timings)
    assert finished <= 5  # (the build's speed varies with the machine's load)
