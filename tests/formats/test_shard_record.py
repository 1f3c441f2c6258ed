"""The one shard record (issue 20): every writer reports a :class:`ShardRecord`, and no
other type describes a shard's name, samples, bytes and digest."""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import shardkit
from shardkit.formats.record import ShardInfo, ShardRecord
from shardkit.mapshards import map_shards
from shardkit.tools import split
from shardkit.tools._inputs import resolve_inputs
from shardkit.writer import ShardWriter

# What else may hold a digest beside samples or bytes, and why it is not the record: what a
# manifest states of a shard (any field may be missing), and what verify measured of one
# (its problems too, filled in as it reads).
_NOT_RECORDS = {"shardkit.formats.manifest.ManifestShard", "shardkit.tools.verify.ShardCheck"}
# What else counts samples and bytes without a digest, and why it is not the record: what
# stats measured of a shard's samples (their bytes as stored in the archive, uncompressed,
# without its end: not the file's size, which is the record's; see the test below), and a
# build's progress (a run's counts, not a shard's).
_COUNTS_NOT_RECORDS = {
    "shardkit.tools.stats.ShardStats",
    "shardkit.builder._results.BuildProgress",
    "shardkit.builder._run._Tally",  # the driver's running totals of a whole build
}


def _keep(sample: dict[str, Any]) -> dict[str, Any]:
    return sample


def test_no_other_class_describes_a_shard() -> None:
    # Was: six types (ShardInfo, ShardRecord, PartInfo, ShardResult, ManifestShard,
    # ShardRef) each with their own name, samples, bytes and digest fields.
    root = Path(shardkit.__file__).parent
    found, counts = set(), set()
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("shardkit", *path.relative_to(root).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                fields = {
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
                if "digest" in fields and fields & {"samples", "bytes"}:
                    found.add(f"{module}.{node.name}")
                elif {"samples", "bytes"} <= fields:
                    counts.add(f"{module}.{node.name}")
    assert found - _NOT_RECORDS == {"shardkit.formats.record.ShardRecord"}
    assert counts == _COUNTS_NOT_RECORDS  # a new one: fold it into the record, or say why not


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def test_every_writer_reports_the_record_of_what_it_wrote(tmp_path: Path) -> None:
    samples = [{"__key__": f"k{i:03d}", "txt": b"x" * (i + 1)} for i in range(10)]
    with ShardWriter(str(tmp_path / "w-%02d.tar"), max_count=4, hash="sha256") as writer:
        for sample in samples:
            writer.write(sample)
    written = writer.shards
    inputs = [info.url for info in written]
    made = split(inputs, str(tmp_path / "s-%02d.tar"), max_count=6, hash="sha256")
    mapped = map_shards(_keep, inputs, str(tmp_path / "m-%02d.tar"), workers=1, hash="sha256")
    assert [r.shard.samples for r in mapped] == [4, 4, 2]
    for info in [*written, *made, *(r.shard for r in mapped)]:
        assert isinstance(info, ShardInfo) and isinstance(info, ShardRecord)
        assert info.name == os.path.basename(info.url)
        assert (info.bytes, info.digest) == (os.path.getsize(info.url), _sha256(info.url))
    assert [info.index for info in made] == [0, 1]
    assert [(r.output, r.samples_out, r.digest) for r in mapped] == [
        (r.shard.url, r.shard.samples, r.shard.digest) for r in mapped
    ]
    again = map_shards(_keep, inputs, str(tmp_path / "m-%02d.tar"), workers=1)
    assert [(r.resumed, r.samples_out, r.digest) for r in again] == [(True, None, None)] * 3
    assert [r.bytes for r in again] == [r.bytes for r in mapped]


def test_a_tool_input_carries_what_its_manifest_states(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "w-%02d.tar"), max_count=3) as writer:
        for i in range(5):
            writer.write({"__key__": f"k{i}", "txt": b"t"})
    entries = [
        {"name": info.name, "samples": info.samples, "bytes": info.bytes, "digest": info.digest}
        for info in writer.shards
    ]
    (tmp_path / "manifest.json").write_text(json.dumps({"shards": entries}))
    refs = resolve_inputs([str(tmp_path)])
    assert [(r.samples, r.bytes, r.digest) for r in refs] == [
        (e["samples"], e["bytes"], e["digest"]) for e in entries
    ]
    assert all(r.stated is not None and r.manifest is not None for r in refs)
    bare = resolve_inputs([writer.shards[0].url])
    assert (bare[0].stated, bare[0].samples, bare[0].digest) == (None, None, None)


def test_stats_measures_a_shards_samples_not_the_record_of_its_file(
    tmp_path: Path, capsys: Any
) -> None:
    """Why ``stats``' ShardStats is not the shard record: its ``bytes`` are its samples'
    bytes as stored in the archive (uncompressed, without the end-of-archive blocks), the
    record's are the file's size. ``stats --json`` keeps its three keys per shard."""
    from shardkit.cli import main
    from shardkit.tools import stats

    for pattern in ("p-%02d.tar", "g-%02d.tar.gz"):
        with ShardWriter(str(tmp_path / pattern), max_count=3, index=False) as writer:
            for i in range(3):  # 512 + 0, 512 + 512, 512 + 512 bytes as stored
                writer.write({"__key__": f"k{i}", "txt": b"x" * (100 * i)})
        record = writer.shards[0]
        measured = stats([record.url])
        shard = measured.shards[0]
        assert (shard.url, shard.samples) == (record.url, record.samples)
        assert shard.bytes == sum(measured.sizes) == 2560
        assert record.bytes != shard.bytes  # the file: 3584 bytes plain, ~150 gzipped
    url = str(tmp_path / "p-00.tar")
    assert main(["stats", url, "--json", "-q"]) == 0
    shards = json.loads(capsys.readouterr().out)["shards"]
    assert shards == [{"url": url, "samples": 3, "bytes": 2560}]
