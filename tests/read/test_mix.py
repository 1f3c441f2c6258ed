"""shardkit.mix: weighted draws from several datasets, as one Dataset."""

from __future__ import annotations

import collections
import os
from typing import Any

import pytest
from helpers.pipeline import write_shards

import shardkit
from shardkit.errors import ConfigError
from shardkit.pipeline._mixing import apportion


def tag(prefix: bytes) -> Any:
    return lambda text: prefix + text


@pytest.fixture
def sources(tmp_path: os.PathLike[str]) -> tuple[shardkit.Dataset, shardkit.Dataset]:
    write_shards(os.path.join(tmp_path, "a"), [10, 10, 10])  # 30 samples
    write_shards(os.path.join(tmp_path, "b"), [4, 6])  # 10 samples
    a = shardkit.Dataset(os.path.join(tmp_path, "a"), seed=1).shuffle(5).map_dict(txt=tag(b"A"))
    b = shardkit.Dataset(os.path.join(tmp_path, "b"), seed=2).shuffle(5).map_dict(txt=tag(b"B"))
    return a, b


def origin(items: list[dict[str, Any]]) -> collections.Counter[bytes]:
    return collections.Counter(item["txt"][:1] for item in items)


def texts(items: list[Any]) -> list[bytes]:
    return [item["txt"] for item in items]


def test_apportion_sums_and_follows_the_weights() -> None:
    from fractions import Fraction

    assert apportion(10, [Fraction(1)] * 3) == [4, 3, 3]
    assert apportion(7, [Fraction(5), Fraction(2)]) == [5, 2]
    assert apportion(0, [Fraction(1), Fraction(9)]) == [0, 0]
    assert sum(apportion(101, [Fraction(0.3), Fraction(0.7)])) == 101


def test_an_epoch_reads_the_scarcest_source_once_in_exact_proportions(
    sources: tuple[shardkit.Dataset, shardkit.Dataset],
) -> None:
    a, b = sources
    mixed = shardkit.mix([a, b], weights=[3, 1], seed=0)
    assert len(mixed) == 40  # min(30 / 0.75, 10 / 0.25)
    items = list(mixed)
    assert origin(items) == {b"A": 30, b"B": 10}
    assert sorted(texts(items)) == sorted(texts(list(a)) + texts(list(b)))  # each once
    equal = shardkit.mix([a, b], seed=0)
    assert len(equal) == 20 and origin(list(equal)) == {b"A": 10, b"B": 10}


def test_draws_are_seeded_per_epoch_and_interleaved(
    sources: tuple[shardkit.Dataset, shardkit.Dataset],
) -> None:
    a, b = sources
    first = texts(list(shardkit.mix([a, b], seed=3)))
    assert first == texts(list(shardkit.mix([a, b], seed=3)))
    assert first != texts(list(shardkit.mix([a, b], seed=4)))
    again = shardkit.mix([a, b], seed=3)
    again.set_epoch(1)
    assert texts(list(again)) != first
    pattern = "".join(t[:1].decode() for t in first)
    assert "AB" in pattern and "BA" in pattern  # not one source after the other


def test_with_epoch_rereads_a_short_source(
    sources: tuple[shardkit.Dataset, shardkit.Dataset],
) -> None:
    a, b = sources
    mixed = shardkit.mix([a, b], weights=[1, 1], seed=0).with_epoch(50)
    items = list(mixed)
    assert len(mixed) == len(items) == 50
    from_b = [t for t in texts(items) if t.startswith(b"B")]
    assert len(from_b) == 25
    counts = collections.Counter(from_b)
    assert set(counts) == {b"Btext %d" % i for i in range(10)}  # every sample, then again
    assert from_b[10:20] != from_b[:10]  # the second pass is in a new order


