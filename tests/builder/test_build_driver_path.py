"""The driver's own path (issue 27, the driver's serial time): a folder is listed in
about half the Python per file it took, with the same listing, and each shard's ``.idx``
is named without parsing it back. Each fast path is checked to be taken, and to give
what the general rules give: samples found as runs of one prefix (the nested-prefix
grouping takes over at the first folder named with a dot), a file's name checked once
per extension, the fingerprint's lines hashed in batches, the index's shard name
spliced in (the bytes of parse, rename, write).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.build import make_corpus, write
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.builder import _folders, _plan, _run, _samples
from shardkit.builder._folders import list_image_folder
from shardkit.builder._plan import cut_tasks, estimator, order_items
from shardkit.builder._samples import field_problem, group_samples
from shardkit.builder._sources import Item
from shardkit.builder.options import BuildOptions
from shardkit.formats.index import ShardIndex, renamed_index
from shardkit.tools.index import build_index


def _general(entries: list[Any], layout: str) -> tuple[list[Any], list[Any]]:
    """The items and skips of the nested-prefix grouping alone (the reference)."""
    items: list[Any] = []
    skipped: list[Any] = []
    for files in _samples._groups(iter(entries)):
        items.extend(_samples._group_items(files, layout, skipped))
    return items, skipped


_PARTS = st.sampled_from(["a", "x", "x.d", "x.zzz", "0001", "b.c", "x-1"])
_NAMES = st.sampled_from(
    [
        "x.jpg",
        "x.txt",
        "x.png",
        "x.seg.png",
        "x.zzz0.txt",
        "x",
        "0001.jpg",
        "0001.json",
        "b.c.jpg",
        "b_c.jpg",
        "x.JPEG",
        "x.cls",
        "s.wav",
        "x.d.jpg",
        "x-1.jpg",
        "README.txt",
        "x.jpg.gz",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    paths=st.lists(
        st.tuples(st.lists(_PARTS, min_size=0, max_size=2), _NAMES).map(
            lambda p: "/".join([*p[0], p[1]])
        ),
        unique=True,
        max_size=30,
    ),
    layout=st.sampled_from(["classes", "samples"]),
)
def test_samples_found_as_runs_are_those_the_nested_rules_find(
    paths: list[str], layout: str
) -> None:
    entries = [(0, path, n, f"v{n}") for n, path in enumerate(sorted(paths))]
    skipped: list[Any] = []
    items = list(group_samples(iter(entries), layout, skipped))
    assert (items, skipped) == _general(entries, layout)


def _entries(*paths: str) -> list[tuple[int, str, int, str]]:
    return [(0, path, 1, "v") for path in sorted(paths)]


def _counting_groups(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    groups = _samples._groups

    def counted(entries: Iterator[Any], first: Any = None) -> Iterator[list[Any]]:
        calls.append(1)
        return groups(entries, first)

    monkeypatch.setattr(_samples, "_groups", counted)
    return calls


def test_a_folder_without_dotted_folder_names_is_grouped_in_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path is taken: the nested-prefix grouping never runs for the usual image
    folder (samples of several files included), and it takes over, with the sample still
    open, at the first file in a folder named with a dot."""
    calls = _counting_groups(monkeypatch)
    usual = _entries("a/0001.jpg", "a/0001.txt", "a/0002.jpg", "b/c.jpg", "b/c.png")
    assert len(list(group_samples(usual, "samples", []))) == 3
    assert not calls
    nested = _entries("a/x.jpg", "a/x.zzz/y.jpg", "a/x.zzz0.txt")
    items = list(group_samples(nested, "samples", []))
    assert calls == [1]
    assert items[0][1] == (("a/x.jpg", "jpg", 1), ("a/x.zzz0.txt", "zzz0.txt", 1))
    assert items[1][1] == "a/x.zzz/y.jpg"


