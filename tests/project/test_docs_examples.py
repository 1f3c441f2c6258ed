"""docs/reading.md's examples for each modality run as written, on shards written for them:
the code is read from the page (not a copy of it), so the page cannot drift from the code.

Each example prints what it reads; its first printed line must show the shape the page's
comment after that ``print`` promises, and the rest of that comment as this data makes it."""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.build import make_mp4

import shardkit
from shardkit.demo import make_jpeg

READING = Path(__file__).resolve().parents[2] / "docs" / "reading.md"


def _example(heading: str) -> str:
    """The first python block of the section of docs/reading.md whose heading starts so."""
    text = READING.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}")
    block = re.compile(r"^```python\n(.*?)^```", re.S | re.M).search(text, start)
    assert block is not None, heading
    following = text.find("\n## ", start + 1)
    assert following == -1 or block.start() < following, f"{heading}: no example"
    return block.group(1)


def _flac(frames: int) -> bytes:
    t = np.arange(frames, dtype=np.float32) / 48000
    out = io.BytesIO()
    sf.write(out, 0.3 * np.sin(2 * np.pi * 440 * t), 48000, format="FLAC", subtype="PCM_16")
    return out.getvalue()


def _write(path: Path, samples: list[dict[str, object]]) -> None:
    with shardkit.ShardWriter(str(path).replace("000000", "%06d")) as sink:
        for sample in samples:
            sink.write(sample)
    assert path.exists()


def _run(code: str, folder: Path) -> list[str]:
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(READING), "exec"), {"__name__": "__main__"})
    finally:
        os.chdir(cwd)
    return out.getvalue().splitlines()


def _promised(code: str) -> str:
    """The comment after the example's print: what its first line shows."""
    match = re.search(r"print\(.*\)\s*#\s*(.*)$", code, re.M)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("section", ["Audio", "Video", "Images at training size"])
def test_each_modality_example_of_docs_reading_runs(section: str, tmp_path: Path) -> None:
    if section == "Audio":
        _write(
            tmp_path / "speech-000000.tar",
            [
                {"__key__": f"u{i}", "flac": _flac(4800 * (i + 1)), "txt": f"utterance {i}"}
                for i in range(2)
            ],
        )
    elif section == "Video":
        clip = make_mp4(12, width=64, height=48)
        _write(
            tmp_path / "clips-000000.tar",
            [{"__key__": f"v{i}", "mp4": clip, "txt": "a cat"} for i in range(2)],
        )
    else:
        rng = random.Random(0)
        _write(
            tmp_path / "shard-000000.tar",
            [
                {"__key__": f"i{i}", "jpg": make_jpeg(rng, 0, min_side=300, max_side=400), "cls": 0}
                for i in range(2)
            ],
        )
    code = _example(section)
    lines = _run(code, tmp_path)
    assert lines, f"{section}: the example printed nothing"
    promised = _promised(code)
    shape = re.match(r"\(([\d, ]+)\)", promised)
    assert shape is not None and lines[0].startswith(f"({shape.group(1)})"), (lines[0], promised)
    rest = {  # what the comment says after the shape, as this data makes it print
        "Audio": "float32 48000 utterance 0",
        "Video": "a cat",
        "Images at training size": "uint8 0",
    }[section]
    assert rest in promised and lines[0].endswith(rest), (lines[0], promised)
