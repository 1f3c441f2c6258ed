"""`shardkit build` of a plain image folder stays lean: its start-up is part of every
whole-process figure against GNU tar (issue 27), so what it imports is checked here, in
a fresh interpreter, not left to a benchmark to notice; and what it writes for a folder
is still the previous version's bytes, whichever path (fast or general) grouped its files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.build import make_corpus_jpeg

import shardkit
from shardkit.cli import COMMANDS

# Optional libraries a plain image-folder build never needs, in the driver or a worker.
HEAVY = ("numpy", "PIL", "fsspec", "pyarrow", "torch", "tqdm", "aiohttp", "asyncio", "cv2")

_PROBE = """
import json, sys
from shardkit.cli import main
status = main(sys.argv[1:])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""


def _loaded(src: Path, out: Path, *args: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-c", _PROBE, "build", str(src), str(out), "-q", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0
    assert (out / "manifest.json").exists()
    return set(report["modules"])


@pytest.fixture
def image_folder(tmp_path: Path) -> Path:
    for i in range(6):
        folder = tmp_path / "src" / f"class_{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"img_{i}.jpg").write_bytes(make_corpus_jpeg(i))
    return tmp_path / "src"


def test_an_image_folder_build_imports_no_optional_library_nor_other_commands(
    image_folder: Path, tmp_path: Path
) -> None:
    # One worker: the workers' code runs in this process too, so it is checked as well.
    modules = _loaded(image_folder, tmp_path / "out", "--workers", "1")
    assert "shardkit.builder._worker" in modules  # the probe saw the build's own machinery
    heavy = sorted(m for m in modules if m.partition(".")[0] in HEAVY)
    assert heavy == []
    others = {f"shardkit.cli.{m}" for name, m in COMMANDS.items() if name != "build"}
    assert sorted(others & modules) == []
    assert "shardkit.engines._connect" not in modules  # a cluster's door: no local use


def test_a_pooled_image_folder_build_imports_no_optional_library(
    image_folder: Path, tmp_path: Path
) -> None:
    modules = _loaded(image_folder, tmp_path / "out", "--workers", "2")
    assert "concurrent.futures.process" in modules  # it did start a pool
    assert sorted(m for m in modules if m.partition(".")[0] in HEAVY) == []


# An 8x8 JPEG, fixed here (not made by the installed Pillow) so the bytes below hold anywhere.
_JPEG = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a1816"
    "16183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c6567"
    "63ffdb0043011112121815182f1a1a2f63423842636363636363636363636363636363636363636363636363"
    "6363636363636363636363636363636363636363636363636363ffc000110800080008030122000211010311"
    "01ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b5100002010303"
    "020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f024"
    "33627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a63646566"
    "6768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7"
    "b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffc400"
    "1f0100030101010101010101010000000000000102030405060708090a0bffc400b511000201020404030407"
    "05040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a"
    "162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a63646566676869"
    "6a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9"
    "bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c030100"
    "02110311003f00c0a28a2b80fad3ffd9"
)

# The folder's files: one-dot images (the fast path of the grouping), spellings of one
# extension, a name with two dots, a sample of two files, a stray text file, a cls file.
_FILES = (
    "cat/a.jpg",
    "cat/b.JPEG",
    "cat/c.d.jpg",
    "cat/e.jpg",
    "cat/e.txt",
    "cat/notes.txt",
    "dog/x.jpeg",
    "dog/x.cls",
    "dog/y.jpg",
    "dog/sub/z.jpg",
)

# sha256 of every output file of `shardkit build` of that folder at the defaults but
# max_count=3, as c5bd4ef writes them (the version before this start-up work).
_BASE_OUTPUT = {
    "shard-000000.tar": "1b03717be7760efb95d50556f2b5501a7e3244147a3532be848b4ed43ea65dd7",
    "shard-000000.tar.idx": "dca8008dc5152dcd16ced6270cfd7d5031054629da1742298ee108c95a0cd7cc",
    "shard-000001.tar": "487c4b4675c7ad1983ba31b841a42723252a620dfa843c65cbc134a7b81c85c8",
    "shard-000001.tar.idx": "f1c8ad5fd933c39cb0d93058a363bd71059f0cfd2043e0d59af2e4b0d94f1e73",
    "shard-000002.tar": "270f0ccc137d8e72e460adf2c812ec3c3ff78b6101a18cd1e7dedd1d07fd4638",
    "shard-000002.tar.idx": "2bddb9b5ca912dbb59c4886f7b0bee6b06d41a67c7f68db1bccfae567eeecac1",
    "skipped.jsonl": "de0f0688104019e1b6bb756bddd4d45a0f9b509d325fd5a4cf8cc7d8ef7e308d",
}


def _digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.name != "manifest.json"
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_a_folder_packs_to_the_bytes_of_the_previous_version(tmp_path: Path, workers: int) -> None:
    src = tmp_path / "src"
    for i, rel in enumerate(_FILES):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(_JPEG if ".txt" not in rel and ".cls" not in rel else b"t%d" % i)
    out = tmp_path / "out"
    shardkit.build(src, out, options=shardkit.BuildOptions(workers=workers, max_count=3))
    assert _digests(out) == _BASE_OUTPUT
