"""Helpers for the fuzz and hostile-input tests (tests/hostile/: test_fuzz_*.py, test_hostile_*.py).

Hand-made tar headers (any field, correct checksum), a fast way to make gzip bombs, and a
runner that measures a snippet's peak memory in a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from shardkit.errors import ShardkitError
from shardkit.formats import tar
from shardkit.handlers import reraise

T = TypeVar("T")

BLOCK = 512


def header(
    name: bytes,
    size: int | bytes = 0,
    typeflag: bytes = b"0",
    *,
    linkname: bytes = b"",
    prefix: bytes = b"",
    checksum: bool = True,
) -> bytes:
    """One ustar header; ``size`` is an int or the raw 12-byte field, checksum made valid."""
    field = size if isinstance(size, bytes) else b"%011o\0" % size
    head = bytearray(BLOCK)
    head[0 : len(name[:100])] = name[:100]
    head[100:108] = b"0000644\0"
    head[108:124] = b"0000000\x000000000\0"
    head[124:136] = field.ljust(12, b"\0")[:12]
    head[136:148] = b"00000000000\0"
    head[156:157] = typeflag
    head[157 : 157 + len(linkname)] = linkname
    head[257:265] = b"ustar\x0000"
    head[345 : 345 + len(prefix)] = prefix
    return fix_checksum(bytes(head)) if checksum else bytes(head)


def fix_checksum(head: bytes) -> bytes:
    out = bytearray(head)
    out[148:156] = b" " * 8
    out[148:156] = b"%06o\0 " % sum(out)
    return bytes(out)


def member(name: bytes, data: bytes, typeflag: bytes = b"0", **kw: Any) -> bytes:
    """A header and its padded data."""
    return header(name, len(data), typeflag, **kw) + data + bytes(-len(data) % BLOCK)


def pax(records: Mapping[str, bytes], typeflag: bytes = b"x") -> bytes:
    """A PAX extended header member holding ``records`` (keyword -> raw value)."""
    body = b""
    for key, value in records.items():
        record = b" " + key.encode() + b"=" + value + b"\n"
        digits = 1
        while len(str(digits + len(record))) != digits:
            digits += 1
        body += str(digits + len(record)).encode() + record
    return member(b"././@PaxHeader", body, typeflag)


def archive(*members: bytes) -> bytes:
    return b"".join(members) + tar.END_OF_ARCHIVE


def write_tar(samples: Iterable[Mapping[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    with tar.TarWriter(buffer) as writer:
        for sample in samples:
            writer.write(sample)
    return buffer.getvalue()


def read_tar(
    data: bytes, *, handler: Callable[[Exception], bool] = reraise, **kw: Any
) -> list[dict[str, Any]]:
    """The samples of tar bytes read as a stream (:func:`tar.iter_samples`), after
    checking that the buffer path (:func:`tar.buffer_samples`) reads the same: the same
    samples, the same errors (type, message, shard offset) in the same order, whatever
    ``handler`` decides. ``handler`` hears each error once: the buffer path replays its
    decisions."""
    heard: list[tuple[Exception, bool | BaseException]] = []

    def recording(exc: Exception) -> bool:
        try:
            decision = handler(exc)
        except BaseException as raised:
            heard.append((exc, raised))
            raise
        heard.append((exc, decision))
        return decision

    streamed = outcome(lambda: list(tar.iter_samples(io.BytesIO(data), handler=recording, **kw)))
    replay = iter(heard)

    def replaying(exc: Exception) -> bool:
        seen, decision = next(replay)
        assert (type(exc), str(exc)) == (type(seen), str(seen))
        if isinstance(decision, BaseException):
            raise decision
        return decision

    buffered = outcome(lambda: list(tar.buffer_samples(data, handler=replaying, **kw)))
    assert next(replay, None) is None, "the buffer path heard fewer errors"
    if isinstance(streamed, ShardkitError):
        assert (type(buffered), str(buffered)) == (type(streamed), str(streamed))
        raise streamed
    assert buffered == streamed
    return streamed


def outcome(fn: Callable[[], T]) -> T | ShardkitError:
    """``fn()``, or the ShardkitError it raised; any other exception fails the test."""
    try:
        return fn()
    except ShardkitError as exc:
        return exc


def collect(iterator: Iterable[T]) -> tuple[list[T], ShardkitError | None]:
    """Everything ``iterator`` yields before it ends or raises a ShardkitError."""
    got: list[T] = []
    try:
        for item in iterator:
            got.append(item)
    except ShardkitError as exc:
        return got, exc
    return got, None


# --------------------------------------------------------------------------- gzip bombs


def zeros_gzip(path: str, parts: Iterable[bytes | int], *, crc: bool = True) -> int:
    """Write a gzip file of ``parts`` (bytes as they are, an int: that many zero bytes), fast.

    A full flush resets the compressor, so one compressed MiB of zeros can be repeated:
    10 GiB of zeros cost ~10 MB of file. ``crc=False`` writes a zero CRC instead of
    computing it (for streams that must be refused before their end). Returns the size.
    """
    mib = bytes(1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(mib) + deflate.flush(zlib.Z_FULL_FLUSH)
    checksum = total = 0
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        for part in parts:
            if isinstance(part, bytes):
                f.write(deflate.compress(part) + deflate.flush(zlib.Z_FULL_FLUSH))
                checksum = zlib.crc32(part, checksum) if crc else 0
                total += len(part)
                continue
            if part % len(mib):
                raise ValueError("runs of zeros must be whole MiB")
            for _ in range(part // len(mib)):
                f.write(block)
                checksum = zlib.crc32(mib, checksum) if crc else 0
            total += part
        f.write(deflate.flush())
        f.write(checksum.to_bytes(4, "little") + (total & 0xFFFFFFFF).to_bytes(4, "little"))
    return os.path.getsize(path)


# --------------------------------------------------------------------------- measuring


@contextlib.contextmanager
def address_space_cap(extra: int = 1 << 30) -> Iterator[None]:
    """Cap this process's address space at its current size plus ``extra`` while the
    block runs: code that allocates what a hostile header claims gets a MemoryError
    instead of taking the machine's memory. The previous soft limit is restored."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmSize:"))
    now = int(line.split()[1]) * 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = now + extra if hard == resource.RLIM_INFINITY else min(now + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


_PEAK = """
with open("/proc/self/status") as status:
    hwm = next(line for line in status if line.startswith("VmHWM:"))
result["peak_mb"] = int(hwm.split()[1]) / 1024
print(json.dumps(result))
"""


def run_measured(
    code: str, *, env: Mapping[str, str] | None = None, timeout: float = 120
) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; return its ``result`` dict plus measurements.

    ``code`` sets ``result`` (a JSON-able dict). Added: ``peak_mb`` (the child's peak RSS)
    and ``seconds`` (wall time of the whole run, interpreter start included). The peak is
    VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so a child of a big pytest
    worker would report the worker's size.
    """
    script = "import json\nresult = {}\n" + textwrap.dedent(code) + _PEAK
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise AssertionError(f"child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds"] = seconds
    return result
