"""Reading tar bytes in memory: the parser over a buffer, index spans, mapped shards.

The stream and buffer paths are compared on every hostile and fuzzed archive by
``helpers.hostile.read_tar`` and ``test_fuzz_tar._check_tools``; these tests hold the
buffer path's own promises: index spans (``IndexedDataset``), memory-mapped local shards
(``Dataset`` / ``read_shard``) and ``copy=False``.
"""

from __future__ import annotations

import gzip
import io
import json
import mmap
import os
import pickle
from typing import Any

import pytest
from helpers.hostile import archive, member, outcome, read_tar
from helpers.pipeline import keys, write_shards
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.errors import FormatError, TruncatedShardError
from shardkit.formats import tar
from shardkit.formats._tarparse import TarScanner
from shardkit.reader import read_shard
from shardkit.tools.index import write_indexes

COUNTS = [4, 3]


@pytest.fixture
def indexed(tmp_path: os.PathLike[str]) -> str:
    folder = os.path.join(tmp_path, "ds")
    write_indexes(write_shards(folder, COUNTS, manifest=False, payload=3000))
    return folder


def _index(shard: str) -> dict[str, list[int]]:
    with open(shard + ".idx") as f:
        doc: dict[str, list[int]] = json.load(f)
    return doc


def _edit_sizes(shard: str, k: int, change: int) -> None:
    doc = _index(shard)
    doc.pop("members", None)  # a lie in the spans of an index without a member table
    doc["sizes"][k] += change
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)


def _merge_entries(shard: str, k: int) -> None:
    """Entry ``k`` of the shard's index covers sample k + 1 too, which it no longer lists:
    the spans still tile the shard."""
    with open(shard + ".idx") as f:
        doc: dict[str, list[Any]] = json.load(f)
    doc.pop("members", None)  # a lie in the spans of an index without a member table
    doc["sizes"][k] += doc["sizes"].pop(k + 1)
    del doc["offsets"][k + 1], doc["keys"][k + 1]
    with open(shard + ".idx", "w") as f:
        json.dump(doc, f)


def _reporter(seen: list[Exception]) -> shardkit.handlers.Handler:
    def report(exc: Exception) -> bool:
        seen.append(exc)
        return True

    return report


# --------------------------------------------------------------------------- the parser


def test_a_span_is_exactly_one_sample_or_a_format_error_at_its_shard_offset() -> None:
    data = tar.encode_sample({"__key__": "a", "txt": b"x" * 600, "cls": b"1"})
    data += tar.encode_sample({"__key__": "b", "txt": b"y"})
    first = len(tar.encode_sample({"__key__": "a", "txt": b"x" * 600, "cls": b"1"}))
    base = 10_240  # as if the buffer held the shard's bytes from there (one pread)
    sample = tar.span_sample(data, 0, first, base=base, url="s.tar")
    assert sample == {"__key__": "a", "__url__": "s.tar", "__offset__": base} | {
        "txt": b"x" * 600,
        "cls": b"1",
    }
    cases = [
        ((0, len(data)), FormatError, r"holds members of another sample too \('b' at offset"),
        ((0, first - 512), TruncatedShardError, "shard ends inside a tar member"),
        ((0, first + 5000), TruncatedShardError, "runs past the end of the shard"),
        ((512, first), FormatError, "bad tar header checksum"),
        ((first, first), FormatError, "no sample at the indexed offset"),
    ]
    for (start, end), kind, words in cases:
        with pytest.raises(kind, match=words) as caught:
            tar.span_sample(data, start, end, base=base, url="s.tar")
        assert caught.value.url == "s.tar" and caught.value.offset is not None
        assert caught.value.offset >= base  # a shard offset, not one in the span
    ended = data[:first] + bytes(1024)  # the end-of-archive blocks inside the span
    with pytest.raises(FormatError, match="goes on after the sample's last member"):
        tar.span_sample(ended, 0, len(ended), url="s.tar")


