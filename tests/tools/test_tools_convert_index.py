from __future__ import annotations

import json
import os

import pytest
from helpers.tools import read_all, samples, tar_bytes, write_shards

from shardkit.errors import ConfigError, FormatError
from shardkit.formats.example import encode_example
from shardkit.formats.tfrecord import frame_record
from shardkit.tools import (
    convert,
    load_index,
    read_indexed_sample,
    stats,
    write_index,
)


def put(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_tar_to_tfrecord_to_tar_round_trips_every_field(tmp_path: object) -> None:
    folder = str(tmp_path)
    data = samples(14, images=True)
    data[0]["empty"] = b""
    data[1]["seg.png"] = b"\x89PNG not really"
    data[2]["unicode.txt"] = "h\u00e9llo \u2603"
    data[3]["__key__"] = "deep/dir/k-3"
    source = put(os.path.join(folder, "src.tar"), tar_bytes(data))
    count, shards = convert([source], os.path.join(folder, "tf-%03d.tfrecord"), max_count=5)
    assert count == 14 and [s.samples for s in shards] == [5, 5, 4]
    back_count, _ = convert([s.url for s in shards], os.path.join(folder, "back.tar"))
    assert back_count == 14
    assert read_all([os.path.join(folder, "back.tar")]) == read_all([source])
    for sample, original in zip(read_all([shards[0].url]), data, strict=False):
        assert sample["image/encoded"] == original["jpg"]
        assert sample["image/format"] == b"jpeg"
        assert sample["image/class/label"] == original["cls"]  # int64, not b"1"
        assert isinstance(sample["image/width"], int) and isinstance(sample["json"], bytes)


def test_round_trip_keeps_fields_the_schema_cannot_move(tmp_path: object) -> None:
    """Fields that would not come back the same stay bytes features of their own."""
    data = [
        {"__key__": "a", "jpeg": b"\xff\xd8 other spelling", "cls": b"03"},
        {"__key__": "b", "png": b"not a png", "jpg": b"second image", "cls": b" 1"},
        {"__key__": "c", "cls": b"99999999999999999999", "json": b'{"class": 5}'},
        {"__key__": "d", "tif": b"II*\x00", "json": b'{"path": "x/y.tif", "class": "\\u00f1"}'},
    ]
    source = put(os.path.join(str(tmp_path), "s.tar"), tar_bytes(data))
    tf_file = os.path.join(str(tmp_path), "s.tfrecord")
    convert([source], tf_file)
    convert([tf_file], os.path.join(str(tmp_path), "back.tar"))
    assert read_all([os.path.join(str(tmp_path), "back.tar")]) == read_all([source])
    a, b, c, d = read_all([tf_file])
    assert a["jpeg"] == b"\xff\xd8 other spelling" and a["cls"] == b"03"
    assert b["image/encoded"] == b"not a png" and b["image/format"] == b"png"
    assert "image/height" not in b and b["jpg"] == b"second image"
    assert c["cls"] == b"99999999999999999999" and "image/class/text" not in c
    assert d["image/format"] == b"tiff" and d["image/filename"] == b"x/y.tif"
    assert d["image/class/text"] == "\u00f1".encode()


def test_native_tensorflow_features_map_to_tar_fields(tmp_path: object) -> None:
    record = encode_example(
        {"image/encoded": b"\xff\xd8jpeg", "label": 7, "scores": [0.5, 0.25], "names": [b"a", b"b"]}
    )
    src = put(os.path.join(str(tmp_path), "n.tfrecord"), frame_record(record))
    out = os.path.join(str(tmp_path), "n.tar")
    convert([src], out)
    [sample] = read_all([out])
    assert sample == {
        "__key__": "00000000",
        "image.encoded": b"\xff\xd8jpeg",
        "label": b"7",
        "scores": b"[0.5,0.25]",
        "names": b'["a","b"]',
    }


def test_convert_checks_the_target_format(tmp_path: object) -> None:
    src = put(os.path.join(str(tmp_path), "s.tar"), tar_bytes(samples(2)))
    with pytest.raises(ConfigError, match="named like tar"):
        convert([src], os.path.join(str(tmp_path), "x.tar"), to="tfrecord")
    with pytest.raises(ConfigError, match="give --to"):
        convert([src], os.path.join(str(tmp_path), "x.bin"))


@pytest.mark.parametrize("ext", ["tar", "tfrecord"])
def test_index_counts_and_random_access(tmp_path: object, ext: str) -> None:
    folder = str(tmp_path)
    data = samples(9)
    [url] = write_shards(folder, data, per_shard=20, ext=ext)
    index = write_index(url)
    loaded = load_index(url)
    assert loaded == index
    assert loaded is not None and loaded.samples == 9
    assert loaded.shard_bytes == os.path.getsize(url)
    assert list(loaded.keys) == [s["__key__"] for s in data]
    expected = read_all([url])
    for i in (0, 4, 8, -1):
        got = read_indexed_sample(url, loaded, i)
        assert {k: v for k, v in got.items() if not k.startswith("__")} == {
            k: v for k, v in expected[i].items() if not k.startswith("__")
        }
        assert got["__key__"] == expected[i]["__key__"]
    with open(url + ".idx", "rb") as f:
        doc = json.load(f)
    assert doc["format"] == "shardkit.index" and len(doc["offsets"]) == 9


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sizes": [2**40] * 3, "bytes": 2**41}, "over the reader's"),
        ({"offsets": [0, 10**9, 0]}, "outside the shard"),
        ({"shard": "other.tar"}, "index of another shard"),
    ],
)
def test_a_lying_index_is_refused_before_anything_is_read(
    tmp_path: object, change: dict[str, object], message: str
) -> None:
    # Was: read_indexed_sample read (and allocated) whatever size the .idx file claimed.
    [url] = write_shards(str(tmp_path), samples(3), per_shard=20, ext="tar")
    write_index(url)
    with open(url + ".idx", "rb") as f:
        doc = json.load(f)
    doc.update(change)
    with open(url + ".idx", "w") as f:
        json.dump(doc, f)
    with pytest.raises(FormatError, match=message) as info:
        load_index(url)
    assert info.value.url == url + ".idx"


