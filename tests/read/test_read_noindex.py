"""A tar shard without an index: parsed twice per process, then read by the member table
its second parse noted (:mod:`shardkit.formats._tarderive`), slices and no header parsed, with
the samples an indexed read (and the stream) gives."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.hostile import archive, fix_checksum, header, member, outcome, pax
from helpers.tables import FIELDS, refuse_parsing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit import Dataset, Loader, ShardWriter
from shardkit.formats import tar
from shardkit.formats.members import slice_samples

if TYPE_CHECKING:
    from shardkit.formats.tar import TableNotes


def _write(folder: Path, count: int = 23, max_count: int = 10) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pattern = str(folder / "shard-%06d.tar")
    with ShardWriter(pattern, max_count=max_count, encode=False) as out:
        for i in range(count):
            out.write({"__key__": f"dir/s{i:05d}", **FIELDS[i % len(FIELDS)]})
    return folder


def _as_bytes(samples: Any, folder: Path | None = None) -> list[dict[str, Any]]:
    out = []
    for sample in samples:
        row = {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}
        if folder is not None:
            row["__url__"] = os.path.basename(row["__url__"])
        out.append(row)
    return out


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
def test_a_shard_without_an_index_reads_as_an_indexed_one_and_is_parsed_twice(
    tmp_path: Path, copy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexed = _write(tmp_path / "indexed")
    bare = Path(shutil.copytree(indexed, tmp_path / "bare"))
    for idx in bare.glob("*.idx"):
        idx.unlink()
    expected = _as_bytes(Dataset(str(indexed), copy=copy), indexed)
    ds = Dataset(str(bare), copy=copy)
    assert _as_bytes(ds, bare) == expected  # the first pass parses
    assert _as_bytes(ds, bare) == expected  # the second too, noting the tables
    refuse_parsing(monkeypatch)
    for _ in range(2):  # the next passes slice by the tables the second one noted
        got = list(ds)
        assert _as_bytes(got, bare) == expected and len(got) == 23
        kind = bytes if copy else memoryview
        assert all(isinstance(s["txt"], kind) for s in got if "txt" in s)


def test_a_single_pass_takes_no_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _write(tmp_path / "ds")
    for idx in folder.glob("*.idx"):
        idx.unlink()
    noted: list[str] = []
    member = tar.TableNotes.member

    def counting(self: TableNotes, ext: str, size: int) -> None:
        noted.append(ext)
        member(self, ext, size)

    monkeypatch.setattr(tar.TableNotes, "member", counting)
    ds = Dataset(str(folder))
    assert len(list(ds)) == 23 and noted == []  # one pass: nothing noted
    assert len(list(ds)) == 23
    assert len(noted) == sum(len(FIELDS[i % len(FIELDS)]) for i in range(23))


def test_loader_workers_read_shards_without_an_index(tmp_path: Path) -> None:
    folder = _write(tmp_path / "ds")
    for idx in folder.glob("*.idx"):
        idx.unlink()
    loader = Loader(Dataset(str(folder)), num_workers=2, multiprocessing_context="fork")
    first = sorted(s["__key__"] for s in loader)
    assert first == sorted(s["__key__"] for s in loader) == [f"dir/s{i:05d}" for i in range(23)]


def test_a_shard_replaced_between_passes_is_parsed_again(tmp_path: Path) -> None:
    folder = _write(tmp_path / "ds", count=5)
    for idx in folder.glob("*.idx"):
        idx.unlink()
    ds = Dataset(str(folder))
    assert [s["__key__"] for s in ds] == [f"dir/s{i:05d}" for i in range(5)]
    other = _write(tmp_path / "other", count=7)  # same name, other samples, other size
    os.replace(other / "shard-000000.tar", folder / "shard-000000.tar")
    assert [s["__key__"] for s in ds] == [f"dir/s{i:05d}" for i in range(7)]


def _notes_of(data: bytes, **kw: Any) -> tuple[Any, TableNotes | None]:
    """The outcome of one parse of ``data`` over a buffer, and the notes it handed on."""
    handed: list[TableNotes] = []
    first = outcome(lambda: list(tar.buffer_samples(data, on_table=handed.append, **kw)))
    assert len(handed) <= 1
    return first, (handed[0] if handed else None)


def _check_table_path(data: bytes) -> bool:
    """The stream's outcome, the first parse's and, when its notes make a table, the
    table's (slices), are the same; whether there was a table."""
    streamed = outcome(lambda: list(tar.iter_samples(io.BytesIO(data))))
    made = False
    for copy in (True, False):
        first, notes = _notes_of(data, copy=copy)
        if isinstance(streamed, Exception):
            assert (type(first), str(first)) == (type(streamed), str(streamed))
        else:
            assert _as_bytes(first) == streamed
        table = None if notes is None else notes.table()
        if table is None:
            continue
        assert not isinstance(streamed, Exception)
        sliced = list(slice_samples(data, table, 0, len(table.offsets), url=None, copy=copy))
        assert _as_bytes(sliced) == streamed
        made = True
    return made


