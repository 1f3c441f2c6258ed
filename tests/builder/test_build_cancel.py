"""A build that fails stops its other workers cleanly: they unwind instead of dying
mid-write, so no temporary file is left in the output, and the failure is quick."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers.procs import still_alive
from helpers.scale import text_samples

import shardkit
from shardkit import BuildOptions
from shardkit.engines.testing import CrashOnce, FailWhileAnotherLoads
from shardkit.errors import BuildError


def test_a_failed_build_leaves_no_temporary_file_of_its_other_workers(tmp_path: Path) -> None:
    # Regression (a CI flake of test_faults_disk): the driver meant to stop the other
    # workers with SIGTERM but never did (ProcessPoolExecutor.shutdown forgets its
    # processes before they were looked up), so they went on writing after build()
    # had failed, and died mid-part when the driver process exited, leaving
    # `.NAME.tmp-PID` files in the output. The worker loading the slow item has started
    # its task's part when the other item fails.
    samples = text_samples(40)
    dataset = FailWhileAnotherLoads(samples, slow=12, fail=3, marker=str(tmp_path / "slow"))
    out = tmp_path / "out"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="item 3 is broken"):
        shardkit.build(dataset, out, options=BuildOptions(workers=2, max_count=8))
    assert (tmp_path / "slow").exists(), "the slow item never started: the test proves nothing"
    assert time.monotonic() - started < 20, "the build waited for the slow worker"
    slow_worker = int((tmp_path / "slow").read_text())
    assert not still_alive([slow_worker], timeout=0), "a worker outlived the failed build"
    left = [n for n in os.listdir(out) if ".tmp-" in n] if out.exists() else []
    assert not left, left


def test_a_task_stopped_after_its_last_sample_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression, found through the test above under load: the stop signal can arrive
    # after a task's last sample, while it reports progress or commits its last part; that
    # stretch was outside the task's cleanup, and the part's temporary file stayed.
    from shardkit.builder import _worker as worker

    def stopped(self: object) -> None:
        raise KeyboardInterrupt  # what a signal handler raises at that point

    monkeypatch.setattr(worker._Progress, "flush", stopped)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        shardkit.build(text_samples(20), out, options=BuildOptions(workers=1, max_count=8))
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def test_a_worker_that_dies_mid_part_leaves_no_temporary_file(tmp_path: Path) -> None:
    # A worker killed part way through a part (os._exit, as the OOM killer would) cannot
    # unwind; the driver removes what it left once the run has stopped, while it still
    # holds the output's lock. Item 12 is the fifth of its task (8 per task).
    marker = tmp_path / "crashed"
    out = tmp_path / "out"
    with pytest.raises(BuildError):
        shardkit.build(
            CrashOnce(text_samples(40), 12, str(marker)),
            out,
            options=BuildOptions(workers=2, max_count=8, shuffle=False),
        )
    assert marker.exists(), "the worker never crashed: the test proves nothing"
    assert not [n for n in os.listdir(out) if ".tmp-" in n]
