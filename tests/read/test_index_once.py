"""Each shard's ``.idx`` is loaded once per process: the shard list's sample counts and
the reader's member table come from one load (:class:`shardkit.pipeline._idxfiles.
IndexCache`), and the trust checks still refuse a bad index, at the shard's turn."""

from __future__ import annotations

import base64
import json
import sys
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from shardkit import Dataset, ShardWriter, mix
from shardkit.errors import FormatError
from shardkit.pipeline import _idxfiles


def _write(folder: Path, count: int = 25) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(folder / "shard-%06d.tar"), max_count=10, encode=False) as out:
        for i in range(count):
            out.write({"__key__": f"s{i:04d}", "txt": b"t" * (i * 37), "cls": b"%d" % i})
    return sorted(str(p) for p in folder.glob("*.tar"))


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each shard's index file is opened and parsed (the one place that does)."""
    seen: Counter[str] = Counter()
    real = _idxfiles.read_index

    def counted(shard_url: str, access: Any, source: str | None = None) -> Any:
        seen[shard_url] += 1
        return real(shard_url, access, source)

    monkeypatch.setattr(_idxfiles, "read_index", counted)
    return seen


@pytest.mark.parametrize("form", ["folder", "list", "pattern"])
def test_counting_and_reading_load_each_index_once(
    tmp_path: Path, loads: Counter[str], form: str
) -> None:
    shards = _write(tmp_path / "ds")
    source: Any = {
        "folder": str(tmp_path / "ds"),
        "list": shards,
        "pattern": str(tmp_path / "ds" / "shard-{000000..000002}.tar"),
    }[form]
    ds = Dataset(source)
    assert len(ds) == 25  # the counts, from the indexes
    assert [s["__key__"] for s in ds] == [f"s{i:04d}" for i in range(25)]
    assert [s["__key__"] for s in ds][-1] == "s0024"  # a second pass
    assert loads == Counter({shard: 1 for shard in shards})


def test_mix_sources_load_each_index_once(tmp_path: Path, loads: Counter[str]) -> None:
    a, b = _write(tmp_path / "a", 12), _write(tmp_path / "b", 8)
    mixed = mix([Dataset(str(tmp_path / "a")), Dataset(str(tmp_path / "b"))], weights=[1, 1])
    assert sum(1 for _ in mixed) > 0
    assert loads and all(loads[shard] == 1 for shard in loads) and set(loads) <= {*a, *b}


def test_an_index_changed_after_counting_is_loaded_again_and_checked(
    tmp_path: Path, loads: Counter[str]
) -> None:
    shards = _write(tmp_path / "ds")
    ds = Dataset(str(tmp_path / "ds"))
    assert len(ds) == 25
    with open(shards[0] + ".idx") as f:
        doc = json.load(f)
    doc["offsets"][1] += 512  # spans that no longer follow one another
    with open(shards[0] + ".idx", "w") as f:
        json.dump(doc, f)
    with pytest.raises(FormatError) as caught:
        list(ds)
    assert caught.value.url == shards[0] + ".idx" and loads[shards[0]] == 2


@pytest.mark.skipif(sys.byteorder != "little", reason="edits little-endian sizes")
def test_a_table_that_fails_its_spans_still_counts_and_is_refused_at_its_shard(
    tmp_path: Path, loads: Counter[str]
) -> None:
    shards = _write(tmp_path / "ds")
    with open(shards[0] + ".idx") as f:
        doc = json.load(f)
    sizes = array("I", base64.b64decode(doc["members"]["sizes"]))
    sizes[0] += 5000  # sample 0's members overfill its span
    doc["members"]["sizes"] = base64.b64encode(sizes.tobytes()).decode()
    with open(shards[0] + ".idx", "w") as f:
        json.dump(doc, f)
    seen: list[Exception] = []
    ds = Dataset(str(tmp_path / "ds"), handler=lambda exc: seen.append(exc) or True)
    keys = {s["__key__"] for s in ds}  # (the epoch is made up to its count by repeats)
    assert keys == {f"s{i:04d}" for i in range(10, 25)}  # that shard refused, the rest read
    assert seen and all(isinstance(e, FormatError) for e in seen)
    urls = {e.url for e in seen if isinstance(e, FormatError)}
    assert shards[0] + ".idx" in urls and urls <= {shards[0], shards[0] + ".idx"}
    with pytest.raises(FormatError, match="do not fill its span"):
        list(Dataset(str(tmp_path / "ds")))


def test_counts_fill_the_cache_only_up_to_its_limit(tmp_path: Path, loads: Counter[str]) -> None:
    """Past the cache's limit (in samples), indexes are counted and let go: the shards
    read first are loaded again at their turn, never more than twice."""
    shards = _write(tmp_path / "ds")
    ds = Dataset(str(tmp_path / "ds"))
    ds._recipe.read.indexes.limit = 10  # one shard's table
    assert len(ds) == 25 and len(list(ds)) == 25
    assert loads[shards[0]] == 1 and all(loads[shard] == 2 for shard in shards[1:])