def test_copy_false_gives_views_of_the_buffer_that_keep_it_alive(
    tmp_path: os.PathLike[str],
) -> None:
    path = os.path.join(tmp_path, "s.tar")
    samples = [{"__key__": f"k{i}", "bin": os.urandom(700 + i), "txt": b"t"} for i in range(3)]
    with open(path, "wb") as f:
        for s in samples:
            f.write(tar.encode_sample(s))
        f.write(tar.END_OF_ARCHIVE)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    views = list(tar.buffer_samples(mapped, url=path, copy=False))
    assert all(isinstance(v["bin"], memoryview) for v in views)
    assert [{k: bytes(v) for k, v in s.items() if not k.startswith("__")} for s in views] == [
        {k: v for k, v in s.items() if k != "__key__"} for s in samples
    ]
    with pytest.raises(BufferError):
        mapped.close()  # the views hold it
    del views
    mapped.close()


def test_the_buffer_scanner_takes_only_what_it_can_walk() -> None:
    data = archive(member(b"a.txt", b"x"))
    with pytest.raises(TypeError, match="memoryview"):
        TarScanner.over_buffer(memoryview(data))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not inside a buffer"):
        TarScanner.over_buffer(data, start=0, end=len(data) + 1)
    stream = TarScanner(io.BytesIO(data))
    next(iter(stream))
    with pytest.raises(ValueError, match="over a buffer"):
        stream.read_view()  # a stream's buffer is reused: no views of it


# --------------------------------------------------------------------------- IndexedDataset


