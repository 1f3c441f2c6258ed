"""Small files that declare giant sizes (issue 28), and a runner that measures each entry
point that reads a shard (``Dataset``, ``verify``, ``stats``, ``cat``, ``index``) on one
in a fresh interpreter of its own: its peak RSS and its outcome (read, or refused in one
``Error:`` line)."""

from __future__ import annotations

import gzip
import os
import struct
from typing import Any

from helpers.hostile import member, pax, run_measured, zeros_gzip
from shardkit.formats import tar

MIB = 1 << 20


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, body_size: int) -> bytes:
    """The head of a length-delimited protobuf field whose body is ``body_size`` bytes."""
    return bytes((tag,)) + _varint(body_size)


def packed_example_gz(path: str, items: int) -> int:
    """A ``.tfrecord.gz`` of one record: a tf.train.Example whose ``x`` feature is a packed
    int64 list of ``items`` zeros (one byte each; ``items`` whole MiB). Returns its size."""
    from crc32c import crc32c

    from shardkit.formats.tfrecord import masked_crc32c

    packed = _field(0x0A, items)  # Int64List.value, packed
    feature = _field(0x1A, len(packed) + items) + packed  # Feature.int64_list
    entry_body = _field(0x0A, 1) + b"x" + _field(0x12, len(feature) + items) + feature
    features = _field(0x0A, len(entry_body) + items) + entry_body  # Features.feature
    head = _field(0x0A, len(features) + items) + features  # Example.features
    length = len(head) + items
    crc = crc32c(head)  # of the whole record, its zeros a MiB at a time; masked below
    zeros = bytes(MIB)
    for _ in range(items // MIB):
        crc = crc32c(zeros, crc)
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    footer = struct.pack("<I", (rotated + 0xA282EAD8) & 0xFFFFFFFF)
    length_field = struct.pack("<Q", length)
    prefix = length_field + struct.pack("<I", masked_crc32c(length_field)) + head
    return zeros_gzip(path, [prefix, items, footer])


def pax_chain_tar_gz(path: str, headers: int) -> int:
    """A ``.tar.gz`` of one sample whose member comes after ``headers`` PAX headers of just
    under 1 MiB each (a ``comment`` record of zeros), then a clean sample."""
    body = MIB - 600  # its record and the header block stay within 1 MiB
    chain = pax({"comment": bytes(body)})
    with gzip.open(path, "wb", compresslevel=1) as f:
        for _ in range(headers):
            f.write(chain)
        f.write(member(b"a.txt", b"first"))
        f.write(member(b"b.txt", b"second"))
        f.write(tar.END_OF_ARCHIVE)
    return os.path.getsize(path)


# The entry points that read a shard, each as the child runs it: the CLI's (one Error:
# line on refusal, exit 2) and the library's (a ShardkitError).
READERS = {
    "Dataset": "list(shardkit.Dataset([path]))",
    "verify": "cli('verify', path)",
    "stats": "cli('stats', path)",
    "cat": "cli('cat', path, '-o', os.path.join(out, 'all' + suffix))",
    "index": "cli('index', path)",
}

_CHILD = """
import contextlib, io, os, resource
import shardkit
from shardkit.cli import main
from shardkit.errors import ShardkitError
path, out, suffix = {path!r}, {out!r}, {suffix!r}
resource.setrlimit(resource.RLIMIT_AS, ({cap}, resource.RLIM_INFINITY))

def cli(*argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(list(argv))
    lines = err.getvalue().strip().splitlines()
    result["status"] = status
    result["stderr"] = lines[-3:]

try:
    {call}
    result["outcome"] = "read"
except ShardkitError as exc:
    result["outcome"] = "refused"
    result["error"] = [type(exc).__name__, str(exc)]
except MemoryError:
    result["outcome"] = "MemoryError"
"""


def measure(entry: str, path: str, out: str, *, cap: int = 4 << 30) -> dict[str, Any]:
    """The outcome and peak RSS (MB) of ``entry`` of :data:`READERS` on ``path``, in a fresh
    interpreter whose address space is capped at ``cap`` bytes."""
    suffix = ".tfrecord" if ".tfrecord" in path else ".tar"
    code = _CHILD.format(path=path, out=out, suffix=suffix, cap=cap, call=READERS[entry])
    return run_measured(code, timeout=300)


def refused_by_the_cli(entry: str, result: dict[str, Any], *needles: str) -> bool:
    """For a CLI entry of :data:`READERS`, check its refusal: ``verify`` lists one problem
    and exits 1, the others print one ``Error:`` line holding every needle and exit 2.
    False for a library entry (its outcome is the caller's to check)."""
    if entry == "verify":  # the problem listed (on stdout), exit 1
        assert result["status"] == 1 and "1 problem" in result["stderr"][-1], result
        return True
    if "status" not in result:
        return False
    assert result["status"] == 2, result
    lines = [line for line in result["stderr"] if line.startswith("Error: ")]
    assert len(lines) == 1 and all(n in lines[0] for n in needles), result
    return True
