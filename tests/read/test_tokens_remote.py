"""A token build into s3:// writes the bytes a local build writes, through the build's
store, journal (objects under OUT/.shardkit-build/) and lease (issue 30).

Run through scripts/test-services (as `make test` and .ci/run do)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.scale import s3_bucket, snapshot_local, snapshot_s3
from test_tokens import _golden_corpus

import shardkit

pytest.importorskip("tokenizers")

__all__ = ["s3_bucket"]  # the fixture, found by name


def test_token_build_into_s3_matches_local(s3_bucket: str, tmp_path: Path) -> None:
    docs, tok = _golden_corpus(tmp_path)
    options = shardkit.BuildOptions(tokenizer=tok, max_count=7, workers=2)
    shardkit.build(docs, tmp_path / "local", options=options)
    url = f"s3://{s3_bucket}/tokens"

    def stop_after_two(progress: shardkit.BuildProgress) -> None:
        if progress.shards == 2:
            raise KeyboardInterrupt  # as if killed once two shards are journaled

    with pytest.raises(KeyboardInterrupt):
        shardkit.build(docs, url, options=options, progress=stop_after_two)
    assert any(n.startswith(".shardkit-build/task-") for n in snapshot_s3(url))
    result = shardkit.build(docs, url, options=options)
    assert result.resumed_tasks == 2
    remote, local = snapshot_s3(url), snapshot_local(str(tmp_path / "local"))
    assert {n: d for n, d in remote.items() if n.endswith(".tar")} == {
        n: d for n, d in local.items() if n.endswith(".tar")
    }
    assert sorted(remote) == sorted(local)  # no journal, lease or temporary left
