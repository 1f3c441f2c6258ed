"""The README's code blocks run as written, in a fresh folder with small generated data.

How a block is run:

* ``python`` and ``sh`` blocks run (others, such as ``text``, are not code);
  ``python`` blocks are executed with ``exec`` in the folder, one namespace per block,
  as a script's main module (``__name__ == "__main__"``, so guarded code runs).
  Names a snippet takes as given (``jpeg_bytes``, ``raw_sample``, ``epochs``,
  ``torchvision``) come from :data:`GIVEN`; nothing else is defined for it.
* ``sh`` blocks run line by line (continuation lines joined) with ``bash -e``; the lines of
  a block of ``shardkit build`` lines only (the *Packing* block) are alternatives, each run
  in a fresh copy of the folder; the other blocks run top to bottom in one folder.
  ``shardkit`` and ``python3`` on PATH are this test's interpreter (a wrapper in a
  temporary bin folder). ``pip install`` lines are not run: the test environment is the
  installation they describe.
* :data:`SUBSTITUTE` lists the only textual changes: remote URLs become local folders.
  Each substitution must still match something, so a stale entry fails the test.
* :data:`NOT_RUN` names the blocks that need what a test cannot start here (the repository's
  Makefile, a Ray or Dask cluster), with the tests that cover them instead.

The folder holds ``images/`` (an ImageFolder of 64x64 JPEGs in three classes: one size,
since the reading example batches decoded images as they are), ``list.csv``
(path,label), ``urls.parquet`` (the same rows, its path column named url),
``old/shard-000000.tar`` .. ``old/shard-000099.tar``, ``data/`` (a ``shardkit build`` of
``images/``), ``a.tar`` / ``b.tar`` (two of its shards), ``pairs/`` (samples of a JPEG, a
caption and a FLAC clip), ``captions.csv`` (url,caption), and ``speech/`` / ``videos/``
(shards of FLAC + txt and of MP4 + txt samples), ``docs.jsonl`` and ``tokenizer.json``
(the token example's documents and a word-level tokenizer).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.build import make_flac, make_mp4

import shardkit
from shardkit.demo import make_image_folder, make_jpeg

README = Path(__file__).resolve().parents[2] / "README.md"

SUBSTITUTE = [
    ("s3://bucket/images", "images"),  # the build's remote SRC and OUT
    ("s3://bucket/shards", "remote-shards"),
    ('"s3://bucket/train/"', '"data/"'),  # the reading example
]

NOT_RUN = {
    "make demo": "the repository's Makefile (tests/project/test_demo.py runs the demo)",
    "ray start --head": "a Ray and a Dask cluster (tests/scale/test_scale_*.py run them locally)",
    "shardkit view train/": "a server that runs until stopped (tests/view/test_view*.py run it)",
}


class _FakeMNIST:
    """What ``torchvision.datasets.MNIST("data")`` is to ``shardkit.build``: a sized,
    indexable dataset of (PIL image, int label)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        return Image.new("L", (28, 28), index * 10), index % 10


GIVEN: dict[str, Any] = {
    "jpeg_bytes": make_jpeg(random.Random(1), 0),
    "raw_sample": {"__key__": "cat/0001", "jpg": make_jpeg(random.Random(2), 1), "cls": b"3"},
    "epochs": 1,
    "torchvision": types.SimpleNamespace(datasets=types.SimpleNamespace(MNIST=_FakeMNIST)),
}


def readme_blocks() -> list[tuple[int, str, str]]:
    """(line, language, code) of each fenced block with a language."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^```(\w+)\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((line, match.group(1), match.group(2)))
    return blocks


def _substituted(code: str, used: set[str]) -> str:
    for old, new in SUBSTITUTE:
        if old in code:
            used.add(old)
            code = code.replace(old, new)
    return code


def _make_folder(root: Path) -> None:
    rng = random.Random(0)
    images = root / "images"
    classes = ["circle", "square", "stripes"]
    make_image_folder(str(images), count=0, classes=classes)
    rows = []
    with open(root / "list.csv", "w") as f:
        f.write("path,label\n")
        for i in range(160):
            path = images / classes[i % 3] / f"img_{i:06d}.jpg"
            path.write_bytes(make_jpeg(rng, i % 3, min_side=64, max_side=64))
            f.write(f"{path.relative_to(root)},{i % 3}\n")
            rows.append({"url": str(path.relative_to(root)), "label": i % 3})
    pq.write_table(pa.Table.from_pylist(rows), root / "urls.parquet")
    (root / "old").mkdir()
    with shardkit.ShardWriter(str(root / "old/shard-%06d.tar"), max_count=1) as sink:
        for i in range(100):
            sink.write({"__key__": f"old/{i:04d}", "jpg": make_jpeg(rng, i % 3), "cls": i % 3})
    options = shardkit.BuildOptions(max_count=64, workers=1)
    result = shardkit.build(str(images), str(root / "data"), options=options)
    shutil.copy(root / "data" / result.shards[0].name, root / "a.tar")
    shutil.copy(root / "data" / result.shards[1].name, root / "b.tar")
    _make_media(root, rows)
    _make_documents(root)


def _make_documents(root: Path) -> None:
    """The token example's inputs: docs.jsonl and a word-level tokenizer.json (no download)."""
    import tokenizers

    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    with open(root / "docs.jsonl", "w") as f:
        for i in range(300):
            text = " ".join(words[(i * 7 + j) % 8] for j in range(5 + i % 40))
            f.write(json.dumps({"text": text}) + "\n")


