from __future__ import annotations

import gzip
import io
import os
import tarfile

import pytest

from shardkit.errors import ConfigError, EncodeError
from shardkit.formats import tar
from shardkit.formats.names import format_from_name, shard_name
from shardkit.writer import ShardWriter


def samples(n: int, size: int = 3000) -> list[dict[str, object]]:
    return [{"__key__": f"k{i:05d}", "bin": os.urandom(size), "txt": f"s{i}"} for i in range(n)]


def read_all(urls: list[str]) -> list[dict[str, object]]:
    out = []
    for url in urls:
        opener = gzip.open if url.endswith(".gz") else open
        with opener(url, "rb") as f:  # type: ignore[operator]
            out.extend(tar.iter_samples(f))
    return out


def test_pattern_forms() -> None:
    assert shard_name("a-%06d.tar", 7) == "a-000007.tar"
    assert shard_name("a-{shard:04d}.tar", 7) == "a-0007.tar"
    with pytest.raises(ConfigError, match="placeholder"):
        shard_name("a.tar", 1)
    assert format_from_name("x.tfrecord.gz") == ("tfrecord", True)
    assert format_from_name("x.tar") == ("tar", False)


def test_rotation_by_count_and_no_empty_trailing_shard(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "s-%06d.tar")
    with ShardWriter(pattern, max_count=4, encode=False) as sink:
        for s in samples(12):
            sink.write(s)
    assert [i.samples for i in sink.shards] == [4, 4, 4]
    names = [f"s-00000{i}.tar{idx}" for i in range(3) for idx in ("", ".idx")]
    assert sorted(os.listdir(str(tmp_path))) == names  # each shard with its index
    assert [s["__key__"] for s in read_all([i.url for i in sink.shards])] == [
        f"k{i:05d}" for i in range(12)
    ]


@pytest.mark.parametrize("ext", ["tar", "tar.gz"])
def test_rotation_by_real_bytes(tmp_path: os.PathLike[str], ext: str) -> None:
    pattern = os.path.join(str(tmp_path), f"s-%06d.{ext}")
    limit = 20_000
    data = samples(30)
    with ShardWriter(pattern, max_count=None, max_size=limit, encode=False) as sink:
        for s in data:
            sink.write(s)
    for info in sink.shards:
        assert os.path.getsize(info.url) == info.bytes <= limit
    # Full shards: the next sample would not have fitted.
    assert all(i.samples >= 4 for i in sink.shards[:-1])
    assert [s["bin"] for s in read_all([i.url for i in sink.shards])] == [s["bin"] for s in data]


def test_oversized_sample_stands_alone(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "s-%06d.tar")
    big = {"__key__": "big", "bin": os.urandom(50_000)}
    with ShardWriter(pattern, max_size=10_000, encode=False) as sink:
        for s in [*samples(1, 100), big, *samples(1, 100)[:0], {"__key__": "z", "t": b"1"}]:
            sink.write(s)
    assert [i.samples for i in sink.shards] == [1, 1, 1]
    assert sink.shards[1].bytes > 10_000


def test_digests_and_sizes_match_files(tmp_path: os.PathLike[str]) -> None:
    import blake3

    pattern = os.path.join(str(tmp_path), "s-%06d.tar.gz")
    with ShardWriter(pattern, max_count=5, encode=False) as sink:
        for s in samples(7):
            sink.write(s)
    for info in sink.shards:
        with open(info.url, "rb") as f:
            blob = f.read()
        assert info.digest == "blake3:" + blake3.blake3(blob).hexdigest()
        assert len(blob) == info.bytes
        with tarfile.open(fileobj=io.BytesIO(blob)) as tf:
            assert len(tf.getmembers()) == 2 * info.samples


def test_gzip_shards_are_reproducible(tmp_path: os.PathLike[str]) -> None:
    data = samples(6)
    digests = []
    for run in range(2):
        pattern = os.path.join(str(tmp_path), f"r{run}-%06d.tar.gz")
        with ShardWriter(pattern, max_count=3, encode=False) as sink:
            for s in data:
                sink.write(s)
        digests.append([i.digest for i in sink.shards])
    assert digests[0] == digests[1]


def test_error_mid_shard_leaves_no_partial_file(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "s-%06d.tar")
    with pytest.raises(EncodeError), ShardWriter(pattern, max_count=3, encode=False) as sink:
        for s in samples(5):
            sink.write(s)
        sink.write({"__key__": "bad.key", "x": b""})
    # The first shard was complete and committed; the second never appears, nor any temp file.
    assert sorted(os.listdir(str(tmp_path))) == ["s-000000.tar", "s-000000.tar.idx"]


def test_start_index_and_options_are_validated(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "s-%06d.tar")
    with ShardWriter(pattern, start_index=5, encode=False) as sink:
        sink.write({"__key__": "a", "x": b"1"})
    assert sink.shards[0].name == "s-000005.tar"
    with pytest.raises(ConfigError, match="max_count"):
        ShardWriter(pattern, max_count=0)
    with pytest.raises(ConfigError, match="format"):
        ShardWriter(pattern, format="zip")  # type: ignore[arg-type]


def test_unwritable_output_is_a_storage_error(tmp_path: os.PathLike[str]) -> None:
    from shardkit.errors import StorageError

    blocker = os.path.join(str(tmp_path), "taken")
    with open(blocker, "w") as f:
        f.write("a file where the folder should be")
    pattern = os.path.join(blocker, "s-%06d.tar")
    with pytest.raises(StorageError, match="taken"), ShardWriter(pattern, encode=False) as sink:
        sink.write({"__key__": "a", "x": b"1"})


def test_the_folder_of_the_shards_is_created(tmp_path: os.PathLike[str]) -> None:
    pattern = os.path.join(str(tmp_path), "out", "train", "s-%06d.tar")
    with ShardWriter(pattern) as sink:
        sink.write({"__key__": "a", "txt": "1"})
    names = sorted(os.listdir(os.path.join(str(tmp_path), "out", "train")))
    assert names == ["s-000000.tar", "s-000000.tar.idx"]
