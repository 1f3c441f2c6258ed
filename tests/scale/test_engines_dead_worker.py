"""A task whose cluster worker kept dying ends in one BuildError line, the same for Ray
and Dask (``engines/_connect.cluster_worker_died``), with the cluster's own error as its cause."""

from __future__ import annotations

import pytest

from shardkit.errors import BuildError


def test_a_dask_worker_that_kept_dying() -> None:
    distributed = pytest.importorskip("distributed")
    from shardkit.engines import _dask

    killed = distributed.KilledWorker("task", "worker", 3)
    error = _dask.unwrap(killed)
    assert isinstance(error, BuildError)
    assert error.message == (
        "a Dask worker died each time it ran the same task (killed, or out of memory?); "
        "rerun the same command to resume"
    )
    assert error.__cause__ is killed
    other = ValueError("the task's own")
    assert _dask.unwrap(other) is other


def test_a_ray_worker_that_kept_dying() -> None:
    pytest.importorskip("ray")
    from ray import exceptions as ray_errors

    from shardkit.engines import _ray

    crashed = ray_errors.WorkerCrashedError()
    error = _ray.unwrap(crashed, 3)
    assert isinstance(error, BuildError)
    assert error.message == (
        "a Ray worker died 4 times running the same task (killed, or out of memory?); "
        "rerun the same command to resume"
    )
    assert error.__cause__ is crashed