def _plain(name: bytes, data: bytes = b"x") -> bytes:
    return member(name, data)


@pytest.mark.parametrize(
    "data",
    [
        archive(_plain(b"a.txt"), _plain(b"a.cls"), _plain(b"b.txt")),
        archive(_plain(b"d.x/a.TXT"), _plain(b"d.x/a.seg.png", b"p" * 600)),
        _plain(b"a.txt") + _plain(b"b.txt"),  # no end blocks: ends with the bytes
        _plain(b"a.txt", b"") + _plain(b"b.txt") + bytes(512) + b"garbage after the end",
        archive(),
    ],
    ids=["plain", "dirs-upper-dotted", "no-end-blocks", "bytes-after-the-end", "empty"],
)
def test_plain_shards_note_a_table_that_reads_as_the_stream(data: bytes) -> None:
    assert _check_table_path(data) == (data != archive())


@pytest.mark.parametrize(
    "data",
    [
        archive(_plain(b"a.txt"), _plain(b"a.txt")),  # an extension twice
        archive(_plain(b"a.txt"), _plain(b"a.TXT")),  # twice, once lower-cased
        archive(_plain(b"a.txt"), _plain(b"a.__key__")),  # a field a sample reserves
        archive(_plain(b"a.txt"), _plain(b"a.")),  # an empty extension
        archive(_plain(b"a.txt"), _plain(b"__meta__"), _plain(b"b.txt")),  # no key
        archive(_plain(b"a.txt"), member(b"d/", b"", b"5"), _plain(b"b.txt")),  # a folder
        archive(pax({"path": b"p.txt"}), _plain(b"x"), _plain(b"q.txt")),  # PAX
        archive(_plain(b"a.txt"), member(b"l.txt", b"", b"2", linkname=b"a.txt")),  # link
        _plain(b"a.txt") + _plain(b"b.txt")[:700],  # cut inside a member
        _plain(b"a.txt") + _plain(b"b.txt")[:300],  # cut inside a header
        archive(_plain(b"a.txt"), fix_checksum(header(b"b.txt", 1))[:148] + b"9" * 8 + bytes(356)),
        _plain(b"a.txt") + b"not a tar header".ljust(512, b"!"),
    ],
    ids=[
        "twice",
        "twice-lowered",
        "reserved",
        "empty-ext",
        "meta",
        "folder",
        "pax",
        "link",
        "cut-member",
        "cut-header",
        "bad-checksum",
        "garbage",
    ],
)
def test_shards_a_table_cannot_describe_note_none_and_read_as_the_stream(data: bytes) -> None:
    assert not _check_table_path(data)


@pytest.mark.parametrize("limit", [1024, 2 << 40])
def test_a_member_limit_other_than_the_tables_notes_only_within_it(limit: int) -> None:
    data = archive(_plain(b"a.txt", b"x" * 2000), _plain(b"b.txt"))
    first, notes = _notes_of(data, max_member_size=limit)
    assert notes is None  # over a lowered limit: refused; a raised one: not noted
    if limit == 1024:
        assert isinstance(first, Exception)


_NAMES = st.sampled_from(
    [
        b"a.txt",
        b"a.cls",
        b"a.TXT",
        b"b.txt",
        b"b.json",
        b"d/c.x.y",
        b"d.e/f",
        b".h",
        b"a.",
        b"__x__",
    ]
)
_MEMBER = st.one_of(
    st.builds(_plain, _NAMES, st.binary(max_size=1100)),
    st.builds(lambda n: member(n, b"", b"5"), _NAMES),
    st.builds(lambda n: header(n, 1)[:512], _NAMES),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_MEMBER, max_size=8), st.sampled_from(["end", "bare", "cut"]))
def test_any_member_sequence_reads_the_same_by_table_and_stream(
    members: list[bytes], ending: str
) -> None:
    data = b"".join(members)
    if ending == "end":
        data = archive(*members)
    elif ending == "cut" and data:
        data = data[: len(data) * 2 // 3]
    _check_table_path(data)
