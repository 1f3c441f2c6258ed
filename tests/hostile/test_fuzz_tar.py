"""Fuzzing the tar reader: every input ends in samples or a ShardkitError, nothing else."""

from __future__ import annotations

import functools
import io
import os
import random
import tarfile
from typing import Any

import pytest
from helpers.hostile import (
    address_space_cap,
    archive,
    collect,
    fix_checksum,
    header,
    member,
    outcome,
    pax,
    read_tar,
    run_measured,
    write_tar,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.errors import (
    ConfigError,
    FormatError,
    FormatLimitError,
    ShardkitError,
    TruncatedShardError,
)
from shardkit.formats import limits, tar
from shardkit.handlers import ignore_and_continue

rng = random.Random(7)
SAMPLES = [
    {"__key__": "a/k0", "bin": rng.randbytes(700), "txt": b"x"},
    {"__key__": "a/k2", "bin": rng.randbytes(512)},
]
SHARD = write_tar(SAMPLES)


def _members(data: bytes, **kw: Any) -> list[tuple[str, bytes, int]]:
    return [(m.name, m.data, m.offset) for m in tar.iter_members(io.BytesIO(data), **kw)]


def _layout(data: bytes) -> list[tuple[int, int, int]]:
    """(header offset, data start, end incl. padding) of each member of a plain ustar shard."""
    out = []
    for _, payload, offset in _members(data):
        end = offset + 512 + len(payload) + (-len(payload) % 512)
        out.append((offset, offset + 512, end))
    return out


def _pax_gnu_archive() -> bytes:
    out = b""
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tf:
            for name, payload in [("s1.txt", b"a" * 600), ("d/" + "é" * 120 + ".json", b"{}")]:
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                info.mtime = 1.5
                tf.addfile(info, io.BytesIO(payload))
        out += buffer.getvalue().rstrip(b"\0")
        out += bytes(-len(out) % 512)
    return out + tar.END_OF_ARCHIVE


PAX_GNU = _pax_gnu_archive()


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("data", [SHARD, PAX_GNU], ids=["ustar", "pax+gnu"])
def test_truncation_at_every_offset_yields_a_prefix_then_a_truncation_error(data: bytes) -> None:
    full = _members(data)
    ends = {m[2]: m[2] + 512 + len(m[1]) + (-len(m[1]) % 512) for m in full}
    for cut in range(len(data)):
        got, error = collect(tar.iter_members(io.BytesIO(data[:cut])))
        done = [m for m in full if ends[m[2]] <= cut]
        assert [tuple(m) for m in got] == done, cut
        if error is not None:
            assert isinstance(error, TruncatedShardError), (cut, error)
            assert error.offset is not None and error.offset <= cut
        elif cut < max(ends.values()) + 512:  # before the first end-of-archive block is
            assert cut % 512 == 0, cut  # read, a clean end only between members
            assert not any(m[2] < cut < ends[m[2]] for m in full), cut


# --------------------------------------------------------------------------- bit flips


def test_every_single_bit_flip_is_an_error_or_lands_in_the_data() -> None:
    layout = _layout(SHARD)
    base = _members(SHARD)
    end_of_data = layout[-1][2]
    for pos in range(len(SHARD)):
        in_header = (
            any(h <= pos < d for h, d, _ in layout) or end_of_data <= pos < end_of_data + 512
        )
        for bit in range(8) if in_header else (pos % 8,):  # data bytes: one bit each
            flipped = bytearray(SHARD)
            flipped[pos] ^= 1 << bit
            got = outcome(functools.partial(_members, bytes(flipped)))
            where = next((i for i, (h, d, e) in enumerate(layout) if h <= pos < e), None)
            if where is None:  # end-of-archive blocks
                expect_error = pos < end_of_data + 512
                assert isinstance(got, FormatError) if expect_error else got == base, pos
                continue
            head, start, _ = layout[where]
            name, payload, offset = base[where]
            if pos < start and not 148 <= pos - head < 156:
                assert isinstance(got, FormatError), (pos, bit)  # the header checksum
            elif pos < start:
                assert got == base or isinstance(got, FormatError), (pos, bit)
            elif pos - start < len(payload):
                changed = bytearray(payload)
                changed[pos - start] ^= 1 << bit
                expected = list(base)
                expected[where] = (name, bytes(changed), offset)
                assert got == expected, (pos, bit)  # tar has no data checksum
            else:
                assert got == base, (pos, bit)  # padding


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_mutations_of_pax_and_gnu_archives(data: st.DataObject) -> None:
    mutated = bytearray(PAX_GNU)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(st.integers(0, 255))
    for handler in (None, ignore_and_continue):
        kw = {} if handler is None else {"handler": handler}
        result = outcome(lambda kw=kw: read_tar(bytes(mutated), **kw))  # type: ignore[misc]
        assert isinstance(result, (list, ShardkitError))


@settings(max_examples=400, deadline=None)
@given(blob=st.binary(max_size=3000))
def test_random_bytes(blob: bytes) -> None:
    result = outcome(lambda: read_tar(blob, handler=ignore_and_continue))
    assert isinstance(result, (list, ShardkitError))


# --------------------------------------------------------------------------- header fields

FIELDS = {
    "name": (0, 100),
    "mode": (100, 108),
    "uid/gid": (108, 124),
    "size": (124, 136),
    "mtime": (136, 148),
    "typeflag": (156, 157),
    "linkname": (157, 257),
    "magic": (257, 265),
    "prefix": (345, 500),
}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field=st.sampled_from(sorted(FIELDS)),
    garbage=st.binary(min_size=1, max_size=160),
    typeflag=st.sampled_from(b"0125xLKgS7 \0"),
    tail=st.binary(max_size=1200),
)
def test_garbage_in_any_header_field_with_a_valid_checksum(
    field: str, garbage: bytes, typeflag: int, tail: bytes
) -> None:
    start, end = FIELDS[field]
    head = bytearray(header(b"k.bin", len(tail), bytes([typeflag])))
    head[start:end] = garbage[: end - start].ljust(end - start, b"\0")
    data = fix_checksum(bytes(head)) + tail + bytes(-len(tail) % 512) + member(b"z.txt", b"ok")
    result = outcome(lambda: read_tar(data, handler=ignore_and_continue))
    assert isinstance(result, (list, ShardkitError))


