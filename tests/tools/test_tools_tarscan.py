"""The tools' low-level tar scanner against tarfile, across read-buffer boundaries."""

from __future__ import annotations

import io
import tarfile

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.formats.tar import TarScanner


class ShortReads(io.RawIOBase):
    """A pipe-like stream: short reads of at most ``chunk`` bytes, no seeking."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._chunk = chunk

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), self._chunk, len(self._data) - self._pos)
        buffer[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def archive(members: list[tuple[str, bytes]], fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


names = st.one_of(
    st.from_regex(r"[a-z]{1,8}\.[a-z]{1,4}", fullmatch=True),
    st.from_regex(r"d/[a-z]{90,140}\.txt", fullmatch=True),  # long: prefix, GNU or PAX
)
members = st.lists(st.tuples(names, st.binary(max_size=3000)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    items=members,
    fmt=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
    chunk=st.integers(512, 5000),
    short=st.integers(1, 4000),
    picks=st.lists(st.sampled_from(["copy", "read", "skip"]), min_size=12, max_size=12),
)
def test_scanner_matches_tarfile_across_buffer_boundaries(
    items: list[tuple[str, bytes]], fmt: int, chunk: int, short: int, picks: list[str]
) -> None:
    if fmt == tarfile.USTAR_FORMAT:
        items = [(n, d) for n, d in items if len(n) <= 100]
        if not items:
            return
    blob = archive(items, fmt)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        listing = [(m.name, m.offset, m.offset_data, m.size) for m in tar.getmembers()]
    out = bytearray()
    expected = bytearray()
    scanner = TarScanner(ShortReads(blob, short), chunk_size=chunk)  # type: ignore[arg-type]
    seen = []
    for i, member in enumerate(scanner):
        name, offset, offset_data, size = listing[i]
        assert (member.name, member.start, member.size) == (name, offset, size)
        assert member.start + len(member.header) == offset_data
        pick = picks[i % len(picks)]
        if pick == "copy":
            scanner.copy_member(out.extend)
            expected += blob[offset : member.end]
        elif pick == "read":
            assert scanner.read_data() == items[i][1]
        seen.append(member.name)
    scanner.flush_copy()
    assert seen == [n for n, *_ in listing]
    assert bytes(out) == bytes(expected)
    assert scanner.end_blocks == 2


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 4000), min_size=1, max_size=25),
    chunk=st.integers(512, 6000),
    max_count=st.one_of(st.none(), st.integers(1, 6)),
    max_size=st.one_of(st.none(), st.integers(2000, 20000)),
)
def test_raw_split_gives_shardwriters_bytes_across_buffer_boundaries(
    sizes: list[int], chunk: int, max_count: int | None, max_size: int | None
) -> None:
    import os
    import tempfile

    from shardkit.tools._inputs import ShardRef
    from shardkit.tools._rawsplit import raw_shards, split_raw
    from shardkit.writer import ShardWriter

    if max_count is None and max_size is None:
        max_count = 4
    data = [
        {"__key__": f"s{i:03d}", "bin": bytes([i]) * n, "txt": b"x" * (i % 7)}
        for i, n in enumerate(sizes)
    ]
    with tempfile.TemporaryDirectory() as folder:
        inputs = []
        for part, items in enumerate((data[: len(data) // 2], data[len(data) // 2 :])):
            if items:  # two input shards: the split runs across their boundary
                path = os.path.join(folder, f"in-{part}.tar")
                with ShardWriter(
                    path.replace(".tar", "-%d.tar"), max_count=None, max_size=None
                ) as writer:
                    for sample in items:
                        writer.write(sample)
                inputs.append(ShardRef(writer.shards[0].url, "tar", False))
        sink = raw_shards(
            os.path.join(folder, "r-%03d.tar"), max_count=max_count, max_size=max_size
        )
        got = split_raw(inputs, sink, chunk_size=chunk)
        # Byte for byte what ShardWriter writes for the whole stream with these limits:
        with ShardWriter(
            os.path.join(folder, "e-%03d.tar"), max_count=max_count, max_size=max_size
        ) as reference:
            for sample in data:
                reference.write(sample)
        assert [(i.samples, i.bytes, i.digest) for i in got] == [
            (i.samples, i.bytes, i.digest) for i in reference.shards
        ]
