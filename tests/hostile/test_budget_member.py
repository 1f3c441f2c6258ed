"""A tar member is held whole, so its declared size goes through the budget's ``member``
limit at its header, before a byte of it is read: a ``.tar.gz`` of 1.5 MB whose second
member declares (and inflates to) 1.5 GiB of zeros is refused in one line naming the
shard, the sample and the member, as a data error (``handler=`` sees it), in bounded
memory (each reader inflated the whole 1.5 GiB: the old limit was 2 GiB, outside the
budget). The same limit applies to a mapped shard, to the writers, and to the build's
downloads, and ``SHARDKIT_MAX_MEMBER`` moves it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from helpers.budget import READERS, measure, refused_by_the_cli
from helpers.hostile import header, member, read_tar, run_measured, zeros_gzip

from shardkit.errors import EncodeError, FormatLimitError
from shardkit.formats import tar

DECLARED = 3 << 29  # 1.5 GiB: over the default member limit (1 GiB), under the old 2 GiB
_LIMIT_MB = 200
_FIRST = member(b"a.txt", b"first")


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A good sample, then a member declaring 1.5 GiB, its zeros and the end blocks."""
    path = str(tmp_path_factory.mktemp("member") / "bomb.tar.gz")
    parts = [_FIRST, header(b"big.bin", DECLARED), DECLARED, tar.END_OF_ARCHIVE]
    assert zeros_gzip(path, parts) < 2 << 20
    return path


@pytest.mark.parametrize("entry", sorted(READERS))
def test_a_member_declaring_1_5_gib_is_refused_at_its_header(
    entry: str, bomb: str, tmp_path: Path
) -> None:
    result = measure(entry, bomb, str(tmp_path))
    assert result["peak_mb"] < _LIMIT_MB, result
    if not refused_by_the_cli(entry, result, "bomb.tar.gz", "'big.bin'", "SHARDKIT_MAX_MEMBER"):
        assert result["outcome"] == "refused", result
        kind, message = result["error"]
        assert kind == "FormatLimitError", result
        assert message == (
            f"{bomb}, sample 'big', offset {len(_FIRST)}: tar member 'big.bin': "
            "1,610,612,736 bytes declared, over the limit of 1,073,741,824 bytes for a tar "
            "member held whole (SHARDKIT_MAX_MEMBER raises it)"
        )


_HANDLED = """
from shardkit.reader import read_shard
seen = []
samples = list(read_shard({path!r}, handler=lambda exc: seen.append(exc) or True))
result["keys"] = [s["__key__"] for s in samples]
result["errors"] = [[type(e).__name__, str(e)] for e in seen]
"""


def test_the_refusal_goes_to_the_handler_as_a_data_error(bomb: str) -> None:
    result = run_measured(_HANDLED.format(path=bomb), timeout=300)
    assert result["peak_mb"] < _LIMIT_MB, result
    assert result["keys"] == []  # the sample being grouped is withheld, as for any error
    [[kind, message]] = result["errors"]
    assert kind == "FormatLimitError" and "\n" not in message
    assert "SHARDKIT_MAX_MEMBER" in message


def test_the_variable_raises_the_limit_at_the_header(
    bomb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the default, the header is refused; with SHARDKIT_MAX_MEMBER=2GiB (or a
    caller's ``max_member_size=``) the same header is taken (its data not read here)."""
    import gzip

    def second(**kw: Any) -> tar.RawMember:
        with gzip.open(bomb) as stream:
            members = iter(tar.TarScanner(stream, readahead=False, **kw))
            next(members)
            return next(members)

    with pytest.raises(FormatLimitError, match="SHARDKIT_MAX_MEMBER raises it"):
        second()
    assert second(max_member_size=2 << 30).size == DECLARED
    with pytest.raises(FormatLimitError, match=r"over max_member_size \(1000 bytes\)"):
        second(max_member_size=1000)
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "2GiB")
    assert second().size == DECLARED


def test_a_member_at_the_limit_reads_and_one_byte_more_is_refused_on_every_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At the limit a member reads, from a stream and from a buffer alike; one byte over,
    both refuse it with the same error (``read_tar`` compares the two paths)."""
    data = bytes(range(256)) * 4096  # 1 MiB
    shard = tar.encode_sample({"__key__": "a", "txt": b"x"}) + tar.encode_sample(
        {"__key__": "k", "bin": data}
    )
    shard += tar.END_OF_ARCHIVE
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "1MiB")
    assert [s["__key__"] for s in read_tar(shard)] == ["a", "k"]
    assert read_tar(shard)[1]["bin"] == data
    span = tar.span_sample(shard, 1024, len(shard) - 1024)
    assert span["bin"] == data
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", str((1 << 20) - 1))
    with pytest.raises(FormatLimitError) as info:
        read_tar(shard, url="s.tar")
    assert str(info.value) == (
        "s.tar, sample 'k', offset 1024: tar member 'k.bin': 1,048,576 bytes declared, "
        "over the limit of 1,048,575 bytes for a tar member held whole "
        "(SHARDKIT_MAX_MEMBER raises it)"
    )
    with pytest.raises(FormatLimitError, match="SHARDKIT_MAX_MEMBER"):
        tar.span_sample(shard, 1024, len(shard) - 1024)


def test_the_writers_refuse_what_the_readers_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard shardkit writes reads back: the writer and the build's fast path of the
    same bytes refuse a member over the limit, and a download is cut at it."""
    from shardkit.builder._fetch import download_limit
    from shardkit.builder.options import BuildOptions

    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "1000B")
    sample = {"__key__": "k", "bin": bytes(1001)}
    with pytest.raises(EncodeError, match=r"'k\.bin' to write: 1,001 bytes declared.*MEMBER"):
        tar.encode_sample(sample)
    with pytest.raises(EncodeError, match="SHARDKIT_MAX_MEMBER"):
        tar.tar_chunks("k", [("bin", bytes(1001))])
    with pytest.raises(EncodeError, match="SHARDKIT_MAX_MEMBER"), tar.TarWriter(io.BytesIO()) as w:
        w.write(sample)
    assert download_limit(BuildOptions()) == 1000
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "1001B")
    assert tar.tar_chunks("k", [("bin", bytes(1001))])[1] == 512 + 1024
    assert read_tar(tar.encode_sample(sample) + tar.END_OF_ARCHIVE)[0]["bin"] == bytes(1001)


