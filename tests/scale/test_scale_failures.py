"""Failures on a cluster: a dying worker is retried, errors come back with their type, an
interrupted build to S3 leaves no manifest and resumes to the same bytes."""

from __future__ import annotations

import os
from typing import Any

import pytest
from helpers.build import BAD_FILES, make_corpus
from helpers.scale import address_of, s3_bucket, snapshot_local, snapshot_s3, text_samples

import shardkit
from shardkit import BuildOptions, BuildProgress
from shardkit.engines.testing import CrashOnce
from shardkit.errors import DataError

__all__ = ["s3_bucket"]

ENGINES = ["ray", "dask"]
PYTHON = {"max_count": 8, "seed": 5}


def options(engine: str, **kwargs: Any) -> BuildOptions:
    return BuildOptions(engine=engine, address=address_of(engine), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ENGINES)
def test_killed_worker_is_retried_and_output_identical(engine: str, tmp_path: Any) -> None:
    samples = text_samples(40)
    done = tmp_path / "crashed-before"
    done.write_text("")  # the local reference build does not crash
    shardkit.build(
        CrashOnce(samples, 21, str(done)), tmp_path / "local", options=BuildOptions(**PYTHON)
    )
    marker = tmp_path / "crashed"
    shardkit.build(
        CrashOnce(samples, 21, str(marker)), tmp_path / "cluster", options=options(engine, **PYTHON)
    )
    assert marker.exists(), "the worker never crashed: the test proves nothing"
    assert int(marker.read_text()) != os.getpid()  # it was a cluster worker, not us
    assert snapshot_local(str(tmp_path / "cluster")) == snapshot_local(str(tmp_path / "local"))


@pytest.mark.slow
def test_a_dask_worker_dying_with_the_only_copy_of_the_context_is_retried(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: the build's context is scattered to the workers, and scattered data
    # cannot be recomputed. When the last worker holding it died, Dask cancelled every
    # task that needed it and the build failed with FutureCancelledError (seen in CI with
    # the two-worker test cluster, when only one worker had a copy). One worker here makes
    # that deterministic.
    from distributed import LocalCluster

    samples = text_samples(40)
    done = tmp_path / "crashed-before"
    done.write_text("")  # the local reference build does not crash
    local = BuildOptions(**PYTHON)
    shardkit.build(CrashOnce(samples, 21, str(done)), tmp_path / "local", options=local)
    marker = tmp_path / "crashed"
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        options = BuildOptions(engine="dask", address=cluster.scheduler_address, **PYTHON)
        shardkit.build(CrashOnce(samples, 21, str(marker)), tmp_path / "cluster", options=options)
    assert marker.exists(), "the worker never crashed: the test proves nothing"
    assert "lost the build's context" in caplog.text  # it did go through the resend
    assert snapshot_local(str(tmp_path / "cluster")) == snapshot_local(str(tmp_path / "local"))


@pytest.mark.parametrize("engine", ENGINES)
def test_task_error_reraises_with_type_url_and_key(engine: str, tmp_path: Any) -> None:
    corpus = make_corpus(str(tmp_path / "images"), count=30)
    with pytest.raises(DataError) as local:
        shardkit.build(corpus, tmp_path / "local", options=BuildOptions(on_error="fail", seed=1))
    out = tmp_path / "cluster"
    with pytest.raises(DataError) as remote:
        shardkit.build(corpus, out, options=options(engine, on_error="fail", seed=1))
    error = remote.value
    assert type(error) is type(local.value)
    assert error.url in BAD_FILES and local.value.url in BAD_FILES
    assert error.key is not None and error.key in str(error)
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("engine", ["ray"])
def test_interrupted_s3_build_resumes_to_identical_bytes(
    engine: str, s3_bucket: str, tmp_path: Any
) -> None:
    samples = text_samples(80)
    shardkit.build(samples, tmp_path / "local", options=BuildOptions(**PYTHON))
    url = f"s3://{s3_bucket}/resume"

    class Stop(Exception):
        pass

    def stop_after_three_shards(progress: BuildProgress) -> None:
        if progress.shards >= 3:
            raise Stop

    with pytest.raises(Stop):
        shardkit.build(
            samples, url, options=options(engine, **PYTHON), progress=stop_after_three_shards
        )
    partial = snapshot_s3(url)
    assert "manifest.json" not in partial and ".shardkit-build/header.json" in partial
    assert any(name.startswith("shard-") for name in partial)

    result = shardkit.build(samples, url, options=options(engine, **PYTHON))
    assert result.resumed_tasks > 0
    assert snapshot_s3(url) == snapshot_local(str(tmp_path / "local"))
    again = shardkit.build(samples, url, options=options(engine, **PYTHON))
    assert again.resumed_tasks == -1 and again.shards == result.shards


def test_a_cancelled_ray_run_settles_every_task_before_it_lets_go_of_ray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A CI run lost its pytest worker in a Ray test whose tasks failed: the run was
    # cancelled and Ray shut down while the done callbacks of the other tasks'
    # ObjectRef.future() were still pending, a path on which Ray can crash the process.
    # close(cancel=True) now lets go of Ray only once every task has ended and its future
    # is set; and it ends running tasks (a plain ray.cancel did not interrupt a task in
    # time.sleep: it ran on, as a cancelled build's task would go on writing its part).
    import time

    import ray

    from shardkit.engines import make_executor

    futures: list[Any] = []
    settled_at_shutdown: list[bool] = []
    shutdown = ray.shutdown

    def noted_shutdown(*args: Any, **kwargs: Any) -> None:
        settled_at_shutdown.append(all(future.done() for future in futures))
        shutdown(*args, **kwargs)

    monkeypatch.setattr(ray, "shutdown", noted_shutdown)
    executor = make_executor("ray", address_of("ray"))
    futures += [executor.submit(time.sleep, 60) for _ in range(4)]
    started = time.monotonic()
    executor.close(cancel=True)
    assert time.monotonic() - started < 30, "close waited for the tasks to run to the end"
    assert settled_at_shutdown == [True]
