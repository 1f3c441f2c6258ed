"""Shard digests (``--hash``): one registry, recorded with the algorithm's name, checked by
verify, never changing the shards' bytes; older sha256 manifests still read and verify."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import blake3
import pytest
import xxhash
from helpers.build import make_corpus

import shardkit
from shardkit import BuildOptions, ShardWriter
from shardkit.cli import main
from shardkit.digest import HASHES, entry_digest, parse_digest
from shardkit.errors import ConfigError, FormatError, MissingDependencyError
from shardkit.tools import verify

REFERENCE = {
    "sha256": lambda data: hashlib.sha256(data).hexdigest(),
    "blake3": lambda data: blake3.blake3(data).hexdigest(),
    "xxh3-128": lambda data: xxhash.xxh3_128(data).hexdigest(),
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_corpus(str(tmp_path_factory.mktemp("digest") / "src"), count=60)


def _samples(n: int) -> list[dict[str, Any]]:
    return [{"__key__": f"k{i:04d}", "bin": os.urandom(500) + bytes([i % 256])} for i in range(n)]


@pytest.mark.parametrize("name", ["sha256", "blake3", "xxh3-128"])
def test_shardwriter_digest_names_its_algorithm(name: str, tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "s-%03d.tar"), max_count=4, hash=name) as sink:
        for sample in _samples(10):
            sink.write(sample)
    for info in sink.shards:
        data = Path(info.url).read_bytes()
        assert info.digest == f"{name}:{REFERENCE[name](data)}"


def test_no_hash_and_unknown_hash(tmp_path: Path) -> None:
    with ShardWriter(str(tmp_path / "n-%03d.tar"), max_count=4, hash="none") as sink:
        sink.write(_samples(1)[0])
    assert sink.shards[0].digest == "" and sink.shards[0].bytes > 0
    with pytest.raises(ConfigError, match="hash must be one of blake3, sha256, xxh3-128, none"):
        ShardWriter(str(tmp_path / "m-%03d.tar"), hash="md5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="hash must be one of"):
        BuildOptions(hash="sha1")  # type: ignore[arg-type]


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "xxhash", None)  # import xxhash now raises ImportError
    with pytest.raises(MissingDependencyError) as info:
        BuildOptions(hash="xxh3-128")
    assert info.value.message == (
        "hash 'xxh3-128' needs xxhash, which is not installed: pip install 'shardkit[xxhash]'"
    )


def test_build_records_each_digest_and_the_bytes_do_not_change(corpus: str, tmp_path: Path) -> None:
    files: list[dict[str, bytes]] = []
    for name in HASHES:
        out = tmp_path / name
        options = BuildOptions(max_count=15, workers=2, hash=name)
        shardkit.build(corpus, str(out), options=options)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["options"].get("hash", "sha256") == name  # sha256: as before --hash
        for entry in manifest["shards"]:
            data = (out / entry["name"]).read_bytes()
            want = None if name == "none" else f"{name}:{REFERENCE[name](data)}"
            assert entry["digest"] == want and "sha256" not in entry
        files.append({p.name: p.read_bytes() for p in out.iterdir() if p.suffix == ".tar"})
        assert verify([str(out)]).ok
    assert all(f == files[0] for f in files[1:])  # metadata only: same shards every time


@pytest.mark.parametrize("name", ["blake3", "xxh3-128", "sha256"])
def test_verify_finds_a_changed_byte_with_the_manifests_algorithm(
    name: str, corpus: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    shardkit.build(corpus, str(out), options=BuildOptions(max_count=30, workers=1, hash=name))
    shard = sorted(out.glob("shard-*.tar"))[0]
    before = REFERENCE[name](shard.read_bytes())
    data = bytearray(shard.read_bytes())
    data[600] ^= 1  # inside the first member's data: the tar structure stays valid
    shard.write_bytes(bytes(data))
    after = REFERENCE[name](bytes(data))
    problems = verify([str(out)]).problems
    assert [(p.shard, p.message) for p in problems] == [
        (str(shard), f"digest {name}:{after} differs from the manifest's {name}:{before}")
    ]


def test_an_older_sha256_manifest_reads_verifies_and_counts_as_built(
    corpus: str, tmp_path: Path
) -> None:
    out = tmp_path / "old"
    options = BuildOptions(max_count=30, workers=1, hash="sha256")
    shardkit.build(corpus, str(out), options=options)
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    assert "hash" not in manifest["options"]  # sha256 builds keep the fingerprint of before
    for entry in manifest["shards"]:
        entry["sha256"] = entry.pop("digest").removeprefix("sha256:")
    path.write_text(json.dumps(manifest))
    assert verify([str(out)]).ok
    again = shardkit.build(corpus, str(out), options=options)
    assert again.resumed_tasks == -1  # found complete, not rebuilt
    assert [s.digest for s in again.shards] == [
        f"sha256:{REFERENCE['sha256']((out / s.name).read_bytes())}" for s in again.shards
    ]
    shard = out / again.shards[0].name
    data = bytearray(shard.read_bytes())
    data[600] ^= 1  # inside the first member's data
    shard.write_bytes(bytes(data))
    assert [p.message.split(" ")[0] for p in verify([str(out)]).problems] == ["digest"]


def test_a_malformed_digest_in_a_manifest_is_a_format_error(tmp_path: Path) -> None:
    assert entry_digest({"sha256": "ab" * 32}) == "sha256:" + "ab" * 32
    for bad in ("md5:00", "blake3:xyz", "sha256:" + "AB" * 32, 7):
        with pytest.raises(ValueError):
            entry_digest({"digest": bad})
    with ShardWriter(str(tmp_path / "s-%03d.tar"), max_count=4) as sink:
        sink.write(_samples(1)[0])
    doc = {"shards": [{"name": "s-000.tar", "digest": "crc:1234"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="unknown digest algorithm 'crc'"):
        shardkit.tools.read_manifest(str(tmp_path / "manifest.json"))


def test_one_parser_reads_every_recorded_digest_back() -> None:
    """Manifests and journals read digests through parse_digest: ALGO:HEX, an older
    record's bare sha256 hex, or nothing; anything else is refused, not trusted."""
    hexdigest = "ab" * 32
    assert parse_digest(f"blake3:{hexdigest}") == f"blake3:{hexdigest}"
    assert parse_digest(hexdigest) == f"sha256:{hexdigest}"
    assert parse_digest("") == parse_digest(None) == ""
    for bad in ("zz", "md5:00", f"sha256:{hexdigest[:-2]}", 7, ["sha256"]):
        with pytest.raises(ValueError):
            parse_digest(bad)


def test_tool_cli_prints_digests_that_sha256sum_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ShardWriter(str(tmp_path / "in-%03d.tar"), max_count=100) as sink:
        for sample in _samples(12):
            sink.write(sample)
    pattern = str(tmp_path / "out-%03d.tar")
    assert (
        main(["split", sink.shards[0].url, "-o", pattern, "--max-count", "5", "--hash", "sha256"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    (tmp_path / "SUMS").write_text("\n".join(lines) + "\n")
    checked = subprocess.run(
        ["sha256sum", "-c", str(tmp_path / "SUMS")], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0 and checked.stdout.count(": OK") == 3
    assert main(["cat", sink.shards[0].url, "-o", str(tmp_path / "all.tar")]) == 0
    assert capsys.readouterr().out == ""  # default: no digest, none computed
