"""kill -9 of ``shardkit build --engine ray`` (the CLI driver, on the test cluster that
scripts/cluster-services starts) at 3 seeded random moments, then rerun to completion.

After every kill: no partial file under a final name and no manifest before every shard
is complete; the rerun (on the same cluster) completes and its output is byte-identical
to a build with the local engine (manifest compared without ``timing``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.build import snapshot
from helpers.scale import address_of

from shardkit.demo import make_image_folder

ARGS = ["--max-count", "30", "--validate", "full", "--seed", "7", "-q"]


def _build(corpus: str, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "shardkit", "build", corpus, out, *ARGS, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _shards(out: str) -> int:
    try:
        return sum(name.startswith("shard-") for name in os.listdir(out))
    except FileNotFoundError:
        return 0


def _kill_after(cmd: list[str], out: str, shards: int, delay: float) -> float:
    """Start ``cmd``; SIGKILL it ``delay`` s after ``shards`` shards have their final
    name (the Ray tasks are then running); the seconds it ran."""
    begun = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = begun + 60
    while _shards(out) < shards and proc.poll() is None:
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.002)
    assert proc.poll() is None, "the build finished before the kill"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return time.monotonic() - begun


def test_kill_9_of_a_ray_build_then_rerun_is_identical_to_local(tmp_path: Path) -> None:
    address = address_of("ray")
    if not address:
        pytest.fail("no Ray cluster: run through scripts/cluster-services", pytrace=False)
    corpus = str(tmp_path / "src")
    make_image_folder(corpus, count=450, seed=9)
    reference = str(tmp_path / "local")
    done = _build(corpus, reference, "--workers", "2")
    assert done.returncode == 0, done.stderr
    expected = snapshot(reference)
    ray = ["--engine", "ray", "--address", address]
    begun = time.monotonic()
    first = _build(corpus, str(tmp_path / "ray"), *ray)
    duration = time.monotonic() - begun
    assert first.returncode == 0, first.stderr
    assert snapshot(str(tmp_path / "ray")) == expected
    total = sum(name.startswith("shard-") for name in expected)
    rng = random.Random(3)
    for trial, after in enumerate(sorted(rng.sample(range(1, total // 2), 3))):
        out = str(tmp_path / f"killed{trial}")
        cmd = [sys.executable, "-m", "shardkit", "build", corpus, out, *ARGS, *ray]
        ran = _kill_after(cmd, out, after, rng.uniform(0, 0.05))
        names = os.listdir(out)
        for name in names:
            if name.startswith("shard-"):  # never a partial file under a final name
                assert (Path(out) / name).read_bytes() == expected[name], f"{name}, trial {trial}"
        complete = "manifest.json" in names
        if complete:
            assert {n: v for n, v in snapshot(out).items() if not n.startswith(".")} == expected
        rerun = _build(corpus, out, *ray)
        assert rerun.returncode == 0, f"trial {trial}: {rerun.stderr}"
        assert snapshot(out) == expected, f"resumed output differs (trial {trial})"
        shards = sum(n.startswith("shard-") for n in names)
        print(f"trial {trial}: killed after {ran:.2f} s with {shards} shards, done={complete}")
    print(f"ray build {duration:.2f} s, {total} shards")
