"""One rotation: numbered shard files, cut, commit, next, last key, max_shards.

``writer.Rotation`` is the only code that rotates shard files; ``ShardWriter``, ``split``'s
byte copy (``tools._rawsplit``) and the build's ``PartWriter`` compose it. The scans below
fail when a second rotation, a second last-key state, a second ``max_shards`` count, a
second commit-or-discard ``__exit__`` or a second ``Write`` alias appears in the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import shardkit
from shardkit.builder._partwriter import PartWriter
from shardkit.builder._store import LocalStore
from shardkit.formats import tar
from shardkit.formats.cut import Cut
from shardkit.formats.record import ShardRecord
from shardkit.tools import split
from shardkit.writer import ShardWriter

ROOT = Path(shardkit.__file__).parent


def _definitions() -> list[tuple[str, ast.ClassDef | ast.FunctionDef]]:
    """Every module-level class and function of shardkit, with its qualified name."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(("shardkit", *path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                found.append((f"{module.removesuffix('.__init__')}.{node.name}", node))
    return found


def _methods_called(node: ast.AST) -> set[str]:
    return {
        call.func.attr
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
    }


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_one_rotation_cuts_and_commits_shard_files() -> None:
    # Was: ShardWriter, tools._rawsplit.RawShards and builder.partwriter.PartWriter each
    # asked ShardFile.full, committed and opened the next.
    rotations = {
        name for name, node in _definitions() if {"full", "commit"} <= _methods_called(node)
    }
    assert rotations == {"shardkit.writer.Rotation"}


def test_one_last_key_carried_across_shards() -> None:
    # Was: a ``_last_key`` beside ShardFile.last_key in each of the three rotations.
    holders = set()
    for name, node in _definitions():
        for target in ast.walk(node):
            stored = isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store)
            if stored and target.attr in ("_last_key", "last_key"):  # type: ignore[attr-defined]
                holders.add(name)
    # TarWriter is one tar stream (no files, no rotation): formats' own writer.
    assert holders == {
        "shardkit.writer.ShardFile",
        "shardkit.writer.Rotation",
        "shardkit.formats._tarwrite.TarWriter",
    }


def test_max_shards_is_counted_once() -> None:
    # Was: RawShards and tools._outputs.Output each compared their shards to max_shards.
    counting = set()
    for name, node in _definitions():
        for compare in ast.walk(node):
            if isinstance(compare, ast.Compare) and any(
                isinstance(op, (ast.GtE, ast.Gt, ast.Eq)) for op in compare.ops
            ):
                names = {_name(side) for side in (compare.left, *compare.comparators)}
                if "max_shards" in names:
                    counting.add(name)
    assert counting == {"shardkit.writer.Rotation"}


def test_one_commit_or_discard_exit_and_one_write_alias() -> None:
    # Was: the same __exit__ in AtomicFile, ShardFile, ShardWriter and tools' Output, and
    # ``Write = Callable[[memoryview], object]`` in three modules.
    exits, aliases = set(), set()
    for name, node in _definitions():
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__exit__":
                    called = _methods_called(item)
                    if called & {"commit", "close"} and called & {"discard", "abort"}:
                        exits.add(name)
    for path in sorted(ROOT.rglob("*.py")):
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(stmt, ast.Assign) and "Write" in [_name(t) for t in stmt.targets]:
                aliases.add(path.relative_to(ROOT).as_posix())
    assert exits == {"shardkit.storage._writing.CommitOrDiscard"}
    assert aliases == {"formats/_tarparse.py"}


def _samples(n: int) -> list[dict[str, bytes | str]]:
    return [{"__key__": f"k{i:03d}", "bin": bytes([i]) * (100 + 37 * i)} for i in range(n)]


def test_every_rotation_cuts_the_same_shards_with_the_same_bytes(tmp_path: Path) -> None:
    samples = _samples(23)
    with ShardWriter(str(tmp_path / "w-%03d.tar"), max_count=5, max_size=4000) as writer:
        for sample in samples:
            writer.write(sample)
    written = [(info.samples, info.bytes, info.digest) for info in writer.shards]
    made = split(
        [info.url for info in writer.shards],
        str(tmp_path / "s-%03d.tar"),
        max_count=5,
        max_size=4000,
    )
    parts = PartWriter(
        LocalStore(str(tmp_path)),
        "p-%03d.tar",
        cut=Cut(5, 4000, trailer=len(tar.END_OF_ARCHIVE)),
        trailer=tar.END_OF_ARCHIVE,
    )
    for sample in samples:
        fields = [("bin", bytes(sample["bin"]))]
        chunks, size = tar.tar_chunks(str(sample["__key__"]), fields)
        parts.add(str(sample["__key__"]), chunks, size)
    records = parts.close()
    assert len(written) > 3
    assert [(i.samples, i.bytes, i.digest) for i in made] == written
    # The build's parts are shard records named as in the store, not tuples.
    assert all(type(record) is ShardRecord for record in records)
    assert [r.name for r in records] == [f"p-{n:03d}.tar" for n in range(len(written))]
    assert [(r.samples, r.bytes) for r in records] == [(s, b) for s, b, _ in written]
    for record, info in zip(records, writer.shards, strict=True):
        assert (tmp_path / record.name).read_bytes() == Path(info.url).read_bytes()


@pytest.mark.parametrize("raw", [True, False])
def test_max_shards_stops_after_that_many_shards(tmp_path: Path, raw: bool) -> None:
    with ShardWriter(str(tmp_path / "in-%d.tar"), max_count=None, max_size=None) as writer:
        for sample in _samples(20):
            writer.write(sample)
    out = str(tmp_path / ("o-%03d.tar" if raw else "o-%03d.tar.gz"))
    got = split([writer.shards[0].url], out, max_count=3, max_shards=2)
    assert [info.samples for info in got] == [3, 3]
    shards = sorted(p.name for p in tmp_path.glob("o-*") if p.suffix != ".idx")
    assert shards == [Path(info.url).name for info in got]  # no third shard left behind
