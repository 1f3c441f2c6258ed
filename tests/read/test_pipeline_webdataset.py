"""A webdataset user's habits: its keyword arguments and stages, and the same output as
webdataset 1.0.2 on the same shards where both mean the same thing."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from helpers.pipeline import keys, write_shards

from shardkit import ConfigError, Dataset, ShardWriter
from shardkit.errors import DecodeError, MissingFieldError

# webdataset 1.0.2 leaves its shard files for the garbage collector to close.
pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(autouse=True)
def _close_webdatasets_files() -> Iterator[None]:
    """Collect webdataset's open files here, where their ResourceWarning is expected,
    not in whichever later test the garbage collector happens to run in."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = str(tmp_path_factory.mktemp("wds"))
    return write_shards(folder, [7, 5, 9], manifest=False)  # 21 samples, s00000..s00020


def _wds(urls: list[str]) -> Any:
    import webdataset as wds

    return wds.WebDataset(urls, shardshuffle=False, empty_check=False)


def _plain(items: list[Any]) -> list[Any]:
    """Batches and tuples as comparable lists (numpy arrays and bytes made plain)."""

    def one(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return x.tolist()
        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, (list, tuple)):
            return [one(v) for v in x]
        if isinstance(x, dict):
            return {k: one(v) for k, v in x.items() if k == "__key__" or not k.startswith("__")}
        return x

    return [one(item) for item in items]


# --------------------------------------------------------------------------- with_epoch


def test_with_epoch_after_batched_counts_batches(urls: list[str]) -> None:
    """A migrated ``.batched(4).with_epoch(6)`` runs 6 steps per epoch, as webdataset's."""
    ds = Dataset(urls).to_tuple("__key__", "cls").batched(4).with_epoch(6)
    batches = list(ds)
    assert len(batches) == len(ds) == 6
    assert all(len(k) == 4 for k, _ in batches)
    ours = _plain(list(Dataset(urls).to_tuple("__key__", "cls").batched(4).with_epoch(6)))
    theirs = _plain(list(_wds(urls).to_tuple("__key__", "cls").batched(4).with_epoch(6)))
    # one stream, no shuffle: the same batches through the first pass over the shards;
    # then webdataset restarts its pipeline (a short batch), shardkit reads on (full ones)
    assert ours[:5] == theirs[:5] and len(theirs[5][0]) == 1 and len(ours[5][0]) == 4
    # before .batched(): samples, then batches of them
    samples_first = Dataset(urls).with_epoch(10).batched(4)
    assert len(samples_first) == 3 and len(list(samples_first)) == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_with_epoch_batches_per_rank_do_not_depend_on_workers(
    urls: list[str], workers: int
) -> None:
    from torch.utils.data import DataLoader

    for rank in range(2):
        ds = Dataset(urls, node=(rank, 2)).shuffle(3).to_tuple("__key__").batched(4)
        ds = ds.with_epoch(5)
        loader: DataLoader[Any] = DataLoader(
            ds, batch_size=None, num_workers=workers, multiprocessing_context="fork"
        )
        batches = list(loader)
        assert len(batches) == len(ds) == 5
        assert all(len(keys) == 4 for (keys,) in batches)


def test_with_epoch_webdataset_spellings(urls: list[str]) -> None:
    assert len(list(Dataset(urls).with_epoch(nsamples=8))) == 8
    assert len(list(Dataset(urls).batched(2).with_epoch(nbatches=3))) == 3
    with pytest.raises(ConfigError, match="once"):
        Dataset(urls).with_epoch(3).batched(2).with_epoch(4)
    with pytest.raises(ConfigError, match="one of"):
        Dataset(urls).with_epoch(3, nsamples=4)


# --------------------------------------------------------------------------- map_dict


def test_map_dict_on_a_missing_field_is_a_key_error(urls: list[str]) -> None:
    ds = Dataset(urls).decode().map_dict(nope=str)
    with pytest.raises(KeyError) as caught:
        next(iter(ds))
    assert isinstance(caught.value, MissingFieldError) and "nope" in str(caught.value)
    with pytest.raises(KeyError):  # webdataset does the same
        next(iter(_wds(urls).decode().map_dict(nope=str)))
    with pytest.raises(ConfigError, match="no sample has a field 'nope'"):  # a typo
        list(Dataset(urls, handler="ignore").map_dict(nope=str))
    mapped = list(Dataset(urls).decode().map_dict(cls=lambda c: c * 10).to_tuple("cls"))
    assert [c for (c,) in mapped] == [i * 10 for i in range(21)]


# --------------------------------------------------------------------------- keywords


