"""Shard digests: the algorithms a manifest may name, in one registry (name -> hasher).

A digest is written ``ALGO:HEX`` (``blake3:6437b3ac…``), so a manifest says which
algorithm made each one and ``verify`` recomputes it with the same. A manifest written
before ``--hash`` existed has a bare ``"sha256": HEX`` per shard: :func:`entry_digest`
reads it as ``sha256:HEX``.

- ``blake3`` (the default): cryptographic (a changed shard cannot be made to match), and
  several times faster than sha256 on one core.
- ``sha256``: what older manifests and every other tool use (``sha256sum``).
- ``xxh3-128``: not cryptographic; catches accidental corruption (a torn copy, a bad disk)
  at memory speed, but anyone can forge a shard to match it. Needs ``shardkit[xxhash]``.
- ``none``: no digest; resumes and ``verify`` then compare sizes and sample counts only.

The digest is metadata: the shards' bytes are the same whatever the algorithm.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from ._optional import require
from .errors import ConfigError

__all__ = [
    "DEFAULT_HASH",
    "HASHES",
    "Hasher",
    "HashName",
    "check_digest",
    "check_hash",
    "digest_hex",
    "digest_name",
    "entry_digest",
    "parse_digest",
    "format_digest",
    "new_hasher",
]

HashName = Literal["sha256", "blake3", "xxh3-128", "none"]
HASHES: tuple[HashName, ...] = ("blake3", "sha256", "xxh3-128", "none")
DEFAULT_HASH: HashName = "blake3"

_HEX = re.compile(r"[0-9a-f]+")


class Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


def _module(hash: str, name: str) -> Any:
    """The package ``name`` that ``hash`` needs (one error line naming its extra)."""
    return require(name, f"hash {hash!r}")


def _blake3() -> Hasher:
    hasher: Hasher = _module("blake3", "blake3").blake3()
    return hasher


def _xxh3_128() -> Hasher:
    hasher: Hasher = _module("xxh3-128", "xxhash").xxh3_128()
    return hasher


# name -> (factory, length of the hex digest)
_REGISTRY: dict[str, tuple[Callable[[], Hasher], int]] = {
    "sha256": (hashlib.sha256, 64),
    "blake3": (_blake3, 64),
    "xxh3-128": (_xxh3_128, 32),
}


def check_hash(name: object) -> HashName:
    """``name`` if it is a known algorithm (or ``"none"``) whose package is installed;
    otherwise one :class:`~shardkit.errors.ConfigError` line (a
    :class:`~shardkit.errors.MissingDependencyError` when its package is missing)."""
    if name not in HASHES:
        raise ConfigError(f"hash must be one of {', '.join(HASHES)}, not {name!r}")
    new_hasher(str(name))  # a missing package is found now, not in a worker
    return name  # type: ignore[return-value]


def new_hasher(name: str) -> Hasher | None:
    """A fresh hasher for ``name`` (None for ``"none"``)."""
    if name == "none":
        return None
    return _REGISTRY[name][0]()


def format_digest(name: str, hexdigest: str) -> str:
    """``ALGO:HEX`` (``""`` when nothing was hashed)."""
    return f"{name}:{hexdigest}" if hexdigest else ""


def digest_name(digest: str) -> str:
    """The algorithm of a digest (``""`` for no digest)."""
    return digest.partition(":")[0] if digest else ""


def digest_hex(digest: str) -> str:
    """The hex digits of a digest (``""`` for no digest)."""
    return digest.partition(":")[2]


def check_digest(digest: str) -> str:
    """``digest`` if it is ``ALGO:HEX`` with a known algorithm and a hex of its length;
    ValueError otherwise."""
    name, _, hexdigest = digest.partition(":")
    known = _REGISTRY.get(name)
    if known is None:
        raise ValueError(f"unknown digest algorithm {name!r} (known: {', '.join(_REGISTRY)})")
    if len(hexdigest) != known[1] or not _HEX.fullmatch(hexdigest):
        raise ValueError(f"{name} digest must be {known[1]} lowercase hex digits: {digest!r}")
    return digest


def parse_digest(value: object) -> str:
    """A recorded digest, checked (:func:`check_digest`): ``"ALGO:HEX"``, or the bare hex
    of a sha256 (what manifests and journals held before ``--hash``); ``""`` for none (None
    or ``""``). ValueError when malformed. The one parser of digests read back."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise ValueError(f"a digest must be a string, not {value!r}")
    return check_digest(value if ":" in value else f"sha256:{value}")


def entry_digest(entry: Mapping[str, Any]) -> str:
    """The digest of a manifest's shard entry: ``"digest": "ALGO:HEX"``, or an older
    manifest's ``"sha256": HEX``; ``""`` when it has none. ValueError when malformed."""
    digest = entry.get("digest")
    if digest is None and entry.get("sha256") is not None:
        sha256 = entry["sha256"]
        if not isinstance(sha256, str) or ":" in sha256:
            raise ValueError(f"a sha256 must be bare hex digits, not {sha256!r}")
        return parse_digest(sha256)
    if isinstance(digest, str) and digest and ":" not in digest:
        raise ValueError(f"a digest must be ALGO:HEX, not {digest!r}")
    return parse_digest(digest)
