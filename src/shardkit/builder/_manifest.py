"""``manifest.json``: written last, atomically, only when every shard is complete.

Its presence means the dataset is complete; readers can trust every shard it names. All
fields are a function of the inputs, options and seed, except those under ``"timing"``
(wall time, workers, resumed tasks), so two builds of the same data compare equal once
``"timing"`` is dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import BuildError, ManifestError, StorageError
from ..formats.manifest import MANIFEST_VERSION, encode_manifest, parse_manifest
from ..formats.names import MANIFEST_NAME, bare_name_problem
from ..formats.record import ShardRecord
from ..storage import LOCAL, Access, atomic_write

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["fetch_total", "make_manifest", "read_manifest", "write_manifest"]


def make_manifest(
    *,
    identity: dict[str, Any],
    shards: list[ShardRecord],
    classes: list[str],
    class_counts: dict[int, int],
    skipped: list[tuple[str, str]],
    skipped_count: int,
    timing: dict[str, Any],
    fetch: list[dict[str, int]] | None = None,
) -> dict[str, Any]:
    """The manifest as a dict (``identity`` is the journal header: options, seed, inputs).

    ``skipped`` is the first skipped items (:mod:`.skipped`: every one is in
    ``skipped.jsonl``), ``skipped_count`` how many there were.

    ``fetch`` holds each shard's http(s) download counts by outcome (a skipped download
    counts in the shard of the next sample packed after it); the manifest gets them, with
    their total, only when something was downloaded."""
    options = identity["options"]
    counts: dict[str, int] = {name: class_counts.get(i, 0) for i, name in enumerate(classes)}
    manifest = {
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
        "skipped_count": skipped_count,
        "options": options,
        "seed": options["seed"],
        "source": identity["source"],
        "shardkit_version": __version__,
        "timing": timing,
    }
    if fetch and any(fetch):
        manifest["fetch"] = {"total": fetch_total(fetch), "shards": fetch}
    return manifest


def fetch_total(counts: list[dict[str, int]]) -> dict[str, int]:
    """The sum of per-task download counts, by outcome (sorted by name)."""
    total: dict[str, int] = {}
    for one in counts:
        for category, n in one.items():
            total[category] = total.get(category, 0) + n
    return dict(sorted(total.items()))


def write_manifest(path: str, manifest: dict[str, Any], access: Access = LOCAL) -> str:
    """Write the manifest atomically to ``path`` (``OUT/manifest.json``, a file or an object)."""
    data = encode_manifest(manifest)
    try:
        with atomic_write(path, access=access) as stream:
            stream.write(data)
    except StorageError:
        raise
    except OSError as exc:  # a full disk: atomic_write removed its temporary file
        raise StorageError(f"cannot write: {exc.strerror or exc}", url=path) from exc
    return path


def read_manifest(store: Store) -> dict[str, Any] | None:
    """The manifest in ``store``, or None when there is none (or it is not ours).

    It is read back from the output, so it is checked like any data: every shard it names
    must be a bare name inside the output, else BuildError."""
    raw = store.read_bytes(MANIFEST_NAME)
    if raw is None:
        return None
    try:
        contents = parse_manifest(raw, url=store.join(MANIFEST_NAME))
    except ManifestError:
        return None
    data = contents.document
    if not isinstance(data, dict) or "shardkit_manifest" not in data:
        return None
    for shard in contents.shards:
        problem = bare_name_problem(shard.name)
        if problem is not None:
            raise BuildError(
                f"{MANIFEST_NAME} names a shard outside the output: {problem}; it is not "
                "shardkit's, remove it by hand to build here",
                url=store.url,
            )
    return data
