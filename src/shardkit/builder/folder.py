"""The output folder: names in it, whether it already holds a build, clearing it."""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from ..errors import BuildError
from .commit import file_matches
from .journal import Journal
from .manifest import MANIFEST_NAME, ShardRecord, read_manifest
from .options import BuildOptions

__all__ = ["OutputFolder"]


class OutputFolder:
    """What a build may find in, and remove from, its output folder."""

    def __init__(self, out: str, options: BuildOptions, journal: Journal) -> None:
        self.out = out
        self.options = options
        self.journal = journal
        ext = re.escape(options.extension)
        self.final = re.compile(rf"{re.escape(options.prefix)}-\d{{6}}\.{ext}")
        prefix = options.prefix
        self.hidden = (f".{prefix}-", f"..{prefix}-", ".manifest.json.tmp-")

    def final_name(self, index: int) -> str:
        return f"{self.options.prefix}-{index:06d}.{self.options.extension}"

    def path(self, name: str) -> str:
        return os.path.join(self.out, name)

    def check(self, identity: dict[str, Any]) -> dict[str, Any] | None:
        """The manifest of this very build if it is complete; raises if OUT holds another."""
        if self.options.overwrite:
            self.clear()
        manifest = read_manifest(self.out)
        if manifest is not None and _same_build(manifest, identity):
            return manifest
        if manifest is not None or os.path.exists(self.path(MANIFEST_NAME)):
            raise BuildError(
                "the output folder holds a different dataset (manifest.json); "
                "use --overwrite to replace it",
                url=self.out,
            )
        if not os.path.exists(self.journal.path) and any(
            self.final.fullmatch(n) for n in os.listdir(self.out)
        ):
            raise BuildError(
                f"the output folder already holds {self.options.prefix}-*."
                f"{self.options.extension} shards of another build; use --overwrite to "
                "replace them",
                url=self.out,
            )
        return None

    def already_built(
        self, manifest: dict[str, Any]
    ) -> tuple[list[ShardRecord], list[tuple[str, str]]]:
        """Verify a complete build's shards; returns its shards and skipped items."""
        shards = [ShardRecord(**s) for s in manifest["shards"]]
        for shard in shards:
            if not file_matches(self.path(shard.name), shard.bytes, shard.sha256):
                raise BuildError(
                    f"shard {shard.name} does not match the manifest (changed or missing); "
                    "use --overwrite to build again",
                    url=self.out,
                )
        self.journal.remove()
        self.remove_strays()
        return shards, [(s["path"], s["reason"]) for s in manifest["skipped"]]

    def clear(self) -> None:
        """Remove a previous dataset: manifest first, then its shards and our hidden files."""
        old = read_manifest(self.out)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(MANIFEST_NAME))
        names = {str(s.get("name")) for s in (old or {}).get("shards", []) if isinstance(s, dict)}
        for name in os.listdir(self.out):
            if (name in names and "/" not in name) or self.final.fullmatch(name):
                os.unlink(self.path(name))
        self.journal.remove()
        self.remove_strays()

    def remove_strays(self) -> None:
        """Remove temporary and part files that no recorded task still needs."""
        keep = {p.name for r in self.journal.done.values() for p in r.parts}
        for name in os.listdir(self.out):
            if name.startswith(self.hidden) and name not in keep:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path(name))


def _same_build(manifest: dict[str, Any], identity: dict[str, Any]) -> bool:
    source = manifest.get("source", {})
    return bool(
        manifest.get("options") == identity["options"]
        and {k: source.get(k) for k in identity["source"]} == identity["source"]
    )
