"""``manifest.json``: written last, atomically, only when every shard is complete.

Its presence means the dataset is complete; readers can trust every shard it names. All
fields are a function of the inputs, options and seed, except those under ``"timing"``
(wall time, workers, resumed tasks), so two builds of the same data compare equal once
``"timing"`` is dropped.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import StorageError
from ..storage import atomic_write
from .results import ShardRecord

if TYPE_CHECKING:
    from .store import Store

__all__ = ["MANIFEST_NAME", "ShardRecord", "make_manifest", "read_manifest", "write_manifest"]

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


def make_manifest(
    *,
    identity: dict[str, Any],
    shards: list[ShardRecord],
    classes: list[str],
    class_counts: dict[int, int],
    skipped: list[tuple[str, str]],
    timing: dict[str, Any],
) -> dict[str, Any]:
    """The manifest as a dict (``identity`` is the journal header: options, seed, inputs)."""
    options = identity["options"]
    counts: dict[str, int] = {name: class_counts.get(i, 0) for i, name in enumerate(classes)}
    return {
        "shardkit_manifest": MANIFEST_VERSION,
        "format": options["format"],
        "samples": sum(s.samples for s in shards),
        "bytes": sum(s.bytes for s in shards),
        "shards": [
            {"name": s.name, "samples": s.samples, "bytes": s.bytes, "digest": s.digest or None}
            for s in shards
        ],
        "class_to_idx": {name: i for i, name in enumerate(classes)},
        "num_classes": len(classes),
        "class_counts": counts,
        "skipped": [{"path": path, "reason": reason} for path, reason in skipped],
        "options": options,
        "seed": options["seed"],
        "source": identity["source"],
        "shardkit_version": __version__,
        "timing": timing,
    }


def write_manifest(
    path: str, manifest: dict[str, Any], storage_options: dict[str, Any] | None = None
) -> str:
    """Write the manifest atomically to ``path`` (``OUT/manifest.json``, a file or an object)."""
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    try:
        with atomic_write(path, storage_options=storage_options) as stream:
            stream.write(text.encode("utf-8", "surrogateescape"))
    except StorageError:
        raise
    except OSError as exc:  # a full disk: atomic_write removed its temporary file
        raise StorageError(f"cannot write: {exc.strerror or exc}", url=path) from exc
    return path


def read_manifest(store: Store) -> dict[str, Any] | None:
    """The manifest in ``store``, or None when there is none (or it is not ours)."""
    raw = store.read_bytes(MANIFEST_NAME)
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and "shardkit_manifest" in data else None