@pytest.mark.parametrize("workers", [1, 3])
def test_ranks_and_workers_get_equal_exact_shares(
    sources: tuple[shardkit.Dataset, shardkit.Dataset],
    workers: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardkit.pipeline import _context as context

    a, b = sources
    everything: list[bytes] = []
    for rank in range(2):
        mixed = shardkit.mix([a, b], weights=[3, 1], seed=5, node=(rank, 2))
        got: list[dict[str, Any]] = []
        for worker in range(workers):
            monkeypatch.setattr(context, "current_worker", lambda w=worker: (w, workers))
            monkeypatch.setattr("shardkit.pipeline._dataset.current_worker", context.current_worker)
            mixed.set_epoch(0)
            got.extend(mixed)
        assert len(got) == len(mixed) == 20
        assert origin(got) == {b"A": 15, b"B": 5}
        everything.extend(texts(got))
    assert len(set(everything)) == 40  # the two ranks split every source


def test_dataloader_with_workers_yields_len_batches(
    sources: tuple[shardkit.Dataset, shardkit.Dataset],
) -> None:
    from torch.utils.data import DataLoader

    a, b = sources
    mixed = shardkit.mix([a, b], weights=[3, 1]).to_tuple("txt").batched(4, collate=None)
    loader = DataLoader(mixed, batch_size=None, num_workers=2)
    batches = list(loader)
    assert len(batches) == len(mixed) == 10
    assert sorted(t for batch in batches for (t,) in batch) == sorted(
        texts(list(shardkit.mix([a, b], weights=[3, 1])))
    )


@pytest.mark.parametrize("shuffle", [0, 7])
def test_state_dict_resumes_mid_epoch_exactly(
    sources: tuple[shardkit.Dataset, shardkit.Dataset], shuffle: int
) -> None:
    a, b = sources

    def make() -> shardkit.MixedDataset:
        mixed = shardkit.mix([a, b], weights=[2, 1], seed=9).with_epoch(33)
        return mixed.shuffle(shuffle) if shuffle else mixed

    whole = texts(list(make()))
    for stop in (0, 1, 10, 21, 32, 33):
        run = make()
        it = iter(run)
        head = [next(it) for _ in range(stop)]
        state = run.state_dict()
        resumed = make()
        resumed.load_state_dict(state)
        assert texts(head) + texts(list(resumed)) == whole, stop


def test_a_resume_does_not_read_what_it_skips(
    sources: tuple[shardkit.Dataset, shardkit.Dataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardkit.pipeline import _source as source_module

    a, b = sources
    plain_a = shardkit.Dataset(a.shards.urls[0].rsplit("/", 1)[0])
    plain_b = shardkit.Dataset(b.shards.urls[0].rsplit("/", 1)[0])
    run = shardkit.mix([plain_a, plain_b], seed=1)
    it = iter(run)
    for _ in range(18):
        next(it)
    state = run.state_dict()
    opened: list[str] = []
    real = source_module.open_samples
    monkeypatch.setattr(
        source_module, "open_samples", lambda url, options: opened.append(url) or real(url, options)
    )
    resumed = shardkit.mix([plain_a, plain_b], seed=1)
    resumed.load_state_dict(state)
    assert len(list(resumed)) == 2
    assert len(opened) <= 2  # one shard of each source at most, not the 5 before


def test_bad_mixes_are_refused(sources: tuple[shardkit.Dataset, shardkit.Dataset]) -> None:
    a, b = sources
    with pytest.raises(ConfigError, match="one weight per dataset"):
        shardkit.mix([a, b], weights=[1])
    with pytest.raises(ConfigError, match="finite and > 0"):
        shardkit.mix([a, b], weights=[1, -1])
    with pytest.raises(ConfigError, match=r"may not \.batched\(\)"):
        shardkit.mix([a.batched(2), b])
    with pytest.raises(TypeError, match=r"list of shardkit\.Dataset"):
        shardkit.mix([])
    no_counts = shardkit.Dataset(list(a.shards.urls))
    with pytest.raises(TypeError, match="epoch of a mix is unknown"):
        len(shardkit.mix([no_counts, b]))
    with pytest.raises(ConfigError, match="epoch of a mix is unknown"):
        list(shardkit.mix([no_counts, b]))
    assert len(list(shardkit.mix([no_counts, b]).with_epoch(12))) == 12
