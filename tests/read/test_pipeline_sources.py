from __future__ import annotations

import gzip
import os
import shutil

import pytest
from helpers.pipeline import keys, write_shards

from shardkit import ConfigError, Dataset
from shardkit.formats.names import is_shard_name
from shardkit.pipeline import ShardList, resolve_source
from shardkit.pipeline._urls import parse_manifest


def test_brace_pattern_and_url_list(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, [3, 4, 5], manifest=False)
    pattern = os.path.join(folder, "shard-{000000..000002}.tar")
    assert resolve_source(pattern).urls == tuple(urls)
    assert resolve_source(pattern).counts is None
    assert keys(list(Dataset(pattern))) == [f"s{i:05d}" for i in range(12)]
    reverse = [*range(7, 12), *range(3, 7), *range(3)]
    assert keys(list(Dataset(urls[::-1]))) == [f"s{i:05d}" for i in reverse]
    alternatives = os.path.join(folder, "shard-00000{0,2}.tar")
    assert resolve_source(alternatives).urls == (urls[0], urls[2])


def test_folder_with_and_without_manifest(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(str(tmp_path), "data")
    write_shards(folder, [2, 3], manifest=False)
    open(os.path.join(folder, "notes.txt"), "w").close()
    listed = resolve_source(folder)
    assert [os.path.basename(u) for u in listed.urls] == ["shard-000000.tar", "shard-000001.tar"]
    assert listed.counts is None
    write_shards(folder, [2, 3])
    with_manifest = resolve_source(folder)
    assert with_manifest.counts == (2, 3)
    assert len(Dataset(folder)) == 5
    with pytest.raises(ConfigError, match="no shards"):
        resolve_source(str(tmp_path))


def test_manifest_forms(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [4, 1])
    manifest = os.path.join(folder, "manifest.json")
    shards = resolve_source(manifest)
    assert shards.urls == tuple(os.path.join(folder, f"shard-00000{i}.tar") for i in range(2))
    assert shards.counts == (4, 1) and shards.total == 5
    assert keys(list(Dataset(manifest))) == [f"s{i:05d}" for i in range(5)]
    wds = parse_manifest({"shardlist": [{"url": "http://h/a.tar", "nsamples": 7}]}, base="x")
    assert wds == ShardList(("http://h/a.tar",), (7,))
    partial = parse_manifest({"shards": [{"name": "a.tar", "samples": 1}, {"path": "b.tar"}]})
    assert partial.urls == ("a.tar", "b.tar") and partial.counts is None
    assert parse_manifest(["a.tar"], base="s3://b/d").urls == ("s3://b/d/a.tar",)


@pytest.mark.parametrize(
    "document, message",
    [
        ({"shards": []}, "non-empty"),
        ({"shards": [{"samples": 3}]}, "no 'url'"),
        ({"shards": [{"url": "a.tar", "samples": -1}]}, "bad sample count"),
        ({"shards": [3]}, "neither"),
    ],
)
def test_bad_manifests(document: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_manifest(document)


def test_manifest_that_is_not_json(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "manifest.json")
    with open(path, "w") as f:
        f.write("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Dataset(path).shards  # noqa: B018


def test_shard_names() -> None:
    assert all(map(is_shard_name, ["a.tar", "a.tar.gz", "a.tgz", "b.tfrecord", "c.tfr.gz"]))
    assert not any(map(is_shard_name, ["a.txt", ".a.tar.tmp-1", ".hidden.tar", "m.json"]))


def test_tfrecord_shards_give_feature_dicts(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [3, 2], ext="tfrecord")
    items = list(Dataset(folder))
    assert keys(items) == [f"s{i:05d}" for i in range(5)]
    assert items[4]["cls"] == 4 and items[4]["txt"] == b"text 4"  # int64 and bytes features
    decoded = list(Dataset(folder).decode().to_tuple("__key__", "cls", "txt"))
    assert decoded[1] == ("s00001", 1, "text 1")


def test_gzipped_shards_by_name_and_by_magic(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [3], ext="tar.gz", manifest=False)
    plain = os.path.join(folder, "shard-000000.tar")
    with gzip.open(os.path.join(folder, "shard-000000.tar.gz"), "rb") as src:
        data = src.read()
    renamed = os.path.join(folder, "renamed.tar")
    shutil.copy(os.path.join(folder, "shard-000000.tar.gz"), renamed)
    with open(plain, "wb") as f:
        f.write(data)
    for url in (os.path.join(folder, "shard-000000.tar.gz"), renamed, plain):
        assert keys(list(Dataset(url))) == ["s00000", "s00001", "s00002"], url


def test_file_urls_and_pipe(tmp_path: os.PathLike[str]) -> None:
    urls = write_shards(str(tmp_path), [2], manifest=False)
    assert keys(list(Dataset("file://" + urls[0]))) == ["s00000", "s00001"]
    assert keys(list(Dataset(f"pipe:cat {urls[0]}"))) == ["s00000", "s00001"]


def test_bad_options_fail_early(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(TypeError, match="source"):
        Dataset(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="equalize"):
        Dataset("a.tar", equalize="both")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="handler"):
        Dataset("a.tar", handler="explode")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rank"):
        Dataset("a.tar", node=(2, 2))
    with pytest.raises(ConfigError, match="batch size"):
        Dataset("a.tar").batched(0)
    urls = write_shards(str(tmp_path), [2], manifest=False)
    with pytest.raises(ConfigError, match="sample count"):
        list(Dataset(urls, equalize="drop"))