HOSTILE_SIZES = {
    "size field not octal": (b"99999999999\0", "bad size field"),
    "size field of control bytes": (
        b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c",
        "bad size",
    ),
    "base-256 negative size": (b"\xff" * 12, "negative member size"),
    "base-256 minus one": (b"\xc0" + bytes(10) + b"\x01", "negative member size"),
    "base-256 size of 2**80": (b"\x80" + (1 << 80).to_bytes(11, "big"), "SHARDKIT_MAX_MEMBER"),
    "octal size of 8**11 - 1": (b"77777777777\0", "SHARDKIT_MAX_MEMBER"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SIZES))
def test_absurd_size_fields_are_format_errors(case: str) -> None:
    field, message = HOSTILE_SIZES[case]
    data = archive(header(b"k.bin", field) + bytes(1024))
    with pytest.raises(FormatError, match=message) as info:
        read_tar(data)
    assert info.value.offset == 0


HOSTILE_PAX = {
    "PAX size -1": ({"size": b"-1"}, "negative member size"),
    "PAX size 10**30": ({"size": b"1" + b"0" * 30}, "SHARDKIT_MAX_MEMBER"),
    "PAX size of 5000 digits": ({"size": b"9" * 5000}, "bad size field"),
    "PAX size not a number": ({"size": b"12abc"}, "bad size field"),
    "PAX size empty": ({"size": b""}, "bad size field"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PAX))
def test_absurd_pax_sizes_are_format_errors(case: str) -> None:
    records, message = HOSTILE_PAX[case]
    data = archive(pax(records), member(b"k.bin", b"data"))
    with pytest.raises(FormatError, match=message) as info:
        read_tar(data)
    assert info.value.offset == len(pax(records))  # the member the PAX header describes


@pytest.mark.parametrize(
    "body",
    [b"99 size=1\n", b"0 a=b\n", b"-5 a=b\n", b"x a=b\n", b"1" * 5000 + b" a=b\n"],
    ids=["length past the end", "zero length", "negative length", "no length", "huge length"],
)
def test_malformed_pax_records_are_format_errors(body: bytes) -> None:
    data = archive(member(b"././@PaxHeader", body, b"x"), member(b"k.bin", b"data"))
    with pytest.raises(FormatError, match="PAX"):
        read_tar(data)