def test_a_span_holding_another_samples_member_goes_to_the_handler(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    _merge_entries(shard, 1)  # entry 1 now covers sample 2 too
    with pytest.raises(FormatError, match="another sample too \\('s00002'") as caught:
        shardkit.IndexedDataset(indexed)[1]
    assert caught.value.url == shard and caught.value.offset == _index(shard)["offsets"][1]
    seen: list[Exception] = []
    ds = shardkit.IndexedDataset(indexed, handler=_reporter(seen))
    assert ds[1]["__key__"] == "s00003"  # the next readable sample stands in
    assert len(seen) == 1 and isinstance(seen[0], FormatError)


def test_a_truncated_span_names_the_shard_offset_of_the_cut_member(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    _edit_sizes(shard, 1, -512)  # the span ends before its last member's padding ends
    start, end = _index(shard)["offsets"][1], _index(shard)["offsets"][2]
    with pytest.raises(TruncatedShardError, match="ends inside a tar member") as caught:
        shardkit.IndexedDataset(indexed)[1]
    assert caught.value.url == shard and start < caught.value.offset < end  # type: ignore[operator]


@pytest.mark.parametrize("copy", [False, True], ids=["mmap", "pread"])
def test_a_shard_cut_short_after_it_was_opened_is_a_format_error(indexed: str, copy: bool) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    seen: list[Exception] = []
    strict = shardkit.IndexedDataset(indexed, copy=copy)  # copy=False maps local shards
    lenient = shardkit.IndexedDataset(indexed, handler=_reporter(seen), copy=copy)
    for ds in (strict, lenient):
        assert ds[0]["__key__"] == "s00000"  # the shard is open (and mapped) now
    offsets = _index(shard)["offsets"]
    os.truncate(shard, offsets[2] + 100)  # in place: sample 2 and after are gone
    assert strict[1]["__key__"] == "s00001"
    assert isinstance(strict[1]["bin"], bytes if copy else memoryview)
    with pytest.raises(TruncatedShardError, match="runs past the end of the shard") as caught:
        strict[3]
    assert caught.value.url == shard and caught.value.offset == offsets[3]
    assert lenient[2]["__key__"] == "s00004"  # the next shard's first sample stands in
    assert len(seen) == 2 and all(isinstance(e, TruncatedShardError) for e in seen)


def test_indexed_copy_false_gives_views_equal_to_the_bytes(indexed: str) -> None:
    views = shardkit.IndexedDataset(indexed, copy=False)
    copies = shardkit.IndexedDataset(indexed)
    for i in range(len(copies)):
        view, copied = views[i], copies[i]
        assert isinstance(view["bin"], memoryview) and isinstance(copied["bin"], bytes)
        assert {k: bytes(v) if isinstance(v, memoryview) else v for k, v in view.items()} == copied
    decoded = shardkit.IndexedDataset(indexed, copy=False).decode().to_tuple("cls", "txt")
    assert decoded[5] == (5, "text 5")
    with pytest.raises(TypeError, match="copy must be True or False"):
        shardkit.IndexedDataset(indexed, copy="no")  # type: ignore[arg-type]


def _key_and_bytes(sample: dict[str, object]) -> tuple[object, bytes]:
    view = sample["bin"]
    assert isinstance(view, memoryview)
    return sample["__key__"], bytes(view)


def test_a_mapped_dataset_pickles_and_forked_workers_map_their_own(indexed: str) -> None:
    from torch.utils.data import DataLoader

    ds = shardkit.IndexedDataset(indexed, copy=False).map(_key_and_bytes)
    first = ds[0]  # this process maps shard 0 now: the map must not travel
    copy = pickle.loads(pickle.dumps(ds))
    assert copy[0] == first
    loader = DataLoader(
        ds, batch_size=2, num_workers=2, multiprocessing_context="fork", collate_fn=list
    )
    got = [key for batch in loader for key, _ in batch]
    assert got == [f"s{i:05d}" for i in range(sum(COUNTS))]
    assert [data for batch in loader for _, data in batch] == [
        bytes(s["bin"]) for s in shardkit.Dataset(indexed)
    ]


# --------------------------------------------------------------------------- Dataset


def test_a_mapped_shard_reads_as_its_stream_and_leaves_nothing_open(indexed: str) -> None:
    shard = os.path.join(indexed, "shard-000000.tar")
    before = len(os.listdir("/proc/self/fd"))
    mapped = list(read_shard(shard))
    streamed = list(read_shard(f"pipe:cat {shard}"))  # a pipe is read as a stream
    assert [{**s, "__url__": None} for s in mapped] == [{**s, "__url__": None} for s in streamed]
    partial = read_shard(shard)
    next(partial)
    partial.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_cut_mapped_shard_is_the_streams_truncation_error(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(tmp_path, "cut")
    (shard,) = write_shards(folder, [3], manifest=False, payload=2000)
    os.truncate(shard, os.path.getsize(shard) // 2)
    outcomes = []
    for url in (shard, f"pipe:cat {shard}"):
        seen: list[Exception] = []
        got = keys(list(read_shard(url, handler=_reporter(seen))))
        outcomes.append((got, [(type(e), e.message, e.offset, e.key) for e in seen]))  # type: ignore[attr-defined]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1][0][0] is TruncatedShardError


def test_dataset_copy_false_yields_views_and_decodes_them(indexed: str) -> None:
    plain = list(shardkit.Dataset(indexed))
    views = list(shardkit.Dataset(indexed, copy=False))
    assert all(isinstance(s["bin"], memoryview) for s in views)
    assert [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in s.items()} for s in views
    ] == plain
    decoded = list(shardkit.Dataset(indexed, copy=False).decode().to_tuple("cls", "txt"))
    assert decoded == [(i, f"text {i}") for i in range(sum(COUNTS))]
    with pytest.raises(TypeError, match="copy must be True or False"):
        shardkit.Dataset(indexed, copy=1)  # type: ignore[arg-type]


def test_copy_false_resumes_where_the_epoch_stopped(indexed: str) -> None:
    ds = shardkit.Dataset(indexed, copy=False).shuffle(3)
    first = iter(ds)
    head = [next(first)["__key__"] for _ in range(3)]
    state = ds.state_dict()
    rest = [s["__key__"] for s in first]
    resumed = shardkit.Dataset(indexed, copy=False).shuffle(3)
    resumed.load_state_dict(state)
    assert [s["__key__"] for s in resumed] == rest and len(head + rest) == sum(COUNTS)


def test_gzip_content_under_a_tar_name_is_still_read_as_a_stream(
    tmp_path: os.PathLike[str],
) -> None:
    folder = os.path.join(tmp_path, "gz")
    (shard,) = write_shards(folder, [2], manifest=False)
    with open(shard, "rb") as f:
        raw = f.read()
    with open(shard, "wb") as f:
        f.write(gzip.compress(raw))
    assert keys(list(shardkit.Dataset(shard, copy=False))) == ["s00000", "s00001"]
    empty = os.path.join(tmp_path, "empty.tar")
    open(empty, "wb").close()
    assert list(read_shard(empty)) == []  # nothing to map: read as the empty stream it is


def _span_outcomes(data: bytes) -> list[object]:
    """span_sample over every 512-aligned span of ``data``: a sample, or the error's
    (type, message)."""
    out: list[object] = []
    for start in range(0, len(data) + 1, 512):
        for end in range(start, len(data) + 513, 512):
            try:
                out.append(tar.span_sample(data, start, end, base=7, url="u"))
            except FormatError as exc:
                out.append((type(exc), str(exc)))
    return out


def test_plain_spans_read_as_the_generic_path_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # Names the fast path must leave to the generic one: a case-folded extension seen
    # twice, a name without a key, webdataset's __meta__, a directory, a long name.
    data = b"".join(
        [
            member(b"a.txt", b"x" * 700),
            member(b"a.TXT", b"y"),
            member(b"b.cls", b"1"),
            member(b"__meta__", b"{}"),
            member(b"c.json", b"{}"),
            member(b"d/", b"", typeflag=b"5"),
            member(b"c.bin", b"z" * 513),
            tar.encode_sample({"__key__": "e/" + "n" * 120, "txt": b"long"}),
            member(b"noext", b"q"),
            member(b"f.txt", b"w"),
        ]
    )
    data += tar.END_OF_ARCHIVE
    fast = _span_outcomes(data)
    from shardkit.formats import _targroup  # where the grouping looks the fast rule up

    monkeypatch.setattr(_targroup, "plain_members", lambda *args: None)  # the generic path only
    assert _span_outcomes(data) == fast
    assert any(isinstance(o, dict) for o in fast) and any(isinstance(o, tuple) for o in fast)


_NAMES = [b"a.txt", b"a.TXT", b"a.cls", b"b.txt", b"b.Txt", b"d/e.json", b"d/e.JSON", b"a.txt"]
_ODD = [(b"__meta__", b"0"), (b"noext", b"0"), (b"dir/", b"5"), (b"a.lnk", b"2"), (b".x", b"0")]


@settings(max_examples=300, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(_NAMES) + len(_ODD) - 1), max_size=10),
    sizes=st.lists(st.integers(0, 1100), min_size=10, max_size=10),
    cut=st.one_of(st.none(), st.integers(0, 12_000)),
    policy=st.sampled_from(["raise", "keep", "stop"]),
)
def test_buffer_samples_group_as_the_stream_does(
    picks: list[int], sizes: list[int], cut: int | None, policy: str
) -> None:
    """Members whose grouping the buffer path must see as the stream does: extensions
    equal once lower-cased, keys that come back, names with no key, non-regular members,
    a cut anywhere; under each kind of handler (helpers.hostile.read_tar compares)."""
    parts = []
    for pick, size in zip(picks, sizes, strict=False):
        if pick < len(_NAMES):
            parts.append(member(_NAMES[pick], bytes([pick]) * size))
        else:
            name, kind = _ODD[pick - len(_NAMES)]
            parts.append(member(name, b"" if kind != b"0" else b"m" * size, kind))
    data = archive(*parts)
    if cut is not None:
        data = data[:cut]
    handler = {"raise": None, "keep": lambda exc: True, "stop": lambda exc: False}[policy]
    kw = {} if handler is None else {"handler": handler}
    streamed = outcome(lambda: read_tar(data, **kw))  # compares the stream and the buffer
    views = outcome(lambda: [_bytes(s) for s in tar.buffer_samples(data, copy=False, **kw)])
    if isinstance(streamed, Exception):
        assert (type(views), str(views)) == (type(streamed), str(streamed))
    else:
        assert views == streamed


def _bytes(sample: dict[str, object]) -> dict[str, object]:
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}


def test_read_indexed_sample_refuses_a_span_of_two_samples(indexed: str) -> None:
    from shardkit.pipeline._idxfiles import load_index
    from shardkit.tools.index import read_indexed_sample

    shard = os.path.join(indexed, "shard-000000.tar")
    index = load_index(shard)
    assert index is not None and read_indexed_sample(shard, index, 1)["__key__"] == "s00001"
    _merge_entries(shard, 1)
    index = load_index(shard)
    assert index is not None
    with pytest.raises(FormatError, match="another sample too"):
        read_indexed_sample(shard, index, 1)
