"""``verify``: check every shard and report every problem, with shard, key and offset.

Per shard: tar headers (checksums, sizes), truncation, the end-of-archive marker, sample
grouping (a key whose members are not adjacent, a duplicate extension, members readers
reject); for TFRecord both CRCs of every record and every Example; against the manifest,
when the shard comes from one, its size, digest (recomputed with the algorithm the
manifest names: blake3, sha256 or xxh3-128) and sample count; against its index file
(``<shard>.idx``), when there is one, its keys and offsets. ``decode=True`` also decodes
every image (Pillow / simplejpeg) and every json, text, int and npy field, and checks
and decodes audio (all of it) and video fields (their first frame).

What was *not* checked is said too (:attr:`VerifyReport.unchecked`): shards whose bytes
no digest covers (no manifest, a manifest built with ``--hash none``). A shard whose
manifest entry has no digest while the manifest's options name a hash algorithm (a digest
removed or nulled) is a problem; an index that records the shard's sha256 or size is
compared too.

The check goes on after a problem wherever it can: past a bad tar header (to the next
valid one), past a record whose data CRC is wrong. Offsets are in the uncompressed stream.
Without a manifest digest to compare, a local uncompressed tar shard is checked by reading
its headers and seeking over member data, as ``tar -t`` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO, cast

from .. import storage
from ..digest import digest_name
from ..errors import FormatError, StorageError, escape_controls
from ..formats.index import ShardIndex, compare_index
from ..formats.tar import TarScanner
from ..pipeline import load_index
from ..reader import load_manifest
from ..storage import Tally
from ._checks import Seen, check_tar, check_tfrecord
from ._inputs import (
    MANIFEST,
    Inputs,
    ShardRef,
    as_refs,
    list_folder,
    magic,
    open_shard,
    read_manifest,
)
from ._settings import ToolOptions, ToolRun

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Problem", "ShardCheck", "VerifyReport", "scan_shard", "verify", "verify_shard"]

_SEEK_CHUNK = 1 << 14
_READ_CHUNK = 1 << 22


@dataclass(frozen=True)
class Problem:
    """One problem: where (shard, sample key, byte offset) and what."""

    shard: str
    key: str | None
    offset: int | None
    message: str

    def line(self) -> str:
        """``shard<TAB>key<TAB>offset<TAB>problem``, with ``-`` for what is unknown."""
        parts = (self.shard, self.key or "-", "-" if self.offset is None else str(self.offset))
        clean = [escape_controls(p.replace("\t", " ")) for p in (*parts, self.message)]
        return "\t".join(clean)


@dataclass
class ShardCheck:
    """The result for one shard."""

    url: str
    samples: int = 0
    bytes: int | None = None
    sha256: str | None = None
    digest: str | None = None  # ALGO:HEX, in the algorithm of the manifest's digest
    problems: list[Problem] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)  # the digests its bytes were held to


@dataclass
class VerifyReport:
    """The result for every shard, plus problems that belong to no single shard."""

    shards: list[ShardCheck] = field(default_factory=list)
    other: list[Problem] = field(default_factory=list)

    @property
    def problems(self) -> list[Problem]:
        return [p for s in self.shards for p in s.problems] + self.other

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    @property
    def unchecked(self) -> list[str]:
        """What this check could not do, one line each (empty when it checked it all)."""
        bare = [s for s in self.shards if not s.compared]
        if not bare:
            return []
        many = "s" if len(bare) != 1 else ""
        return [
            f"the bytes of {len(bare)} of {len(self.shards)} shard{many} were compared with no "
            "digest (no manifest digest, no index sha256): a changed byte that keeps the "
            "structure and counts is not detected"
        ]


class _Hashing:
    """A read-only stream that hashes (with each algorithm of ``hashes``) and counts
    every byte read through it."""

    def __init__(self, raw: BinaryIO, hashes: list[str]) -> None:
        self._raw = raw
        self.tallies = [Tally(name) for name in hashes]
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._update(data)
        return data

    def _update(self, data: bytes | memoryview) -> None:
        for tally in self.tallies:
            tally.update(data)
        self.size += len(data)

    def readinto(self, buffer: memoryview) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n:
            self._update(buffer[:n])
        return int(n or 0)

    def drain(self) -> None:
        while self.read(_READ_CHUNK):
            pass


def _reporter(
    check: ShardCheck, on_problem: Callable[[Problem], None] | None
) -> Callable[[str | None, int | None, str], None]:
    """A ``report(key, offset, message)`` that records a problem of ``check``'s shard."""

    def report(key: str | None, offset: int | None, message: str) -> None:
        problem = Problem(check.url, key, offset, message)
        check.problems.append(problem)
        if on_problem is not None:
            on_problem(problem)

    return report


