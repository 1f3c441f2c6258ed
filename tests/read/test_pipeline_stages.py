from __future__ import annotations

import io
import logging
import os
import tarfile

import numpy as np
import pytest
from helpers.pipeline import keys, tiny_jpeg, write_shards

from shardkit import ConfigError, DataError, Dataset, DecodeError, FormatError, TarWriter
from shardkit.errors import TruncatedShardError
from shardkit.formats import tar


@pytest.fixture
def jpeg_shards(tmp_path: os.PathLike[str]) -> str:
    folder = str(tmp_path)
    write_shards(folder, [5, 5], jpeg=True)
    return folder


def test_decode_rgb8_to_tuple_and_batches(jpeg_shards: str) -> None:
    items = list(Dataset(jpeg_shards).decode("rgb8").to_tuple("jpg;png", "cls"))
    assert len(items) == 10
    image, label = items[3]
    assert image.shape == (16, 24, 3) and image.dtype == np.uint8 and label == 3
    batches = list(Dataset(jpeg_shards).decode("rgb8").to_tuple("jpg", "cls").batched(4))
    assert [b[0].shape for b in batches] == [(4, 16, 24, 3)] * 2 + [(2, 16, 24, 3)]
    assert batches[0][1].tolist() == [0, 1, 2, 3]
    full = Dataset(jpeg_shards).decode("rgb8").to_tuple("jpg", "cls").batched(4, partial=False)
    assert len(list(full)) == 2 == len(full)


def test_torch_collation_and_dicts(jpeg_shards: str) -> None:
    import torch

    ds = Dataset(jpeg_shards).decode("torchrgb8").to_tuple("jpg", "cls", "txt")
    images, labels, texts = next(iter(ds.batched(3, collate="torch")))
    assert isinstance(images, torch.Tensor) and images.shape == (3, 3, 16, 24)
    assert labels.tolist() == [0, 1, 2] and texts == ["text 0", "text 1", "text 2"]
    numpy_batch = next(
        iter(Dataset(jpeg_shards).decode().to_tuple("cls").batched(2, collate="torch"))
    )
    assert numpy_batch[0].dtype == torch.int64
    dict_batch = next(iter(Dataset(jpeg_shards).decode().batched(2)))
    assert dict_batch["__key__"] == ["s00000", "s00001"] and dict_batch["cls"].tolist() == [0, 1]
    lists = next(iter(Dataset(jpeg_shards).batched(2, collate=None)))
    assert keys(lists) == ["s00000", "s00001"]


def test_ragged_arrays_do_not_stack(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "ragged.tar")
    with open(path, "wb") as f, TarWriter(f) as sink:
        sink.write({"__key__": "a", "jpg": tiny_jpeg(1, (8, 8))})
        sink.write({"__key__": "b", "jpg": tiny_jpeg(2, (9, 8))})
    with pytest.raises(ValueError, match="cannot stack column '0'"):
        list(Dataset(path).decode("rgb8").to_tuple("jpg").batched(2))


def test_map_map_dict_map_tuple_select(jpeg_shards: str) -> None:
    ds = Dataset(jpeg_shards).decode()
    assert [s["cls"] for s in ds.map_dict(cls=lambda c: c * 10)][:3] == [0, 10, 20]
    assert list(ds.select(lambda s: s["cls"] % 4 == 0).map(lambda s: s["cls"])) == [0, 4, 8]
    pairs = list(ds.to_tuple("cls", "txt").map_tuple(lambda c: -c, None))
    assert pairs[2] == (-2, "text 2")
    assert list(ds.to_tuple("cls txt"))[1] == (1, "text 1")  # webdataset's space form
    renamed = next(iter(ds.rename(label="cls", image="png;jpg")))
    assert renamed["label"] == 0 and renamed["image"][:2] == b"\xff\xd8" and "jpg" not in renamed
    assert sorted(k for k in renamed if not k.startswith("__")) == ["image", "label", "txt"]
    only = next(iter(ds.rename(label="cls", keep=False)))
    assert sorted(only) == ["__key__", "__offset__", "__url__", "label"]


def test_user_errors_propagate_data_errors_go_to_the_handler(jpeg_shards: str) -> None:
    def boom(sample: dict[str, object]) -> object:
        raise KeyError("a bug in user code")

    with pytest.raises(KeyError):
        list(Dataset(jpeg_shards, handler="ignore").map(boom))

    def bad_data(sample: dict[str, object]) -> object:
        if sample["__key__"] == "s00001":
            raise DataError("bad sample")
        return sample["__key__"]

    assert list(Dataset(jpeg_shards, handler="ignore").map(bad_data))[:2] == ["s00000", "s00002"]


