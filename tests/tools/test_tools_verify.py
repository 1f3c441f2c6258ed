from __future__ import annotations

import gzip
import hashlib
import json
import os

import pytest
from helpers.tools import samples, tar_bytes, write_shards

from shardkit.cli import main
from shardkit.formats import tar
from shardkit.tools import verify, write_index


def put(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def messages(report: object) -> list[str]:
    return [p.message for p in report.problems]  # type: ignore[attr-defined]


def write_manifest(folder: str, urls: list[str]) -> None:
    shards = []
    for url in urls:
        with open(url, "rb") as f:
            data = f.read()
        count = sum(1 for _ in tar.iter_samples(open_bytes(data)))
        shards.append(
            {
                "name": os.path.basename(url),
                "samples": count,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "extra": "ignored",
            }
        )
    doc = {"format": "tar", "samples": sum(s["samples"] for s in shards), "shards": shards}
    put(os.path.join(folder, "manifest.json"), json.dumps(doc).encode())


def open_bytes(data: bytes) -> object:
    import io

    return io.BytesIO(data)


def test_clean_shards_verify_with_no_problems(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(25, images=True), per_shard=10)
    write_manifest(folder, urls)
    report = verify([folder], decode=True)
    assert report.ok, messages(report)
    assert report.samples == 25
    assert all(s.sha256 is not None for s in report.shards)


def test_truncated_shard_is_reported_with_key_and_offset(tmp_path: object) -> None:
    blob = tar_bytes(samples(4))
    path = put(os.path.join(str(tmp_path), "t.tar"), blob[: len(blob) // 2 + 100])
    report = verify([path])
    assert len(report.problems) == 1
    problem = report.problems[0]
    assert problem.message.startswith("truncated")
    assert problem.key is not None and problem.offset is not None
    cut_at_boundary = put(os.path.join(str(tmp_path), "b.tar"), blob[:1024])
    assert "no end-of-archive" in messages(verify([cut_at_boundary]))[0]


def test_truncated_gzip_shard(tmp_path: object) -> None:
    zipped = gzip.compress(tar_bytes(samples(6)), mtime=0)
    path = put(os.path.join(str(tmp_path), "t.tar.gz"), zipped[:-30])
    found = messages(verify([path]))
    assert found and any("gzip" in m or "truncated" in m for m in found)


def test_non_adjacent_members_and_duplicate_extensions(tmp_path: object) -> None:
    a1 = tar_bytes([{"__key__": "a", "txt": "1"}])[:-1024]
    b = tar_bytes([{"__key__": "b", "txt": "2"}])[:-1024]
    a2 = tar_bytes([{"__key__": "a", "cls": "3"}])[:-1024]
    dup = tar_bytes([{"__key__": "c", "txt": "x"}])[:-1024]
    path = put(os.path.join(str(tmp_path), "g.tar"), a1 + b + a2 + dup + dup + tar.END_OF_ARCHIVE)
    report = verify([path])
    found = {(p.key, p.offset): p.message for p in report.problems}
    assert "non-adjacent" in found[("a", 2048)]
    assert "duplicate extension 'txt'" in found[("c", 4096)]
    assert len(found) == 2
    assert report.shards[0].samples == 4  # what a reader sees: a, b, a, c


def test_bad_header_checksum_resyncs_and_finds_later_problems(tmp_path: object) -> None:
    good = tar_bytes(samples(5))
    data = bytearray(good)
    data[0] ^= 0xFF  # first header
    blob = bytes(data)
    cut = put(os.path.join(str(tmp_path), "c.tar"), blob[:-1024] + good[:600])
    found = messages(verify([cut]))
    assert "bad tar header checksum" in found[0] and "next header at offset 1024" in found[0]
    assert any(m.startswith("truncated") for m in found[1:])


def test_flipped_byte_in_tfrecord_is_found_and_checking_goes_on(tmp_path: object) -> None:
    folder = str(tmp_path)
    [url] = write_shards(folder, samples(5), per_shard=10, ext="tfrecord")
    with open(url, "rb") as f:
        data = bytearray(f.read())
    data[40] ^= 0x01  # inside the first record's data
    put(url, bytes(data))
    report = verify([url])
    assert len(report.problems) == 1
    assert "data CRC mismatch" in report.problems[0].message
    assert report.problems[0].offset == 0
    assert report.shards[0].samples == 5


def test_manifest_sha256_size_count_missing_and_unlisted(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(30), per_shard=10)
    write_manifest(folder, urls)
    with open(urls[1], "r+b") as f:
        f.seek(600)  # inside the first member's data: the structure stays valid
        f.write(b"Z")
    report = verify([folder])
    assert [(p.shard, p.message.split(" ")[0]) for p in report.problems] == [(urls[1], "digest")]
    os.rename(urls[2], urls[2] + ".moved.tar")
    found = {p.message for p in verify([folder]).problems}
    assert "listed in manifest.json but missing" in found
    assert "shard not listed in manifest.json" in found


def test_decode_finds_a_broken_image(tmp_path: object) -> None:
    data = samples(3, images=True)
    data[1]["jpg"] = data[1]["jpg"][:200]
    data[2]["json"] = b"{not json"
    path = put(os.path.join(str(tmp_path), "i.tar"), tar_bytes(data))
    assert verify([path]).ok
    report = verify([path], decode=True)
    assert [(p.key, p.message.split(" ")[1]) for p in report.problems] == [
        ("k/00001", "'jpg'"),
        ("k/00002", "'json'"),
    ]


def test_stale_index_is_reported(tmp_path: object) -> None:
    folder = str(tmp_path)
    [url] = write_shards(folder, samples(4), per_shard=10)
    write_index(url)
    assert verify([url]).ok
    put(url, tar_bytes(samples(3)))
    assert any("index lists 4 samples" in m for m in messages(verify([url])))


def test_cli_exit_codes_and_problem_lines(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(8), per_shard=4)
    assert main(["verify", *urls]) == 0
    assert "2 shards, 8 samples: no problems" in capsys.readouterr().err
    with open(urls[0], "rb") as f:
        blob = f.read()
    put(urls[0], blob[:3000])
    assert main(["verify", folder]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    shard, key, offset, message = out[0].split("\t")
    assert shard == urls[0] and key.startswith("k/") and offset.isdigit()
    assert message.startswith("truncated")
    assert main(["verify", "--bogus"]) == 2
    assert capsys.readouterr().err.startswith("Error:")


def test_broken_manifest_is_a_problem_and_the_shards_are_still_checked(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(6), per_shard=3)
    put(os.path.join(folder, "manifest.json"), b"{not json")
    with open(urls[1], "rb") as f:
        blob = f.read()
    put(urls[1], blob[:1500])
    report = verify([folder])
    assert [p.message.split(":")[0] for p in report.problems] == [
        "truncated",
        "manifest is not valid JSON",
    ]
    assert [s.url for s in report.shards] == urls


# verify says what it did not check, and a digest the manifest's options promise is
# required; an index's recorded sha256 and size are compared.


def _flip_a_data_byte(url: str) -> None:
    """Change one byte inside the first member's data: structure and counts stay sound."""
    with open(url, "r+b") as f:
        f.seek(512 + 2)
        byte = f.read(1)
        f.seek(512 + 2)
        f.write(bytes([byte[0] ^ 0x01]))


def _manifest_with_options(folder: str, urls: list[str], digest: str | None, algo: str) -> None:
    shards = []
    for url in urls:
        with open(url, "rb") as f:
            data = f.read()
        shards.append(
            {
                "name": os.path.basename(url),
                "samples": sum(1 for _ in tar.iter_samples(open_bytes(data))),
                "bytes": len(data),
                "digest": None if digest is None else f"sha256:{hashlib.sha256(data).hexdigest()}",
            }
        )
    doc = {"format": "tar", "shards": shards, "options": {"hash": algo}}
    put(os.path.join(folder, "manifest.json"), json.dumps(doc).encode())


def test_a_digest_removed_where_the_options_promise_one_is_a_problem(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(8), per_shard=4)
    _manifest_with_options(folder, urls, None, "blake3")  # digests nulled
    _flip_a_data_byte(urls[0])
    report = verify([folder])
    assert not report.ok
    assert (
        sum(
            "lists no digest for it while its options say hash 'blake3'" in m
            for m in messages(report)
        )
        == 2
    )
    assert main(["verify", os.path.join(folder, "manifest.json")]) == 1  # the path too
    assert "lists no digest" in capsys.readouterr().out


def test_verify_says_what_it_did_not_check(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(8), per_shard=4)
    _manifest_with_options(folder, urls, None, "none")  # built with --hash none
    _flip_a_data_byte(urls[0])
    report = verify([folder])
    assert report.ok  # nothing it could check is wrong...
    assert report.unchecked and "2 of 2 shards were compared with no digest" in report.unchecked[0]
    assert main(["verify", folder]) == 0
    err = capsys.readouterr().err
    assert "not checked: the bytes of 2 of 2 shards" in err  # ...and it says what it skipped
    _manifest_with_options(folder, urls, "sha256", "sha256")
    checked = verify([folder])
    assert checked.ok and checked.unchecked == []  # every shard's bytes held to a digest


def test_an_index_records_sha256_and_size_that_verify_compares(tmp_path: object) -> None:
    folder = str(tmp_path)
    urls = write_shards(folder, samples(8), per_shard=4)
    for url in urls:
        write_index(url, sha256=True)
    assert verify(urls).ok and verify(urls).unchecked == []
    _flip_a_data_byte(urls[0])
    assert any("differs from the index's" in m for m in messages(verify(urls)))
    with open(urls[1], "ab") as f:
        f.write(bytes(1024))  # two more zero blocks: still a sound tar, another size
    assert any(m.startswith("size ") and "index's" in m for m in messages(verify([urls[1]])))