def scan_shard(
    ref: ShardRef,
    *,
    decode: bool = False,
    sha256: bool | None = None,
    on_problem: Callable[[Problem], None] | None = None,
) -> tuple[ShardCheck, Seen]:
    """The shard's own checks (no manifest or index): its result and what it holds."""
    check = ShardCheck(ref.url)
    report = _reporter(check, on_problem)
    hashes = _hashes(ref, sha256)
    seekable = not hashes and not ref.gzip and ref.format == "tar" and not ref.stdin
    try:
        raw, _ = open_shard(ref, buffer_size=0 if seekable else 1 << 20)
    except StorageError as exc:
        report(None, None, f"cannot open: {exc.message}")
        return check, Seen()
    try:
        seen = _check_stream(ref, raw, check, report, decode, hashes)
    finally:
        if not ref.stdin:
            raw.close()
    check.samples = seen.samples
    return check, seen


def verify_shard(
    ref: ShardRef,
    *,
    decode: bool = False,
    sha256: bool | None = None,
    on_problem: Callable[[Problem], None] | None = None,
) -> ShardCheck:
    """Check one shard. Its bytes are hashed with the algorithm of the manifest's digest
    when there is one; ``sha256=True`` also computes its sha256 (:attr:`ShardCheck.sha256`),
    ``sha256=False`` hashes nothing. The shard (and its index) is reached as ``ref`` says
    (:attr:`~shardkit.tools._inputs.ShardRef.access`)."""
    index, trouble = _load_index(ref)
    if index is not None and index.sha256 and sha256 is not False:
        sha256 = True  # the index records the shard's sha256: compare it
    check, seen = scan_shard(ref, decode=decode, sha256=sha256, on_problem=on_problem)
    report = _reporter(check, on_problem)
    if trouble:
        report(None, None, trouble)
    if not any(p.message.startswith("cannot open") for p in check.problems):
        _against_manifest(ref, check, report)
        if index is not None:
            _against_index(index, check, seen, report)
    return check


def _check_stream(
    ref: ShardRef,
    raw: BinaryIO,
    check: ShardCheck,
    report: Callable[[str | None, int | None, str], None],
    decode: bool,
    hashes: list[str],
) -> Seen:
    import gzip
    import zlib

    zipped = ref.gzip or magic(raw) == b"\x1f\x8b"
    hashing = _Hashing(raw, hashes) if hashes else None
    source = cast(BinaryIO, hashing) if hashing is not None else raw
    stream = cast(BinaryIO, gzip.GzipFile(fileobj=source, mode="rb")) if zipped else source
    seen = Seen()
    try:
        if ref.format == "tfrecord":
            seen, _ = check_tfrecord(stream, report, url=ref.url, decode=decode)
        else:
            seek = hashing is None and not zipped
            chunk = _SEEK_CHUNK if seek else _READ_CHUNK
            members = TarScanner(stream, url=ref.url, chunk_size=chunk, seek=seek)
            seen = check_tar(members, report, decode=decode)
        if (zipped or hashing is not None) and not seen.stopped:
            while stream.read(_READ_CHUNK):
                pass
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        report(None, None, f"corrupt gzip stream: {exc}")
    except OSError as exc:
        report(None, None, f"read error: {exc}")
    if hashing is not None:
        hashing.drain()
        check.bytes = hashing.size
        for tally in hashing.tallies:
            if tally.hash == "sha256":
                check.sha256 = tally.hexdigest()
            if ref.digest is not None and tally.hash == digest_name(ref.digest):
                check.digest = tally.digest
    elif storage.is_local(ref.url):
        check.bytes = os.path.getsize(storage.local_path(ref.url))
    return seen


def _hashes(ref: ShardRef, sha256: bool | None) -> list[str]:
    """The algorithms to hash ``ref`` with: its manifest digest's (unless ``sha256`` is
    False), and sha256 when ``sha256`` is True."""
    if sha256 is False:
        return []
    hashes = [digest_name(ref.digest)] if ref.digest else []
    if sha256 and "sha256" not in hashes:
        hashes.append("sha256")
    return hashes


def _against_manifest(
    ref: ShardRef, check: ShardCheck, report: Callable[[str | None, int | None, str], None]
) -> None:
    if ref.bytes is not None and check.bytes is not None and ref.bytes != check.bytes:
        report(None, None, f"size {check.bytes} differs from the manifest's {ref.bytes}")
    if ref.digest is not None and check.digest is not None:
        check.compared.append("manifest")
        if ref.digest != check.digest:
            report(None, None, f"digest {check.digest} differs from the manifest's {ref.digest}")
    if ref.samples is not None and ref.samples != check.samples:
        report(None, None, f"{check.samples} samples, the manifest says {ref.samples}")