def test_a_name_is_checked_once_per_extension(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken: the walk asks for the reason to skip a file once per
    extension, not once per file; the skips are the same."""
    for n in range(20):
        write(str(tmp_path), f"cat/{n:03d}.jpg", b"x")
        write(str(tmp_path), f"cat/{n:03d}.bin", b"x")
    asked: list[str] = []

    def problem(name: str) -> str:
        asked.append(name)
        return field_problem(name)

    monkeypatch.setattr(_folders, "field_problem", problem)
    listing = list_image_folder(str(tmp_path))
    assert len(listing.items) == 20
    assert sorted(name.partition(".")[2] for name in asked) == ["bin", "jpg"]
    assert len(listing.skipped) == 20
    assert all(reason == "unknown field extension 'bin'" for _, reason in listing.skipped)


def test_the_fingerprint_is_each_file_hashed_in_turn(tmp_path: Path) -> None:
    """Hashed in batches, the fingerprint is the classes, then one line per file (a
    sample's files in turn), over more files than one batch holds."""
    for n in range(_folders._FINGERPRINT_BATCH + 10):
        write(str(tmp_path), f"c{n % 2}/{n:05d}.jpg", b"x" * (n % 7))
    write(str(tmp_path), "c0/00000.txt", b"caption")
    listing = list_image_folder(str(tmp_path))
    digest = hashlib.sha256(json.dumps(["c0", "c1"]).encode())
    for item in listing.items:
        files = item.ref if isinstance(item.ref, tuple) else ((item.ref, "", item.size),)
        for rel, _, size in files:
            mtime = (tmp_path / rel).stat().st_mtime_ns
            digest.update(f"{rel}\0{size}\0{mtime}\n".encode())
    assert listing.fingerprint == digest.hexdigest()
    assert not listing.sizes_known  # c0/00000 is a sample of two files


def test_a_build_names_each_index_without_parsing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken: committing a shard writes its .idx from the part's without
    parsing it (ShardIndex.from_json is never called), and every .idx is the one
    `shardkit index` makes for the final shard (its name included)."""
    corpus = make_corpus(str(tmp_path / "src"), count=40)

    def parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the build parsed an index it wrote")

    monkeypatch.setattr(ShardIndex, "from_json", parse)
    out = tmp_path / "out"
    shardkit.build(corpus, out, options=BuildOptions(max_count=15, workers=1))
    monkeypatch.undo()
    names = sorted(n for n in os.listdir(out) if n.endswith(".tar"))
    assert len(names) == 3
    for name in names:
        data = (out / f"{name}.idx").read_bytes()
        assert data == build_index(str(out / name)).to_json()
        assert ShardIndex.from_json(data).shard == name


@pytest.mark.parametrize("part", [".shard-task000003-part001.tar", "ünï-\udcff.tfrecord"])
@pytest.mark.parametrize("final", ["shard-000007.tar", "é/\udcc3.tar", 'q"uote\\.tar'])
def test_renamed_index_is_parse_rename_write(part: str, final: str) -> None:
    index = ShardIndex(part, "tar", False, 4096, ("a/1", "ü/2"), (0, 2048), (2048, 2048))
    data = index.to_json()
    parsed = dataclasses.replace(ShardIndex.from_json(data), shard=final).to_json()
    assert renamed_index(data, part, final) == parsed
    assert renamed_index(data, "another.tar", final) is None


def test_a_task_is_sent_with_its_items_as_plain_tuples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast path is taken: a task pickles its items as tuples (a NamedTuple's own
    pickling goes through a Python call per item), and comes back equal, Items again."""
    corpus = make_corpus(str(tmp_path / "src"), count=12)
    options = BuildOptions()
    listing = list_image_folder(corpus)
    (task,) = cut_tasks(order_items(listing.items, options), options, None)

    def slow(self: Item) -> tuple[Any, ...]:
        raise AssertionError("an Item was pickled by itself")

    monkeypatch.setattr(Item, "__getnewargs__", slow)
    back = pickle.loads(pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == task
    assert all(type(item) is Item for item in back.items)


@settings(max_examples=300, deadline=None)
@given(
    ref=st.text(max_size=90),
    key=st.text(max_size=40),
    label=st.integers(-1, 3),
    size=st.integers(0, 10_000),
    meta=st.sampled_from(["", '{"a": 1}']),
)
def test_the_tar_estimate_is_the_same_per_class(
    ref: str, key: str, label: int, size: int, meta: str
) -> None:
    """The estimator looks each class name up once; its sizes are _tar_estimate's."""
    classes = ["c", "x" * 70, "é" * 30, ""]
    item = Item(ref, key, label, "jpg", size, meta)
    assert estimator(BuildOptions(), classes)(item) == _plan._tar_estimate(item, classes)


def test_the_pool_starts_once_as_many_tasks_as_workers_are_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first task is sent once the tasks that tell how many workers to start are cut,
    no more: one per worker (then the rest as the pool takes them)."""
    corpus = make_corpus(str(tmp_path / "src"), count=40)
    made: list[int] = []
    started: list[int] = []
    cut, make = _run.cut_tasks, _run.make_executor

    def cutting(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for task in cut(*args, **kwargs):
            made.append(task.index)
            yield task

    def making(*args: Any, **kwargs: Any) -> Any:
        started.append(len(made))
        return make(*args, **kwargs)

    monkeypatch.setattr(_run, "cut_tasks", cutting)
    monkeypatch.setattr(_run, "make_executor", making)
    result = shardkit.build(corpus, tmp_path / "out", options=BuildOptions(max_count=5, workers=2))
    assert len(result.shards) == len(made) > 2
    assert started == [2]
