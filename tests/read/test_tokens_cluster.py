"""Token builds on a Ray and a Dask cluster write the bytes a local build writes (issue 30).

Run through scripts/cluster-services (as `make test` and .ci/run do)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.scale import address_of, snapshot_local

import shardkit

tokenizers = pytest.importorskip("tokenizers")


@pytest.mark.parametrize("engine", ["ray", "dask"])
def test_cluster_token_build_identical_to_local(engine: str, tmp_path: Path) -> None:
    texts = [f"alpha beta gamma {i} " * (i % 50 + 1) for i in range(600)]
    texts[7] = ""  # skipped, listed
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, tokenizers.trainers.BpeTrainer(vocab_size=120))
    tok.save(str(tmp_path / "tok.json"))
    with open(tmp_path / "docs.jsonl", "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    docs, tokenizer = str(tmp_path / "docs.jsonl"), str(tmp_path / "tok.json")
    local = shardkit.BuildOptions(tokenizer=tokenizer, max_count=100, workers=1)
    shardkit.build(docs, tmp_path / "local", options=local)
    remote = shardkit.BuildOptions(
        tokenizer=tokenizer, max_count=100, workers=2, engine=engine, address=address_of(engine)
    )  # type: ignore[arg-type]
    result = shardkit.build(docs, tmp_path / "cluster", options=remote)
    assert len(result.shards) == 6 and [r for _, r in result.skipped] == ["empty text"]
    assert snapshot_local(str(tmp_path / "cluster")) == snapshot_local(str(tmp_path / "local"))
