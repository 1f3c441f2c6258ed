"""Reading an indexed tar shard by its member table, a few samples at a time (as the
reader slices a large shard, ``reader._SLICED`` bytes' worth per step), gives the same
samples as parsing it, for layouts that change from one sample to the next, with copies
and with views; and the views stay valid after the pass."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from shardkit import Dataset, ShardWriter, reader

_LAYOUTS: list[dict[str, bytes]] = [
    {"txt": b"x" * 700, "cls": b"1"},
    {"jpg": b"\xff\xd8" + b"j" * 1500},
    {"txt": b"y" * 10, "cls": b"2", "json": b"{}"},
]


def _write(folder: Path, count: int) -> Path:
    folder.mkdir(parents=True)
    with ShardWriter(str(folder / "shard-%06d.tar"), max_count=40, encode=False) as out:
        for i in range(count):
            out.write({"__key__": f"k{i:05d}", **_LAYOUTS[(i * i) % len(_LAYOUTS)]})
    return folder


def _plain(samples: Any) -> list[dict[str, Any]]:
    return [
        {
            k: bytes(v) if isinstance(v, memoryview) else v
            for k, v in sample.items()
            if k != "__url__"
        }
        for sample in samples
    ]


@pytest.mark.parametrize("step", [1, 2048, 7000, 1 << 20])
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "views"])
def test_sliced_reads_match_the_parse_for_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, copy: bool
) -> None:
    folder = _write(tmp_path / "indexed", 97)
    parsed = tmp_path / "parsed"
    parsed.mkdir()
    for name in os.listdir(folder):
        if name.endswith(".tar"):
            shutil.copyfile(folder / name, parsed / name)
    expected = _plain(Dataset(str(parsed)))
    monkeypatch.setattr(reader, "_SLICED", step)
    got = list(Dataset(str(folder), copy=copy))
    assert _plain(got) == expected and len(expected) == 97
    assert [s["__key__"] for s in got] == [f"k{i:05d}" for i in range(97)]
    kind = bytes if copy else memoryview
    assert all(isinstance(v, kind) for s in got for k, v in s.items() if not k.startswith("__"))
