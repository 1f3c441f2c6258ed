"""A resumed build holds no record per task an earlier run finished (issue 15): the journal
is read as a stream and each record read back when its task is checked and committed."""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, snapshot
from helpers.scale import s3_bucket, snapshot_s3

import shardkit
from shardkit import BuildOptions
from shardkit.builder import _run as run
from shardkit.builder._journal import JOURNAL_NAME
from shardkit.builder._worker import TaskResult

__all__ = ["s3_bucket"]  # a fixture

PASS_THROUGH = {"max_count": 1, "workers": 1}  # one task per item
RESIZED = {"max_count": 4, "workers": 1, "resize": 16, "seed": 3}  # chunks of 4 items
ITEMS = 120


def _held() -> int:
    gc.collect()
    # type(), not isinstance(): that asks every object its __class__, which warns for
    # some of torch's deprecated objects when torch is loaded
    return sum(type(o) is TaskResult for o in gc.get_objects())


def _interrupt(src: str, out: str, options: BuildOptions, shards: int) -> None:
    def stop(progress: shardkit.BuildProgress) -> None:
        if progress.shards >= shards:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(src, out, options=options, progress=stop)


def _count_held(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """TaskResult objects alive once the journal is loaded and checked, and at the
    manifest, in the resumed build."""
    held: dict[str, int] = {}
    prepare, finish = run._Driver.prepare, run._Driver._finish

    def preparing(self: Any) -> Any:
        done = prepare(self)
        held["loaded"] = _held()
        held["resumed"] = self.resumed
        return done

    def finishing(self: Any) -> Any:
        held["manifest"] = _held()
        return finish(self)

    monkeypatch.setattr(run._Driver, "prepare", preparing)
    monkeypatch.setattr(run._Driver, "_finish", finishing)
    return held


@pytest.mark.parametrize("shape", [PASS_THROUGH, RESIZED], ids=["pass-through", "assembled"])
def test_a_resumed_build_holds_no_record_per_finished_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: dict[str, Any]
) -> None:
    src = make_corpus(str(tmp_path / "src"), count=ITEMS, bad=False)
    options = BuildOptions(**shape)
    out = str(tmp_path / "out")
    _interrupt(src, out, options, shards=ITEMS // shape["max_count"] - 2)
    assert os.path.exists(os.path.join(out, JOURNAL_NAME))
    held = _count_held(monkeypatch)
    result = shardkit.build(src, out, options=options)
    # Most tasks were finished by the first run: the resumed driver reads each record
    # back when it needs it and holds none of them (the old driver held every one).
    assert held["resumed"] >= ITEMS // shape["max_count"] - 4, held
    assert held["loaded"] <= 2, held
    assert held["manifest"] <= 2, held
    assert result.resumed_tasks == held["resumed"] and result.samples == ITEMS
    fresh = str(tmp_path / "fresh")
    shardkit.build(src, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)  # same bytes, same manifest (but its timing)


def test_a_build_resumed_from_an_object_store_journal_holds_no_record_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_bucket: str
) -> None:
    from shardkit.builder import _journal as journal

    monkeypatch.setattr(journal, "_BATCH", 7, raising=False)  # several batches
    src = make_corpus(str(tmp_path / "src"), count=60, bad=False)
    options = BuildOptions(**{**RESIZED, "max_count": 2})
    out = f"s3://{s3_bucket}/resumed"
    _interrupt(src, out, options, shards=25)
    held = _count_held(monkeypatch)
    result = shardkit.build(src, out, options=options)
    assert held["resumed"] >= 25 and held["loaded"] <= 2 and held["manifest"] <= 2, held
    assert result.samples == 60
    fresh = f"s3://{s3_bucket}/fresh"
    shardkit.build(src, fresh, options=options)
    assert snapshot_s3(out) == snapshot_s3(fresh)


def test_a_journal_with_a_far_task_index_costs_no_memory_per_index() -> None:
    """The journal is not trusted: a record naming task 10**12 is noted in one block of
    :class:`_Finished` (not an 8 TB table)."""
    from shardkit.builder._journal import _Finished

    finished = _Finished()
    finished.put(10**12, 5)
    finished.put(3, 7)
    finished.put(3, 9)  # a later record of the same task replaces the earlier one
    assert len(finished) == 2 and 10**12 in finished and 4 not in finished
    assert list(finished.items()) == [(3, 9), (10**12, 5)]
    assert finished.pop(3) == 9 and 3 not in finished and len(finished) == 1
    with pytest.raises(KeyError):
        finished.pop(3)
    with pytest.raises(ValueError):
        finished.put(-1, 0)


def test_the_streamed_journal_passes_over_a_torn_line_and_a_torn_last_line(
    tmp_path: Path,
) -> None:
    src = make_corpus(str(tmp_path / "src"), count=30, bad=False)
    options = BuildOptions(max_count=3, workers=1)
    out = str(tmp_path / "out")
    _interrupt(src, out, options, shards=5)
    journal = os.path.join(out, JOURNAL_NAME)
    with open(journal, "rb") as f:
        lines = f.read().split(b"\n")
    # a line torn by an earlier kill (ended by the rerun's newline), then a torn last line
    lines.insert(2, lines[2][: len(lines[2]) // 2])
    with open(journal, "wb") as f:
        f.write(b"\n".join(lines).rstrip(b"\n") + b'\n{"task": 9, "parts": [["x')
    result = shardkit.build(src, out, options=options)
    assert result.resumed_tasks >= 5 and result.samples == 30
    fresh = str(tmp_path / "fresh")
    shardkit.build(src, fresh, options=options)
    assert snapshot(out) == snapshot(fresh)


def test_a_journal_cut_short_while_the_resume_reads_it_back_stops_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records are read back from the journal after it was loaded: one that is gone by
    then (the journal was cut short under the lock's back) is a BuildError naming OUT, not
    a traceback or a silently different output."""
    from shardkit.errors import BuildError

    src = make_corpus(str(tmp_path / "src"), count=30, bad=False)
    options = BuildOptions(max_count=3, workers=1)
    out = str(tmp_path / "out")
    _interrupt(src, out, options, shards=5)
    journal = os.path.join(out, JOURNAL_NAME)
    prepare = run._Driver.prepare

    def cutting(self: Any) -> Any:
        done = prepare(self)
        with open(journal, "rb") as f:
            header = f.readline()
        os.truncate(journal, len(header))
        return done

    monkeypatch.setattr(run._Driver, "prepare", cutting)
    with pytest.raises(BuildError, match="journal changed while this build ran") as caught:
        shardkit.build(src, out, options=options)
    assert caught.value.url == out and "\n" not in str(caught.value)
