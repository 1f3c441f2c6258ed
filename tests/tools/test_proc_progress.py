"""``proc --engine ray|dask`` reports progress as each input shard's task finishes, through
the tools' one progress counter (:class:`shardkit.tools._progress.ShardCount`), as the
local engine does: the bar moves while the cluster works, not all at once at the end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.scale import address_of

from shardkit import ShardWriter
from shardkit.tools import proc
from shardkit.tools._progress import ToolProgress

SHARDS = 4
# The last shard's one "slow" sample holds its task 3 s: the others finish before it.
COMMAND = "if grep -q slow sample.txt; then sleep 3; fi; cp sample.txt sample.out.txt"


def _inputs(folder: Path) -> list[str]:
    with ShardWriter(str(folder / "in-%06d.tar"), max_count=3, index=False) as sink:
        for i in range(3 * SHARDS):
            text = "slow" if i == 3 * SHARDS - 1 else f"text {i}"
            sink.write({"__key__": f"k{i:03d}", "txt": text})
    return [str(folder / f"in-{n:06d}.tar") for n in range(SHARDS)]


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_cluster_proc_reports_each_shard_as_it_finishes(tmp_path: Path, engine: str) -> None:
    inputs = _inputs(tmp_path)
    pattern = str(tmp_path / "out-%02d.tar")
    last = pattern % (SHARDS - 1)
    seen: list[tuple[ToolProgress, bool]] = []  # each report, and whether the last is out

    def progress(report: ToolProgress) -> None:
        seen.append((report, os.path.exists(last)))

    result = proc(
        inputs, COMMAND, pattern, engine=engine, address=address_of(engine), progress=progress
    )
    assert result.samples_out == 3 * SHARDS
    assert [(r.shards, r.total) for r, _ in seen] == [(n, SHARDS) for n in range(1, SHARDS + 1)]
    assert not seen[0][1]  # the first report came while the slow last shard still ran
    assert seen[-1][1]
    assert [r.elapsed for r, _ in seen] == sorted(r.elapsed for r, _ in seen)


def test_cluster_proc_reports_outputs_an_earlier_run_left_as_done(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    pattern = str(tmp_path / "out-%02d.tar")
    command = "cp sample.txt sample.out.txt"
    proc(inputs[:2], command, pattern, engine="dask", address=address_of("dask"))
    seen: list[ToolProgress] = []
    proc(inputs, command, pattern, engine="dask", address=address_of("dask"), progress=seen.append)
    assert [(r.shards, r.total) for r in seen] == [(1, SHARDS), (2, SHARDS), (SHARDS, SHARDS)]