# --------------------------------------------------------------------------- expanded fields


def test_a_gz_field_and_an_npz_are_bounded_by_the_budgets_expanded_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field is decoded whole once inflated: a ``.gz`` field (counted as it inflates)
    and the members an npz declares go through ``expanded`` (they had a 2 GiB constant
    of their own, outside the budget)."""
    import gzip

    import numpy as np

    from shardkit.codecs import Decoder
    from shardkit.errors import DecodeLimitError

    data = bytes(2 << 20)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, a=np.zeros(2 << 20, np.uint8))
    sample = {"__key__": "k", "bin.gz": gzip.compress(data, mtime=0), "npz": buffer.getvalue()}
    decoded = Decoder()(dict(sample))
    assert decoded["bin.gz"] == data and decoded["npz"]["a"].size == 2 << 20
    monkeypatch.setenv("SHARDKIT_MAX_EXPANDED", "1MiB")
    for field in ("bin.gz", "npz"):
        with pytest.raises(DecodeLimitError, match="SHARDKIT_MAX_EXPANDED raises it") as info:
            Decoder(only=field)(dict(sample))
        assert info.value.key == "k" and "\n" not in str(info.value)
    mine = Decoder(max_gunzip_size=2 << 20, only="bin.gz")  # the caller's limit instead
    assert mine(dict(sample))["bin.gz"] == data


_URL_INPUT = """
from shardkit.builder._inputs import _read_url
from shardkit.errors import LimitError
try:
    _read_url({url!r}, 0, {{}})
except LimitError as exc:
    result["error"] = str(exc)
"""


def test_a_build_input_read_by_url_is_bounded_by_the_member_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file a build packs becomes a member: one read by URL (a listing with no size)
    was read whole, whatever its size, and the writer refused it only after; now read to
    one byte past the member limit (a listed size over it: refused before opening)."""
    from shardkit.builder._inputs import _read_url
    from shardkit.errors import LimitError

    path = tmp_path / "big.bin"
    path.write_bytes(bytes(300 << 20))
    url = path.as_uri()
    result = run_measured(
        _URL_INPUT.format(url=url), env={"SHARDKIT_MAX_MEMBER": "1MiB"}, timeout=120
    )
    assert result["error"] == (
        f"{url}: a file to pack: 1,048,577 bytes declared, over the limit of 1,048,576 bytes "
        "for a tar member held whole (SHARDKIT_MAX_MEMBER raises it)"
    )
    assert result["peak_mb"] < 150, result
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "1MiB")
    with pytest.raises(LimitError, match="314,572,800 bytes declared"):
        _read_url(url + ".gone", 300 << 20, {})  # the listed size: refused before opening
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * (1 << 20))
    assert _read_url(small.as_uri(), 0, {}) == b"x" * (1 << 20)


def test_a_member_table_is_no_way_around_the_member_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index's member table lets a reader slice a local shard with no header parsed:
    it slices only when the table's largest member is within the limit, else it parses,
    and the parse refuses that member as it refuses it without a table."""
    import shardkit
    from shardkit.formats.index import ShardIndex, prepared_members
    from shardkit.reader import read_shard

    data = bytes(range(256)) * 8192  # 2 MiB
    with shardkit.ShardWriter(str(tmp_path / "s-%06d.tar")) as writer:
        writer.write({"__key__": "a", "txt": b"x"})
        writer.write({"__key__": "k", "bin": data})
    shard = str(tmp_path / "s-000000.tar")
    index = ShardIndex.from_json(Path(shard + ".idx").read_bytes(), url=shard + ".idx")
    table = prepared_members(index, url=shard + ".idx")
    assert table is not None and table.largest == len(data)
    assert [s["__key__"] for s in read_shard(shard, members=table)] == ["a", "k"]
    assert shardkit.IndexedDataset(shard)[1]["bin"] == data
    monkeypatch.setenv("SHARDKIT_MAX_MEMBER", "1MiB")
    with pytest.raises(FormatLimitError, match=r"tar member 'k\.bin'.*SHARDKIT_MAX_MEMBER"):
        list(read_shard(shard, members=table))
    with pytest.raises(FormatLimitError, match=r"tar member 'k\.bin'.*SHARDKIT_MAX_MEMBER"):
        shardkit.IndexedDataset(shard)[1]
    assert shardkit.IndexedDataset(shard)[0]["txt"] == b"x"
