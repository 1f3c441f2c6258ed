"""The output (a folder or an object-store prefix): names in it, whether it already holds a
build, clearing it."""

from __future__ import annotations

import re
from typing import Any

from .._temporary import is_temporary, temporary_prefix
from ..digest import entry_digest
from ..errors import BuildError
from ..formats.index import index_url
from ..formats.manifest import encode_names
from ..formats.names import INDEX_SUFFIX, MANIFEST_NAME, decode_name
from ..formats.record import ShardRecord
from ._journal import JOURNAL_DIR, JOURNAL_NAME, LOCK_NAME, Journal
from ._manifest import read_manifest
from ._skipped import SKIPPED_NAME
from ._store import Store
from .options import BuildOptions

__all__ = ["OutputFolder"]

_OURS = (LOCK_NAME, JOURNAL_NAME, JOURNAL_DIR)  # never strays, whatever the prefix


class OutputFolder:
    """What a build may find in, and remove from, its output."""

    def __init__(self, store: Store, options: BuildOptions, journal: Journal) -> None:
        self.store = store
        self.options = options
        self.journal = journal
        ext = re.escape(options.extension)
        self.final = re.compile(rf"{re.escape(options.prefix)}-\d{{6}}\.{ext}")
        prefix = options.prefix
        self.hidden = (f".{prefix}-", f"..{prefix}-", temporary_prefix(MANIFEST_NAME))

    def final_name(self, index: int) -> str:
        return f"{self.options.prefix}-{index:06d}.{self.options.extension}"

    def check(self, identity: dict[str, Any]) -> dict[str, Any] | None:
        """The manifest of this very build if it is complete; raises if OUT holds another."""
        if self.options.overwrite:
            self.clear()
        names = self.store.sizes()
        manifest = read_manifest(self.store) if MANIFEST_NAME in names else None
        if manifest is not None and _same_build(manifest, identity):
            return manifest
        if MANIFEST_NAME in names:
            raise BuildError(
                "the output holds a different dataset (manifest.json); "
                "use --overwrite to replace it",
                url=self.store.url,
            )
        if any(self.final.fullmatch(n) for n in names) and not self.journal.exists():
            raise BuildError(
                f"the output already holds {self.options.prefix}-*."
                f"{self.options.extension} shards of another build; use --overwrite to "
                "replace them",
                url=self.store.url,
            )
        return None

    def already_built(
        self, manifest: dict[str, Any]
    ) -> tuple[list[ShardRecord], list[tuple[str, str]]]:
        """Verify a complete build's shards; returns its shards and skipped items.

        Local shards are checked by size and digest; objects by size (see :mod:`.store`)."""
        try:
            shards = [
                ShardRecord(decode_name(s["name"]), s["samples"], s["bytes"], entry_digest(s))
                for s in manifest["shards"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise BuildError(
                f"manifest.json is damaged ({exc}); use --overwrite to build again",
                url=self.store.url,
            ) from exc
        matches = self.store.matcher()
        for shard in shards:
            if not matches(shard.name, shard.bytes, shard.digest):
                raise BuildError(
                    f"shard {shard.name} does not match the manifest (changed or missing); "
                    "use --overwrite to build again",
                    url=self.store.url,
                )
        self.journal.remove()
        self.remove_strays()
        return shards, [(decode_name(s["path"]), s["reason"]) for s in manifest["skipped"]]

    def clear(self) -> None:
        """Remove a previous dataset: manifest first, then its shards and our hidden files."""
        old = read_manifest(self.store)
        self.store.remove([MANIFEST_NAME])  # first: readers stop trusting the shards
        shards = (old or {}).get("shards", [])
        names = {decode_name(str(s.get("name"))) for s in shards if isinstance(s, dict)}
        self.store.remove(
            name
            for name in self.store.sizes()
            if (name.removesuffix(INDEX_SUFFIX) in names and "/" not in name)
            or name == SKIPPED_NAME
            or self.final.fullmatch(name.removesuffix(INDEX_SUFFIX))
        )
        self.journal.remove()
        self.remove_strays()

    def remove_temporaries(self) -> None:
        """Remove the temporary files of a local OUT (``.NAME.tmp-RANDOM``), once a failed
        run has stopped its workers: this build still holds OUT's lock, so nothing else
        writes them, and a worker that died mid-write (killed, out of memory) cannot
        remove its own. An object store has none (its uploads are atomic)."""
        if self.store.leaves_temporaries:
            names = self.store.sizes()
            self.store.remove(n for n in names if n.startswith(self.hidden) and is_temporary(n))

    def remove_strays(self) -> None:
        """Remove temporary and part files that no recorded task still needs."""
        hidden = [n for n in self.store.sizes() if n.startswith(self.hidden) and n not in _OURS]
        if not hidden:
            return
        strays = set(hidden)  # what the output holds: the tasks are read back, not held
        for result in self.journal.results():
            for part in result.parts:  # its index, if any, goes with it
                strays.difference_update((part.name, index_url(part.name)))
        self.store.remove(name for name in hidden if name in strays)


def _same_build(manifest: dict[str, Any], identity: dict[str, Any]) -> bool:
    source = manifest.get("source", {})
    stored = encode_names(identity)  # names as the manifest writes them (not UTF-8: escaped)
    return bool(
        manifest.get("options") == stored["options"]
        and {k: source.get(k) for k in stored["source"]} == stored["source"]
    )