def test_missing_field(jpeg_shards: str) -> None:
    with pytest.raises(DataError, match="no field 'png;gif'") as info:
        list(Dataset(jpeg_shards).to_tuple("png;gif"))
    assert info.value.key == "s00000" and info.value.url is not None
    with pytest.raises(ConfigError, match=r"no sample has a field 'png'; .* cls, txt, jpg"):
        list(Dataset(jpeg_shards).to_tuple("png", handler="ignore"))  # a typo, not bad data


def _shard_with_bad_json(path: str) -> None:
    with open(path, "wb") as f, TarWriter(f) as sink:
        for i in range(4):
            sink.write({"__key__": f"k{i}", "json": b"{oops" if i == 2 else b"[1]"})


def test_decode_error_names_url_key_and_offset(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "bad.tar")
    _shard_with_bad_json(path)
    with pytest.raises(DecodeError) as info:
        list(Dataset(path).decode())
    raw = list(Dataset(path))
    assert (info.value.url, info.value.key, info.value.offset) == (path, "k2", raw[2]["__offset__"])
    assert f"{path}, sample 'k2', offset {raw[2]['__offset__']}" in str(info.value)
    assert keys(list(Dataset(path, handler="warn").decode())) == ["k0", "k1", "k3"]


def _shard_with_symlink(path: str) -> None:
    with tarfile.open(path, "w") as tar:
        for name in ("a.txt", "link.txt", "b.txt"):
            info = tarfile.TarInfo(name)
            if name == "link.txt":
                info.type, info.linkname = tarfile.SYMTYPE, "a.txt"
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))