def _load_index(ref: ShardRef) -> tuple[ShardIndex | None, str]:
    """The shard's index (None: it has none), or why it cannot be read."""
    if ref.stdin:
        return None, ""
    try:
        return load_index(ref.url, storage_options=ref.access), ""
    except (StorageError, ValueError) as exc:
        return None, f"unreadable index file: {exc}"


def _against_index(
    index: ShardIndex,
    check: ShardCheck,
    seen: Seen,
    report: Callable[[str | None, int | None, str], None],
) -> None:
    for key, offset, message in compare_index(index, seen.keys, seen.offsets):
        report(key, offset, message)
    if None not in (index.shard_bytes, check.bytes) and index.shard_bytes != check.bytes:
        report(None, None, f"size {check.bytes} differs from the index's {index.shard_bytes}")
    if index.sha256 and check.sha256 is not None:
        check.compared.append("index")
        if index.sha256 != check.sha256:
            report(None, None, f"sha256 {check.sha256} differs from the index's {index.sha256}")


def _manifest_problems(spec: str) -> list[Problem]:
    """Problems of a folder with a manifest: listed shards missing, unlisted shards, a
    digest missing where the manifest's options promise one."""
    folder = storage.local_path(spec)
    manifest_url = os.path.join(folder, MANIFEST)
    manifest = read_manifest(manifest_url)
    promised = _promised_hash(manifest_url)
    listed = {os.path.normpath(ref.url) for ref in manifest.shards}
    problems = [
        Problem(url, None, None, f"shard not listed in {MANIFEST}")
        for url in list_folder(folder)
        if os.path.normpath(url) not in listed
    ]
    problems += [
        Problem(ref.url, None, None, f"listed in {MANIFEST} but missing")
        for ref in manifest.shards
        if not os.path.exists(ref.url)
    ]
    if promised:
        problems += [
            Problem(
                ref.url,
                None,
                None,
                f"{MANIFEST} lists no digest for it while its options say hash {promised!r} "
                "(removed or nulled?): its bytes cannot be checked",
            )
            for ref in manifest.shards
            if ref.digest is None and os.path.exists(ref.url)
        ]
    stated = sum(ref.samples or 0 for ref in manifest.shards)
    if manifest.samples is not None and manifest.samples != stated:
        problems.append(
            Problem(
                manifest_url, None, None, f"total samples {manifest.samples} != shards' {stated}"
            )
        )
    return problems


def _promised_hash(manifest_url: str) -> str | None:
    """The hash algorithm a manifest's build options name (None: none, or not stated)."""
    contents, _ = load_manifest(manifest_url)
    document = contents.document
    options = document.get("options") if isinstance(document, dict) else None
    promised = options.get("hash") if isinstance(options, dict) else None
    return promised if isinstance(promised, str) and promised != "none" else None


def _manifest_folder(item: object) -> str | None:
    """The folder of a manifest ``item`` names (a folder holding one, or its path)."""
    if not isinstance(item, str) or item == "-" or not storage.is_local(item):
        return None
    if os.path.isfile(os.path.join(item, MANIFEST)):
        return item
    if os.path.basename(item) == MANIFEST and os.path.isfile(item):
        return os.path.dirname(item) or "."
    return None


def verify(
    inputs: Inputs,
    *,
    decode: bool = False,
    sha256: bool | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    on_shard: Callable[[ShardCheck], None] | None = None,
    **options: Unpack[ToolOptions],
) -> VerifyReport:
    """Check every shard of ``inputs`` (shards, folders, manifests, ``-``); ``progress``
    hears of each shard done (``storage_options``, ``progress``:
    :class:`~shardkit.tools._settings.ToolOptions`)."""
    run = ToolRun.of("verify", options, writes=False)
    result = VerifyReport()
    items: list[str | ShardRef] = []
    for item in [inputs] if isinstance(inputs, (str, ShardRef)) else list(inputs):
        folder = _manifest_folder(item)
        if isinstance(item, str) and folder is not None:
            try:
                problems = _manifest_problems(folder)
            except FormatError as exc:  # a broken manifest: check the shards that are there
                problems = [Problem(exc.url or item, None, None, exc.message)]
                items.extend(list_folder(folder))
            else:
                items.append(item)
            for problem in problems:
                result.other.append(problem)
                if on_problem is not None:
                    on_problem(problem)
        else:
            items.append(item)
    missing = {p.shard for p in result.other if p.message.endswith("but missing")}
    for ref in run.track(as_refs(items, run.access)):
        if ref.url in missing:
            continue
        shard = verify_shard(ref, decode=decode, sha256=sha256, on_problem=on_problem)
        result.shards.append(shard)
        if on_shard is not None:
            on_shard(shard)
    return result
