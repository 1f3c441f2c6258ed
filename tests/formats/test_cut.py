"""The one cut rule: every writer of shards cuts the same sample sizes in the same places."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardkit.builder._assembly import Cutter
from shardkit.builder._partwriter import PartWriter
from shardkit.builder._plan import cut_tasks
from shardkit.builder._sources import Item
from shardkit.builder._store import LocalStore
from shardkit.builder._worker import TaskResult
from shardkit.builder.options import BuildOptions
from shardkit.errors import ConfigError
from shardkit.formats import tar
from shardkit.formats.cut import Cut
from shardkit.formats.record import ShardRecord
from shardkit.formats.tar import tar_chunks
from shardkit.tools._inputs import ShardRef
from shardkit.tools._rawsplit import raw_shards, split_raw
from shardkit.writer import ShardWriter

_NO_LIMIT = 1 << 40  # BuildOptions always has both limits
# Tar sizes are multiples of 512: limits on and around a block boundary, where an
# off-by-one in any user of the rule shows.
_PAYLOADS = st.one_of(st.sampled_from([0, 1, 511, 512, 513, 1024]), st.integers(0, 6000))
_BOUNDARIES = st.integers(2, 48).flatmap(
    lambda n: st.sampled_from([n * 512 - 1, n * 512, n * 512 + 1])
)


def _greedy(sizes: list[int], max_count: int | None, max_size: int | None) -> list[int]:
    """Samples per shard, cut greedily by hand: the rule as the docs state it."""
    counts: list[int] = []
    count = size = 0
    for add in sizes:
        over_count = max_count is not None and count >= max_count
        over_size = max_size is not None and size + add + len(tar.END_OF_ARCHIVE) > max_size
        if count and (over_count or over_size):
            counts.append(count)
            count = size = 0
        count += 1
        size += add
    return [*counts, count] if count else counts


def _writer(folder: str, samples: list[dict[str, bytes | str]], cut: Cut) -> list[int]:
    pattern = os.path.join(folder, "w-%04d.tar")
    with ShardWriter(pattern, max_count=cut.max_count, max_size=cut.max_size) as sink:
        for sample in samples:
            sink.write(sample)
    return [info.samples for info in sink.shards]


def _raw_split(folder: str, samples: list[dict[str, bytes | str]], cut: Cut) -> list[int]:
    source = os.path.join(folder, "in.tar")
    with open(source, "wb") as f:
        f.write(b"".join(map(tar.encode_sample, samples)) + tar.END_OF_ARCHIVE)
    sink = raw_shards(
        os.path.join(folder, "r-%04d.tar"), max_count=cut.max_count, max_size=cut.max_size
    )
    return [info.samples for info in split_raw([ShardRef(source, "tar", False)], sink)]


def _part_writer(folder: str, samples: list[dict[str, bytes | str]], cut: Cut) -> list[int]:
    writer = PartWriter(LocalStore(folder), "p-%04d.tar", cut=cut, trailer=tar.END_OF_ARCHIVE)
    for sample in samples:
        chunks, size = tar_chunks(str(sample["__key__"]), [("bin", bytes(sample["bin"]))])
        writer.add(str(sample["__key__"]), chunks, size)
    return [part.samples for part in writer.close()]


def _options(cut: Cut) -> BuildOptions:
    return BuildOptions(max_count=cut.max_count or _NO_LIMIT, max_size=cut.max_size or _NO_LIMIT)


def _plan(sizes: list[int], cut: Cut) -> list[int]:
    items = [Item(i, f"s{i:04d}", -1, "bin", size, "") for i, size in enumerate(sizes)]
    tasks = cut_tasks(items, _options(cut), lambda item: item.size)
    return [len(task.items) for task in tasks]


def _cutter(sizes: list[int], cut: Cut, chunk: int) -> list[int]:
    cutter = Cutter(_options(cut), lambda i: f"shard-{i:06d}.tar")
    plans = []
    for index, start in enumerate(range(0, len(sizes), chunk)):
        part = sizes[start : start + chunk]
        result = TaskResult(
            index, [ShardRecord(f".p{index}", len(part), sum(part), "")], sizes=part
        )
        plans += cutter.add(result)
    plans += cutter.finish()
    return [plan.samples for plan in plans]


@settings(max_examples=120, deadline=None)
@given(
    payloads=st.lists(_PAYLOADS, min_size=1, max_size=30),
    max_count=st.one_of(st.none(), st.integers(1, 7)),
    max_size=st.one_of(st.none(), st.integers(1, 25_000), _BOUNDARIES),
    chunk=st.integers(1, 9),
)
@example(payloads=[512] * 4, max_count=None, max_size=3071, chunk=3)  # one byte short
@example(payloads=[512] * 4, max_count=None, max_size=3072, chunk=3)  # exactly full
@example(payloads=[512] * 4, max_count=3, max_size=None, chunk=2)
@example(payloads=[9000, 0], max_count=None, max_size=2048, chunk=1)  # larger: stands alone
def test_every_user_of_the_rule_cuts_the_same_sizes_the_same_way(
    payloads: list[int], max_count: int | None, max_size: int | None, chunk: int
) -> None:
    samples: list[dict[str, bytes | str]] = [
        {"__key__": f"s{i:04d}", "bin": bytes([i % 251]) * n} for i, n in enumerate(payloads)
    ]
    sizes = [len(tar.encode_sample(sample)) for sample in samples]
    cut = Cut(max_count, max_size, trailer=len(tar.END_OF_ARCHIVE))
    expected = _greedy(sizes, max_count, max_size)
    with tempfile.TemporaryDirectory() as folder:
        assert _writer(folder, samples, cut) == expected
        assert _raw_split(folder, samples, cut) == expected
        assert _part_writer(folder, samples, cut) == expected
    assert _plan(sizes, cut) == expected
    assert _cutter(sizes, cut, chunk) == expected


@pytest.mark.parametrize("max_size", [4000, 4e3, "4KB", "4kB", "0.004MB", "4e3"])
def test_every_user_accepts_the_same_sizes(tmp_path: object, max_size: object) -> None:
    """tools.split, ShardWriter and BuildOptions take ints, floats and size strings alike
    (split(max_size="4KB") raised a raw TypeError)."""
    from shardkit.tools import split

    folder = str(tmp_path)
    source = os.path.join(folder, "in.tar")
    samples = [{"__key__": f"s{i:03d}", "bin": b"x" * 500} for i in range(9)]  # 1 kB each
    with open(source, "wb") as f:
        f.write(b"".join(map(tar.encode_sample, samples)) + tar.END_OF_ARCHIVE)
    shards = split([source], os.path.join(folder, "o-%03d.tar"), max_size=max_size)  # type: ignore[arg-type]
    assert [(s.samples, s.bytes) for s in shards] == [(2, 3072)] * 4 + [(1, 2048)]
    assert ShardWriter(os.path.join(folder, "w-%d.tar"), max_size=max_size).max_size == 4000  # type: ignore[arg-type]
    assert BuildOptions(max_size=max_size).size_limit == 4000  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_count": 0}, "max_count must be at least 1"),
        ({"max_count": 2.5}, "max_count must be an int"),
        ({"max_size": "lots"}, "max_size 'lots' is not a size"),
        ({"max_size": "100"}, "use e.g. 100MB"),
        ({"max_size": 0}, "max_size must be positive"),
    ],
)
def test_bad_limits_are_one_config_error(limits: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Cut(**limits)  # type: ignore[arg-type]


def test_an_empty_shard_takes_any_sample() -> None:
    cut = Cut(1, 10, trailer=1024)
    assert not cut.full(0, 0, 1 << 30)
    assert cut.full(1, 0, 0)  # max_count reached
    assert Cut(None, 2048, trailer=1024).full(1, 512, 513)
    assert not Cut(None, 2048, trailer=1024).full(1, 512, 512)