def test_handler_policies_on_a_corrupt_shard(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    folder = str(tmp_path)
    bad = os.path.join(folder, "a-bad.tar")
    _shard_with_symlink(bad)
    good = write_shards(os.path.join(folder, "good"), [2], manifest=False)[0]
    with pytest.raises(FormatError, match="symlink") as info:
        list(Dataset([bad, good]))
    assert info.value.url == bad and info.value.offset == 1024
    with caplog.at_level(logging.WARNING):
        assert keys(list(Dataset([bad, good], handler="warn"))) == ["a", "b", "s00000", "s00001"]
    assert "link.txt" in caplog.text
    assert keys(list(Dataset([bad, good], handler="warn_and_stop"))) == ["a", "s00000", "s00001"]
    assert keys(list(Dataset([bad, good], handler="ignore_and_stop"))) == ["a", "s00000", "s00001"]
    # "skip" means what it means in on_error: drop the one bad item, log it, go on.
    assert keys(list(Dataset([bad, good], handler="skip"))) == ["a", "b", "s00000", "s00001"]


def test_truncated_shard(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, [5, 5])
    with open(urls[0], "rb") as f:
        data = f.read()
    with open(urls[0], "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(FormatError, match="ends inside") as info:
        list(Dataset(folder))
    assert info.value.url == urls[0] and info.value.offset is not None
    # A manifest makes the epoch exact: the shortfall is made up by repeats.
    items = keys(list(Dataset(folder, handler="warn")))
    assert len(items) == 10 == len(Dataset(folder))
    assert set(items) >= {f"s{i:05d}" for i in range(5, 10)}
    no_manifest = keys(list(Dataset(urls, handler="warn_and_stop")))
    assert len(no_manifest) < 10 and no_manifest[-5:] == [f"s{i:05d}" for i in range(5, 10)]


def _cut_shard(folder: str, where: str) -> tuple[str, list[str]]:
    """A shard of 5 samples (cls, txt, bin) cut inside sample s00003: in its first member
    (``first``) or its last (``last``). Returns its URL and the keys whole before the cut."""
    [url] = write_shards(folder, [5], manifest=False, payload=3000)
    with open(url, "rb") as f:
        data = f.read()
    members = list(tar.iter_members(io.BytesIO(data)))
    s3 = [m for m in members if m.name.startswith("s00003.")]
    cut = (s3[0] if where == "first" else s3[-1]).offset + 512 + 1
    with open(url, "wb") as f:
        f.write(data[:cut])
    return url, ["s00000", "s00001", "s00002"]


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_truncated_shard_yields_every_whole_sample_before_the_cut(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture, where: str
) -> None:
    # Was: cut in the first member of a sample, the sample before it was dropped too
    # (webdataset yields it). A sample cut in its own members is never yielded.
    url, whole = _cut_shard(str(tmp_path), where)
    with caplog.at_level(logging.WARNING):
        assert keys(list(Dataset(url, handler="warn"))) == whole
    assert "ends inside a tar member" in caplog.text
    from shardkit.handlers import warn_and_continue
    from shardkit.reader import read_shard

    assert keys(list(read_shard(url, handler=warn_and_continue))) == whole
    got: list[dict[str, object]] = []
    with pytest.raises(TruncatedShardError) as info:
        got.extend(read_shard(url))
    assert keys(got) == whole and info.value.url == url


# webdataset habits: a stage's own handler= takes what the user's function raises; a field
# that no sample has is a ConfigError whatever the handler.


def _odd_fails(sample: dict[str, object]) -> dict[str, object]:
    if int(str(sample["__key__"])[1:]) % 2:
        raise ValueError("odd")
    return sample


def _odd_field_fails(ext: str, data: bytes) -> object:
    if ext == "cls" and int(data) % 2:
        raise ValueError("odd class")
    return None


@pytest.mark.parametrize("threads", [1, 3])
def test_an_explicit_stage_handler_takes_what_the_function_raises(
    tmp_path: os.PathLike[str], threads: int
) -> None:
    folder = str(tmp_path)
    write_shards(folder, [5, 5])
    heard: list[Exception] = []

    def note(exc: Exception) -> bool:
        heard.append(exc)
        return True

    mapped = list(Dataset(folder).map(_odd_fails, handler=note))
    assert keys(mapped) == [f"s{i:05d}" for i in range(0, 10, 2)]
    assert len(heard) == 5 and all(type(e) is ValueError for e in heard)
    decoded = list(Dataset(folder).decode(_odd_field_fails, handler="ignore", threads=threads))
    assert len(decoded) == 5
    pairs = list(Dataset(folder).to_tuple("__key__", "cls").map_tuple(int, handler="ignore"))
    assert pairs == []  # int("s00000") fails for every sample: all skipped, not raised
    with pytest.raises(ValueError, match="odd"):  # without its own handler: a bug, raised
        list(Dataset(folder, handler="ignore").map(_odd_fails))


@pytest.mark.parametrize(
    "build",
    [
        lambda ds: ds.to_tuple("__key__", "foo"),
        lambda ds: ds.rename(x="foo;bar"),
        lambda ds: ds.map_dict(foo=len),
    ],
    ids=["to_tuple", "rename", "map_dict"],
)
@pytest.mark.parametrize("handler", ["raise", "ignore", "skip"])
def test_a_field_no_sample_has_raises_naming_the_fields_they_have(
    tmp_path: os.PathLike[str], build: object, handler: str
) -> None:
    folder = str(tmp_path)
    write_shards(folder, [3, 4])
    pipeline = build(Dataset(folder, handler=handler))  # type: ignore[operator]
    error = DataError if handler == "raise" else ConfigError
    with pytest.raises(error, match=r"'foo.*fields.*cls"):
        list(pipeline)


def _foo_on_s00002(sample: dict[str, object]) -> dict[str, object]:
    return {**sample, "foo": 1} if sample["__key__"] == "s00002" else sample


def test_a_field_some_samples_have_is_bad_data_for_the_others(tmp_path: os.PathLike[str]) -> None:
    folder = str(tmp_path)
    write_shards(folder, [4])
    some = Dataset(folder, handler="ignore").map(_foo_on_s00002)
    assert list(some.to_tuple("__key__", "foo")) == [("s00002", 1)]
    assert keys(list(some.rename(bar="foo"))) == ["s00002"]


def test_a_field_no_sample_has_counts_the_sample_withheld_at_a_cut(tmp_path: str) -> None:
    # A local shard cut inside k0's bin member (read through its memory map): k0 is never
    # handed out, but to_tuple/rename behind field-keeping stages see that it had cls only.
    from shardkit import ShardWriter

    with ShardWriter(os.path.join(str(tmp_path), "s-%06d.tar"), index=False) as sink:
        for i in range(3):
            sink.write({"__key__": f"k{i}", "cls": i, "bin": bytes(30000)})
    path = os.path.join(str(tmp_path), "s-000000.tar")
    os.truncate(path, 10000)
    ds = Dataset(path, handler="ignore_and_stop")
    assert list(ds) == [] and list(ds.to_tuple("cls")) == []
    with pytest.raises(ConfigError, match=r"'foo'; the samples have the fields cls \(a sample cut"):
        list(ds.shuffle(10).decode().select(bool).to_tuple("foo"))
    with pytest.raises(ConfigError, match=r"rename\(\): no sample has a field 'foo'"):
        list(ds.rename(x="foo"))
    assert list(ds.batched(2).unbatched().to_tuple("foo")) == []  # fields may have changed
    with pytest.raises(TruncatedShardError):  # the default handler: the cut itself raises
        list(Dataset(path).to_tuple("foo"))
