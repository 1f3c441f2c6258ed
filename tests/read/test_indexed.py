"""IndexedDataset: random access through .idx files, and Dataset counts from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.pipeline import keys, write_shards

import shardkit
from shardkit.errors import ConfigError, FormatError
from shardkit.formats.limits import MAX_MEMBER_SIZE
from shardkit.tools.index import write_indexes

COUNTS = [5, 7, 0, 3]


@pytest.fixture
def indexed(tmp_path: os.PathLike[str]) -> str:
    folder = os.path.join(tmp_path, "ds")
    write_indexes(write_shards(folder, COUNTS, manifest=False))
    return folder


def edit_index(shard_path: str, /, **changes: object) -> None:
    path = shard_path + ".idx"
    with open(path) as f:
        doc = json.load(f)
    for name, value in changes.items():
        if callable(value):
            doc[name] = value(doc[name])
        else:
            doc[name] = value
    with open(path, "w") as f:
        json.dump(doc, f)


def test_every_sample_by_number_matches_the_stream(indexed: str) -> None:
    ds = shardkit.IndexedDataset(indexed)
    stream = list(shardkit.Dataset(indexed, shuffle_shards=False))
    assert len(ds) == sum(COUNTS) == len(stream)
    got = [ds[i] for i in range(len(ds))]
    assert got == stream
    assert ds[-1] == stream[-1]
    with pytest.raises(IndexError):
        ds[len(ds)]
    assert ds.locate(6) == (os.path.join(indexed, "shard-000001.tar"), 1)


def test_stages_are_the_datasets(indexed: str) -> None:
    ds = (
        shardkit.IndexedDataset(indexed)
        .decode()
        .rename(label="cls")
        .to_tuple("label", "txt")
        .map_tuple(lambda c: c * 10, None)
    )
    stream = (
        shardkit.Dataset(indexed, shuffle_shards=False)
        .decode()
        .rename(label="cls")
        .to_tuple("label", "txt")
        .map_tuple(lambda c: c * 10, None)
    )
    assert [ds[i] for i in range(len(ds))] == list(stream)
    assert ds[3] == (30, "text 3")


def test_no_torch_import_and_a_torch_dataset_once_imported(indexed: str) -> None:
    code = (
        "import sys, shardkit\n"
        f"ds = shardkit.IndexedDataset({indexed!r})\n"
        "n = len(ds); ds[0]\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "import torch.utils.data as tud\n"
        "assert isinstance(ds, tud.Dataset)\n"
        "assert isinstance(shardkit.IndexedDataset(" + repr(indexed) + ").decode(), tud.Dataset)\n"
        "print(n)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(sum(COUNTS))


def test_distributed_sampler_and_workers_cover_every_sample_once(indexed: str) -> None:
    from torch.utils.data import DataLoader, DistributedSampler

    ds = shardkit.IndexedDataset(indexed).decode().to_tuple("__key__", "cls")
    seen: list[str] = []
    for rank in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=True, seed=4)
        loader = DataLoader(ds, batch_size=2, sampler=sampler, num_workers=2)
        batches = list(loader)
        seen.extend(k for batch_keys, _ in batches for k in batch_keys)
        assert sum(len(k) for k, _ in batches) == len(sampler) == 5
    assert sorted(set(seen)) == [f"s{i:05d}" for i in range(sum(COUNTS))]
    assert len(seen) == 15  # 15 samples, 3 ranks: no padding


def test_a_missing_index_is_named(indexed: str) -> None:
    os.unlink(os.path.join(indexed, "shard-000001.tar.idx"))
    with pytest.raises(ConfigError, match=r"shard-000001\.tar has no index .*shardkit index"):
        len(shardkit.IndexedDataset(indexed))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"offsets": lambda o: [o[0], 1 << 40, *o[2:]]}, r"entry 1 .* outside the shard"),
        ({"offsets": lambda o: [-512, *o[1:]]}, r"entry 0 .* outside the shard"),
        ({"sizes": lambda s: [0, *s[1:]]}, r"entry 0 .* outside the shard"),
        ({"sizes": lambda s: [MAX_MEMBER_SIZE + 1, *s[1:]], "bytes": 1 << 40}, "over the reader"),
        ({"bytes": "many"}, "bad index: shard size"),
        ({"shard": "other.tar"}, "index of another shard"),
        ({"keys": lambda k: k[:-1]}, "differ in length"),
    ],
)
def test_a_hostile_index_is_one_format_error_naming_it(
    indexed: str, changes: dict[str, object], message: str
) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    edit_index(shard, **changes)
    with pytest.raises(FormatError, match=message) as info:
        len(shardkit.IndexedDataset(indexed))
    assert "shard-000000.tar.idx" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_stale_index_is_refused_before_reading(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000001.tar")
    ds = shardkit.IndexedDataset(indexed)
    assert len(ds) == 15
    with open(shard, "ab") as f:
        f.write(bytes(10240))
    with pytest.raises(FormatError, match=r"shard-000001\.tar\.idx: stale index"):
        ds[6]
    with pytest.raises(FormatError, match="stale index"):
        len(shardkit.Dataset(indexed))  # counts from a stale index are not trusted either


def test_an_index_pointing_at_another_sample_is_caught(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    edit_index(shard, keys=lambda k: [k[1], k[0], *k[2:]])
    with pytest.raises(FormatError, match="the index says sample 's00001'"):
        shardkit.IndexedDataset(indexed)[0]


def test_bad_data_goes_to_the_handler_and_the_next_sample_stands_in(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    with open(shard + ".idx") as f:
        offset = json.load(f)["offsets"][2]
    with open(shard, "r+b") as f:  # break the header checksum of sample 2
        f.seek(offset + 148)
        f.write(b"99999999")
    with pytest.raises(FormatError, match="checksum"):
        shardkit.IndexedDataset(indexed)[2]
    reported: list[Exception] = []
    ds = shardkit.IndexedDataset(indexed, handler=lambda exc: reported.append(exc) or True)
    assert ds[2]["__key__"] == "s00003"
    assert ds[1]["__key__"] == "s00001"
    assert len(reported) == 1 and "shard-000000.tar" in str(reported[0])


def test_a_gzipped_shard_is_refused(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "gz")
    write_indexes(write_shards(folder, [3], ext="tar.gz", manifest=False))
    with pytest.raises(FormatError, match="uncompressed"):
        len(shardkit.IndexedDataset(folder))


def test_pickles_small_and_reads_after_unpickling(indexed: str) -> None:
    import pickle

    ds = shardkit.IndexedDataset(indexed).decode()
    ds[0]  # opens a handle: it must not travel
    copy = pickle.loads(pickle.dumps(ds))
    assert [copy[i] for i in range(len(copy))] == [ds[i] for i in range(len(ds))]


def test_tfrecord_shards(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "tfr")
    write_indexes(write_shards(folder, [4, 2], ext="tfrecord", manifest=False))
    ds = shardkit.IndexedDataset(folder)
    stream = list(shardkit.Dataset(folder, shuffle_shards=False))
    assert [ds[i] for i in range(len(ds))] == stream
    assert keys([ds[5]]) == keys(stream[5:])


def test_many_shards_through_a_small_handle_pool(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "many")
    write_indexes(write_shards(folder, [2] * 9, manifest=False))
    ds = shardkit.IndexedDataset(folder, max_open=2)
    order = [17, 0, 9, 3, 16, 1, 12, 5, 8]
    assert keys([ds[i] for i in order]) == [f"s{i:05d}" for i in order]
    assert len(ds._ranges._open) == 2


def test_options_are_checked_at_once(indexed: str) -> None:
    with pytest.raises(ValueError, match="max_open"):
        shardkit.IndexedDataset(indexed, max_open=0)
    with pytest.raises(TypeError):
        shardkit.IndexedDataset(indexed)["a"]  # type: ignore[index]


def test_gzipped_shards_give_dataset_counts(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "gz")
    write_indexes(write_shards(folder, [3, 4], ext="tar.gz", manifest=False))
    assert len(shardkit.Dataset(folder)) == 7


def test_webdataset_shards_in_place_after_shardkit_index(tmp_path: os.PathLike[str]) -> None:
    import webdataset as wds

    from shardkit.cli import main

    folder = os.path.join(tmp_path, "wds")
    os.makedirs(folder)
    with wds.ShardWriter(os.path.join(folder, "part-%06d.tar"), maxcount=7, verbose=0) as sink:
        for i in range(23):
            sink.write({"__key__": f"k{i:04d}", "cls": str(i).encode(), "txt": b"x" * i})
    before = sorted(os.listdir(folder))
    with pytest.raises(TypeError, match="len"):
        len(shardkit.Dataset(folder))
    assert main(["index", folder]) == 0
    added = sorted(set(os.listdir(folder)) - set(before))
    assert added == [name + ".idx" for name in before]  # metadata only, nothing copied

    assert len(shardkit.Dataset(folder)) == 23
    per_rank = []
    for rank in range(3):
        ds = shardkit.Dataset(folder, node=(rank, 3), seed=5).shuffle(4)
        items = keys(list(ds))
        assert len(items) == len(ds) == 8  # ceil(23 / 3): equal epochs per rank
        per_rank.append(items)
    assert {k for items in per_rank for k in items} == {f"k{i:04d}" for i in range(23)}

    indexed = shardkit.IndexedDataset(folder)
    assert len(indexed) == 23
    assert indexed[20]["txt"] == b"x" * 20
    assert [indexed[i]["__key__"] for i in range(23)] == [f"k{i:04d}" for i in range(23)]


def test_build_writes_indexes_on_request(tmp_path: os.PathLike[str]) -> None:
    from helpers.build import make_corpus

    from shardkit.cli import main

    source = make_corpus(os.path.join(tmp_path, "src"), count=12)
    plain, indexed = os.path.join(tmp_path, "plain"), os.path.join(tmp_path, "indexed")
    common = ["--max-count", "5", "--workers", "1", "-q"]
    assert main(["build", source, plain, "--no-index", *common]) == 0
    assert main(["build", source, indexed, "--index", *common]) == 0
    names = sorted(n for n in os.listdir(indexed) if n.endswith(".tar"))
    listed = sorted(n for n in os.listdir(indexed) if n != "skipped.jsonl")  # the bad files
    assert listed == sorted(["manifest.json", *names, *(n + ".idx" for n in names)])
    assert not any(n.endswith(".idx") for n in os.listdir(plain))
    for name in names:  # the same shard bytes, and the same manifest but for its timing
        a, b = (os.path.join(folder, name) for folder in (plain, indexed))
        with open(a, "rb") as f, open(b, "rb") as g:
            assert f.read() == g.read()
    manifests = []
    for folder in (plain, indexed):
        with open(os.path.join(folder, "manifest.json")) as f:
            manifests.append({k: v for k, v in json.load(f).items() if k != "timing"})
    assert manifests[0] == manifests[1]
    ds = shardkit.IndexedDataset(indexed)
    assert len(ds) == 12
    assert [ds[i] for i in range(12)] == list(shardkit.Dataset(indexed, shuffle_shards=False))


def test_a_handle_let_go_by_the_pool_stays_valid_for_its_reader(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "pool")
    urls = write_shards(folder, [2, 2, 2], manifest=False)
    write_indexes(urls)
    ds = shardkit.IndexedDataset(folder, max_open=1)
    ranges = ds._ranges
    held = ranges._handle(urls[0])  # as a thread in the middle of a read holds it
    ds[3], ds[5]  # the pool moves on to the other shards
    assert urls[0] not in ranges._open
    assert held.read(0, 512)[:6] == b"s00000"  # its file is still open
    fd = held.fd
    del held
    with pytest.raises(OSError):
        os.fstat(fd)  # closed once nobody holds it


def test_spawned_dataloader_workers_open_their_own_handles(indexed: str) -> None:
    from torch.utils.data import DataLoader

    ds = shardkit.IndexedDataset(indexed).decode().to_tuple("__key__")
    ds[0]  # this process has a handle open: it must not travel
    loader = DataLoader(
        ds, batch_size=4, num_workers=1, multiprocessing_context="spawn", collate_fn=list
    )
    got = [key for batch in loader for (key,) in batch]
    assert got == [f"s{i:05d}" for i in range(sum(COUNTS))]