def test_index_refuses_a_broken_shard(tmp_path: object) -> None:
    blob = tar_bytes(samples(4))
    url = put(os.path.join(str(tmp_path), "t.tar"), blob[:3000])
    with pytest.raises(FormatError, match="not indexed"):
        write_index(url)
    assert not os.path.exists(url + ".idx")


def test_stats_counts_classes_fields_and_sizes(tmp_path: object) -> None:
    folder = str(tmp_path)
    data = samples(12)
    urls = write_shards(folder, data, per_shard=5)
    result = stats([folder])
    assert result.samples == 12
    assert [s.samples for s in result.shards] == [5, 5, 2]
    assert result.bytes == sum(os.path.getsize(u) - 1024 for u in urls)
    assert result.classes == {"0": 4, "1": 4, "2": 4}
    assert result.kinds == {"txt": "text", "bin": "bytes", "cls": "int", "json": "json"}
    assert result.field_bytes["bin"] == sum(len(s["bin"]) for s in data)
    by_label = stats(urls, label="json.label")
    assert by_label.classes == {"cat": 4, "dog": 4, "fox": 4}
    tf = write_shards(os.path.join(folder, "tf"), data, per_shard=20, ext="tfrecord")
    tf_stats = stats(tf)
    assert tf_stats.samples == 12 and tf_stats.classes == result.classes
    assert tf_stats.field_bytes["bin"] == result.field_bytes["bin"]


def test_stats_plot_writes_a_png(tmp_path: object) -> None:
    from PIL import Image

    from shardkit.tools import plot_stats

    urls = write_shards(str(tmp_path), samples(20), per_shard=20)
    out = os.path.join(str(tmp_path), "plot.png")
    plot_stats(stats(urls), out)
    with Image.open(out) as img:
        assert img.format == "PNG" and img.width == 1200 and img.height == 400


def test_indexing_an_index_file_says_so(tmp_path: object) -> None:
    # ShardWriter writes an .idx beside each shard: `shardkit index` named one of them (a
    # glob over the folder) says what it is, instead of "the shard ends inside a tar header".
    from shardkit.tools import write_index
    from shardkit.writer import ShardWriter

    folder = str(tmp_path)
    with ShardWriter(os.path.join(folder, "s-%06d.tar")) as sink:
        sink.write({"__key__": "a", "txt": "x"})
    with pytest.raises(ConfigError, match=r"s-000000\.tar\.idx is an index file, not a shard"):
        write_index(os.path.join(folder, "s-000000.tar.idx"))