def test_a_ten_megabyte_gnu_long_name_is_refused_before_it_is_read() -> None:
    data = archive(header(b"././@LongLink", 10 << 20, b"L"))  # the name itself is missing
    with pytest.raises(FormatError, match="limit for tar metadata") as info:
        read_tar(data)
    assert type(info.value) is FormatError  # not a truncation: nothing was read


def test_a_chain_of_a_thousand_long_name_headers_keeps_the_last() -> None:
    chain = b"".join(member(b"././@LongLink", b"n%04d/x.txt\0" % i, b"L") for i in range(1000))
    samples = read_tar(archive(chain, member(b"short.txt", b"payload")))
    assert [(s["__key__"], s["txt"]) for s in samples] == [("n0999/x", b"payload")]


def test_a_chain_of_a_thousand_pax_headers_keeps_the_last() -> None:
    chain = b"".join(pax({"path": b"p%04d.txt" % i}) for i in range(1000))
    samples = read_tar(archive(chain, member(b"short.txt", b"payload")))
    assert [s["__key__"] for s in samples] == ["p0999"]


# --------------------------------------------------------------------------- size limits


def test_member_over_max_member_size_is_refused_before_reading() -> None:
    data = archive(member(b"k.bin", b"x" * 101))
    with pytest.raises(FormatError, match="max_member_size") as info:
        read_tar(data, max_member_size=100)
    assert type(info.value) is FormatLimitError
    assert read_tar(data, max_member_size=101)[0]["bin"] == b"x" * 101
    huge = archive(header(b"k.bin", 3 << 30))  # 3 GiB declared, nothing follows
    with pytest.raises(FormatLimitError, match="SHARDKIT_MAX_MEMBER"):
        read_tar(huge)
    assert limits.MAX_MEMBER_SIZE == 2 << 30


def test_max_member_size_is_validated() -> None:
    with pytest.raises(ConfigError):
        read_tar(SHARD, max_member_size=-1)
    with pytest.raises(TypeError):
        read_tar(SHARD, max_member_size=True)


def test_non_regular_members_are_streamed_past_whatever_their_size() -> None:
    big_link = header(b"big.lnk", 5 << 20, b"2") + bytes(5 << 20)
    data = archive(big_link, member(b"k.txt", b"ok"))
    samples = read_tar(data, handler=ignore_and_continue, max_member_size=1000)
    assert [s["txt"] for s in samples] == [b"ok"]