def _make_media(root: Path, rows: list[dict[str, Any]]) -> None:
    """The modality examples' inputs: pairs/, captions.csv, speech/ and videos/."""
    pairs = root / "pairs"
    pairs.mkdir()
    with open(root / "captions.csv", "w") as f:
        f.write("url,caption\n")
        for i, row in enumerate(rows[:12]):
            f.write(f"{row['url']},a picture number {i}\n")
            shutil.copy(root / row["url"], pairs / f"{i:04d}.jpg")
            (pairs / f"{i:04d}.txt").write_text(f"a picture number {i}")
            (pairs / f"{i:04d}.flac").write_bytes(make_flac(0.1, seed=i))
    with shardkit.ShardWriter(str(root / "speech/shard-%06d.tar"), max_count=8) as sink:
        for i in range(12):
            sink.write({"__key__": f"s{i:04d}", "flac": make_flac(0.1, seed=i), "txt": f"{i}"})
    video = make_mp4(20)
    with shardkit.ShardWriter(str(root / "videos/shard-%06d.tar"), max_count=8) as sink:
        for i in range(4):
            sink.write({"__key__": f"v{i:04d}", "mp4": video, "txt": f"clip {i}"})


def _bin_folder(root: Path) -> str:
    """A folder with ``shardkit`` and ``python3`` running this interpreter."""
    folder = root / "bin"
    folder.mkdir()
    for name, run in (("shardkit", f'"{sys.executable}" -m shardkit'), ("python3", None)):
        script = folder / name
        script.write_text(f'#!/bin/sh\nexec {run or chr(34) + sys.executable + chr(34)} "$@"\n')
        script.chmod(0o755)
    return str(folder)


def _shell_lines(code: str) -> list[str]:
    lines = code.replace("\\\n", " ").splitlines()
    skip = ("#", "pip install", "python -m pip install")
    return [line for line in lines if line.strip() and not line.lstrip().startswith(skip)]


def _run_shell(line: str, cwd: Path, path: str) -> None:
    env = {**os.environ, "PATH": path + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", line],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    _make_folder(root / "fresh")
    return root


def test_readme_blocks_are_all_run_or_explained() -> None:
    blocks = readme_blocks()
    assert len([b for b in blocks if b[1] in ("sh", "python")]) >= 8
    for marker in NOT_RUN:  # every reason still names exactly one block
        assert len([b for b in blocks if marker in b[2]]) == 1, marker


# The reading example asks for 8 DataLoader workers; this machine may have fewer cores.
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_readme_snippets_run_as_written(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _bin_folder(folder)
    shared = folder / "shared"
    shutil.copytree(folder / "fresh", shared, symlinks=True)
    used: set[str] = set()
    ran = 0
    for line, language, code in readme_blocks():
        if language not in ("sh", "python") or any(m in code for m in NOT_RUN):
            continue
        code = _substituted(code, used)
        if language == "python":
            monkeypatch.chdir(shared)
            namespace = {"__name__": "__main__", **GIVEN}
            exec(compile(code, f"README.md:{line}", "exec"), namespace)
        elif all(c.startswith("shardkit build ") for c in _shell_lines(code)):  # alternatives
            for number, command in enumerate(_shell_lines(code)):
                alone = folder / f"build-{line}-{number}"
                shutil.copytree(folder / "fresh", alone, symlinks=True)
                _run_shell(command, alone, path)
        else:
            for command in _shell_lines(code):
                _run_shell(command, shared, path)
        ran += 1
    assert ran >= 6
    assert used == {old for old, _ in SUBSTITUTE}


def _quickstart() -> list[tuple[int, str, str]]:
    """The blocks of the README's Quickstart section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Quickstart\n")
    end = text.index("\n## ", start + 1)
    first, last = text.count("\n", 0, start), text.count("\n", 0, end)
    return [block for block in readme_blocks() if first < block[0] < last]


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_quickstart_reads_an_image_folder_of_jpegs_and_pngs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ImageFolder often mixes formats: the quickstart's pipeline takes PNGs too."""
    from PIL import Image

    rng = random.Random(0)
    for i in range(12):
        folder = tmp_path / "images" / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 3:
            (folder / f"{i:03d}.jpg").write_bytes(make_jpeg(rng, i % 3, min_side=64, max_side=64))
        else:
            Image.new("RGB", (64, 48), (i * 20, 90, 30)).save(folder / f"{i:03d}.png")
    blocks = _quickstart()
    assert [language for _, language, _ in blocks][:2] == ["sh", "python"]  # then `view`
    path = _bin_folder(tmp_path)
    for command in _shell_lines(blocks[0][2]):
        _run_shell(command, tmp_path, path)
    seen: list[Any] = []
    code = blocks[1][2].replace("        ...", "        seen.append(labels)")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md:quickstart", "exec"), {**GIVEN, "seen": seen})
    assert sum(len(labels) for labels in seen) == 12