def test_dataset_keywords_of_webdataset(urls: list[str]) -> None:
    in_order = [f"s{i:05d}" for i in range(21)]
    assert keys(list(Dataset(urls, shardshuffle=False))) == in_order
    shuffled = keys(list(Dataset(urls, shardshuffle=100, seed=3)))
    assert shuffled != in_order and sorted(shuffled) == in_order
    import webdataset as wds

    split = Dataset(urls, nodesplitter=wds.split_by_node, workersplitter=wds.split_by_worker)
    assert keys(list(split)) == in_order
    everyone = Dataset(urls, nodesplitter=None, node=(1, 2))  # every node reads everything
    assert keys(list(everyone)) == in_order
    endless = Dataset(urls, resampled=True).with_epoch(50)
    assert len(keys(list(endless))) == len(endless) == 50
    assert keys(list(Dataset(urls, empty_check=False, detshuffle=True))) == in_order
    defaults = {"cache_size": -1, "select_files": None, "mode": None, "verbose": False}
    assert keys(list(Dataset(urls, **defaults))) == in_order  # webdataset's own defaults
    assert keys(list(Dataset(urls, seed=None).shuffle(5))) == keys(list(Dataset(urls).shuffle(5)))


def test_empty_check(tmp_path: os.PathLike[str]) -> None:
    urls = write_shards(str(tmp_path), [3], manifest=False)
    with pytest.raises(ConfigError, match="no samples in the stream of rank 1"):
        list(Dataset(urls, node=(1, 2), empty_check=True))
    assert list(Dataset(urls, node=(1, 2), empty_check=False)) == []


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda u: Dataset(u, cache_size=10), "cache_size"),
        (lambda u: Dataset(u, select_files=bool), "select_files"),
        (lambda u: Dataset(u, nodesplitter=lambda s: s), "node=\\(rank, world_size\\)"),
        (lambda u: Dataset(u, workersplitter=None), "splits by DataLoader workers"),
        (lambda u: Dataset(u, shardshuffle=10, shuffle_shards=False), "not both"),
        (lambda u: Dataset(u, typo=1), "no typo= argument"),
        (lambda u: Dataset(u).shuffle(10, rng=None), "rng= argument: shardkit seeds"),
        (lambda u: Dataset(u).shuffle(10, handler=None), "takes size, initial= and seed="),
        (lambda u: Dataset(u).decode(pre=None), "pre"),
        (lambda u: Dataset(u).batched(4, batchsize=8), "one of"),
        (lambda u: Dataset(u).batched(), "batch size"),
        (lambda u: Dataset(u).repeat(2, 5), "not both"),
        (lambda u: Dataset(u).slice(1, 2, 0), "step"),
    ],
)
def test_webdataset_keywords_without_a_shardkit_feature_name_the_way(
    urls: list[str], make: Any, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        make(urls)


def test_batched_keywords(urls: list[str]) -> None:
    def collation_fn(items: list[Any]) -> list[str]:
        return [item["__key__"] for item in items]

    batches = list(Dataset(urls).batched(batchsize=8, collation_fn=collation_fn))
    assert batches[0] == [f"s{i:05d}" for i in range(8)] and len(batches) == 3
    theirs = list(_wds(urls).batched(8, collation_fn=collation_fn))
    assert batches == theirs == list(Dataset(urls).batched(8, collation_fn))


def test_shuffle_initial_and_seed(urls: list[str]) -> None:
    base = keys(list(Dataset(urls).shuffle(10)))
    early = keys(list(Dataset(urls).shuffle(10, initial=2)))
    seeded = keys(list(Dataset(urls).shuffle(10, seed=5)))
    assert sorted(early) == sorted(seeded) == sorted(base)
    assert len({tuple(base), tuple(early), tuple(seeded)}) == 3
    assert keys(list(Dataset(urls).shuffle(10, seed=5))) == seeded  # deterministic
    # initial=2: the first sample out can only be one of the first three read
    assert all(
        keys(list(Dataset(urls, seed=s, shuffle_shards=False).shuffle(10, initial=2)))[0]
        in {"s00000", "s00001"}
        for s in range(10)
    )


def test_to_tuple_missing_and_none(urls: list[str]) -> None:
    ours = list(Dataset(urls).to_tuple("__key__", "nope", missing_is_error=False))
    theirs = list(_wds(urls).to_tuple("__key__", "nope", missing_is_error=False))
    assert ours == theirs and ours[0] == ("s00000", None)
    with pytest.raises(MissingFieldError):
        list(Dataset(urls).to_tuple("__key__", "nope"))
    with pytest.raises(ValueError, match="None"):
        list(Dataset(urls).to_tuple("nope", missing_is_error=False, none_is_error=True))
    nulls = Dataset(urls).decode().map_dict(txt=lambda _: None)
    assert next(iter(nulls.to_tuple("__key__", "txt"))) == ("s00000", None)
    with pytest.raises(ValueError, match="field 'txt' is None"):
        next(iter(nulls.to_tuple("__key__", "txt", none_is_error=True)))


def _every_other_txt_fails(ext: str, data: bytes) -> Any:
    if ext == "txt" and int(data.split()[-1]) % 2:
        raise ValueError("not my format")
    return None


@pytest.mark.parametrize("threads", [1, 3])
def test_a_custom_decoders_error_is_a_decode_error_as_webdataset_wraps_it(
    urls: list[str], threads: int
) -> None:
    # Regression (issue 28, webdataset's suite): the ValueError came out as it was, so
    # the dataset's handler= never saw it; webdataset raises DecodingError from it.
    with pytest.raises(DecodeError, match="ValueError: not my format") as info:
        list(Dataset(urls).decode(_every_other_txt_fails, threads=threads))
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.key == "s00001" and info.value.url == urls[0]
    kept = Dataset(urls, handler="ignore").decode(_every_other_txt_fails, threads=threads)
    assert keys(list(kept)) == [f"s{i:05d}" for i in range(0, 21, 2)]


def test_decode_partial(urls: list[str]) -> None:
    decoded = Dataset(urls).decode().map_dict(txt=str.upper)
    assert next(iter(decoded.decode()))["txt"] == "TEXT 0"  # partial=True: passes through
    with pytest.raises(TypeError, match="decoded already"):
        next(iter(decoded.decode(partial=False)))


# --------------------------------------------------------------------------- stages


def test_unbatched_slice_repeat_match_webdataset(urls: list[str]) -> None:
    def ours_and_theirs(build: Any) -> tuple[list[Any], list[Any]]:
        return _plain(list(build(Dataset(urls)))), _plain(list(build(_wds(urls))))

    for build in (
        lambda d: d.to_tuple("__key__", "cls").batched(4).unbatched(),
        lambda d: d.slice(5),
        lambda d: d.slice(2, 17, 3),
        lambda d: d.decode().to_tuple("__key__", "cls").slice(4, 10),
        lambda d: d.to_tuple("__key__").batched(5).slice(1, 3),
    ):
        ours, theirs = ours_and_theirs(build)
        assert ours == theirs and ours
    ours = keys(list(Dataset(urls).repeat(2)))
    theirs = keys(list(_wds(urls).repeat(2)))
    assert ours == theirs and len(ours) == 42


def test_repeat_and_with_length(tmp_path: os.PathLike[str], urls: list[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [5, 6])
    assert len(Dataset(folder).repeat(3)) == 33 == len(list(Dataset(folder).repeat(3)))
    assert len(Dataset(folder).repeat(nbatches=7)) == 7 == len(list(Dataset(folder).repeat(-1, 7)))
    with pytest.raises(TypeError, match="endless"):
        len(Dataset(folder).repeat())
    sized = Dataset(urls).with_length(100)
    assert len(sized) == 100 and len(list(sized)) == 21  # only len() changes, as webdataset
    with pytest.raises(TypeError, match="with_length"):
        len(Dataset(folder).slice(3))
    assert len(Dataset(folder).slice(3).with_length(3)) == 3


def test_shard_writer_keywords(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "s-%06d.tar")
    with ShardWriter(pattern, maxcount=2, maxsize=1e9) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i}", "txt": "x"})
    assert [s.samples for s in sink.shards] == [2, 2, 1]
    with pytest.raises(ConfigError, match="one of"):
        ShardWriter(pattern, maxcount=2, max_count=3)
    with pytest.raises(ConfigError, match="no keep= argument"):
        ShardWriter(pattern, keep=True)


@pytest.mark.parametrize("stage", ["to_tuple", "rename"])
def test_missing_fields_after_a_cut_pipe_raise_as_in_webdataset(
    tmp_path: os.PathLike[str], stage: str
) -> None:
    # webdataset hands on the sample the cut leaves partial (k0 with its cls only) and its
    # to_tuple / rename raise on the missing fields; shardkit withholds that sample but
    # counts its whole fields when it checks for fields no sample has.
    with ShardWriter(os.path.join(str(tmp_path), "big-%06d.tgz"), index=False) as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", "cls": i, "bin": os.urandom(30000)})
    url = os.path.join(str(tmp_path), "big-000000.tgz")
    ds = Dataset(f"pipe:dd if={url} bs=1024 count=10 2>/dev/null", handler="ignore_and_stop")
    assert list(ds) == []  # the cut sample is never handed out
    named = ds.to_tuple("foo", "bar") if stage == "to_tuple" else ds.rename(x="foo", y="bar")
    with pytest.raises(
        ValueError, match=r"no sample has a field 'foo'.* fields cls \(a sample cut"
    ):
        list(named)
    # a field the cut sample had whole: nothing to hand out, nothing wrong
    had = ds.to_tuple("cls") if stage == "to_tuple" else ds.rename(x="cls")
    assert list(had) == []
    # after a stage that may rename fields, the reader's fields say nothing
    mapped = ds.map(dict)
    mapped = mapped.to_tuple("foo") if stage == "to_tuple" else mapped.rename(x="foo")
    assert list(mapped) == []