def test_lying_size_under_the_limit_allocates_nothing(tmp_path: os.PathLike[str]) -> None:
    # Bug found: read(size) allocated a 1.5 GiB member at once (768 MiB now: the budget
    # refuses 1.5 GiB at the header); under a 1 GiB address
    # space limit that was a MemoryError instead of a TruncatedShardError.
    path = os.path.join(str(tmp_path), "lie.tar")
    with open(path, "wb") as f:
        f.write(header(b"k.bin", 3 << 28) + os.urandom(4096))  # under the member limit
    result = run_measured(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from shardkit.formats import tar
        try:
            with open({path!r}, "rb") as f:
                list(tar.iter_samples(f))
        except Exception as exc:
            result["error"] = type(exc).__name__
        """
    )
    assert result["error"] == "TruncatedShardError"
    assert result["peak_mb"] < 200


# --------------------------------------------------------------------------- the tools' read paths


def _through_the_tools(data: bytes, folder: str) -> dict[str, Any]:
    """Read ``data`` as a shard with the reader and with cat, split, verify, index and
    stats; each must end in a result or a ShardkitError (anything else fails the test)."""
    from shardkit.reader import iter_shard_samples, read_shard
    from shardkit.tools import cat, split, stats, verify, write_index

    path = os.path.join(folder, "in.tar")
    with open(path, "wb") as f:
        f.write(data)

    def samples(url: str) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in s.items() if k not in ("__url__", "__offset__")}
            for s in read_shard(url)
        ]

    def streamed(url: str) -> list[dict[str, Any]]:
        with open(url, "rb") as f:
            return [
                {k: v for k, v in s.items() if k not in ("__url__", "__offset__")}
                for s in iter_shard_samples(f, url=url)
            ]

    # read_shard maps a local file; the same file read as a stream must read the same
    out: dict[str, Any] = {"read": outcome(lambda: samples(path))}
    out["stream"] = outcome(lambda: streamed(path))
    cat_out = os.path.join(folder, "cat.tar")
    out["cat"] = outcome(lambda: cat([path], cat_out))
    if not isinstance(out["cat"], ShardkitError):
        out["cat"] = samples(cat_out)
    pattern = os.path.join(folder, "split-%06d.tar")
    out["split"] = outcome(lambda: split([path], pattern, max_count=2))
    if not isinstance(out["split"], ShardkitError):
        out["split"] = [s for info in out["split"] for s in samples(info.url)]
    out["verify"] = outcome(lambda: verify([path]))
    out["index"] = outcome(lambda: write_index(path))
    out["stats"] = outcome(lambda: stats([path]))
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    return out


def _check_tools(data: bytes) -> None:
    import tempfile
    import tracemalloc

    with tempfile.TemporaryDirectory() as folder, address_space_cap(1 << 30):
        tracemalloc.start()
        try:
            out = _through_the_tools(data, folder)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 64 << 20, peak  # whatever the headers claim (a MemoryError fails too)
    read = out["read"]
    if isinstance(read, ShardkitError):
        assert (type(out["stream"]), str(out["stream"])) == (type(read), str(read))
    else:
        assert out["stream"] == read
    if isinstance(read, ShardkitError):
        # One parser, one grouping: what the reader refuses, the copying tools refuse
        # and verify reports.
        assert isinstance(out["cat"], ShardkitError), (read, out["cat"])
        assert isinstance(out["split"], ShardkitError), (read, out["split"])
        assert not isinstance(out["verify"], ShardkitError) and not out["verify"].ok
        assert isinstance(out["index"], ShardkitError)
    else:
        assert out["cat"] == read and out["split"] == read
    if not isinstance(out["index"], ShardkitError):
        assert list(out["index"].keys) == [s["__key__"] for s in read]


def _with_sizes(base: bytes, data: st.DataObject) -> bytes:
    """``base`` with one member's size field (or a PAX size) set to a drawn value, its
    header checksum made valid again: headers that lie about their size."""
    blob = bytearray(base)
    heads = [h for h in range(0, len(blob) - 511, 512) if tar_checksum_ok(blob[h : h + 512])]
    if not heads:
        return bytes(blob)
    head = data.draw(st.sampled_from(heads))
    size = data.draw(st.one_of(st.integers(0, 4096), st.integers(0, 1 << 42)))
    field = b"%011o\0" % size if size < 8**11 else b"\x80" + size.to_bytes(11, "big")
    blob[head + 124 : head + 136] = field
    blob[head : head + 512] = fix_checksum(bytes(blob[head : head + 512]))
    return bytes(blob)


def tar_checksum_ok(block: bytes | bytearray) -> bool:
    return bytes(block) != bytes(512) and fix_checksum(bytes(block)) == bytes(block)


TOOL_BASES = {
    "ustar": SHARD,
    "pax+gnu": PAX_GNU,
    "samples": write_tar(
        [{"__key__": f"k{i}", "txt": b"t" * i, "json": b"{}", "bin": bytes(600)} for i in range(4)]
    ),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(TOOL_BASES)), data=st.data())
def test_the_tools_read_paths_over_mutated_archives(base: str, data: st.DataObject) -> None:
    mutated = bytearray(TOOL_BASES[base])
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(mutated) - 1))
        mutated[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = bytearray(mutated[: data.draw(st.integers(0, len(mutated)))])
    _check_tools(bytes(mutated))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(TOOL_BASES)), data=st.data())
def test_the_tools_read_paths_over_lying_sizes(base: str, data: st.DataObject) -> None:
    _check_tools(_with_sizes(TOOL_BASES[base], data))


@settings(max_examples=100, deadline=None)
@given(blob=st.binary(max_size=3000))
def test_the_tools_read_paths_over_random_bytes(blob: bytes) -> None:
    _check_tools(blob)
