"""How shardkit reaches storage, as one object: :class:`Access`.

A public function takes fsspec's ``storage_options=`` (endpoint, credentials: the keyword
users of fsspec, pandas, Hugging Face datasets and webdataset pass) and resolves it once,
at its door, with :meth:`Access.of`; everything below takes the one object, as an fsspec
filesystem carries its options and an httpx ``Client`` its settings. A setting that
travels with storage access is added here, not to every signature on the way down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LOCAL", "Access", "StorageOptions"]

StorageOptions = Mapping[str, Any]
"""fsspec's storage options, as a public function takes them (``storage_options=``)."""


@dataclass(frozen=True)
class Access:
    """fsspec's storage options for remote URLs (``options``); local paths need none.

    Picklable: it travels to DataLoader workers and cluster tasks with the run."""

    options: StorageOptions = field(default_factory=dict)

    @classmethod
    def of(cls, storage_options: Access | StorageOptions | None) -> Access:
        """The one object for what a public function was given (None: defaults)."""
        if storage_options is None:
            return LOCAL
        if isinstance(storage_options, Access):
            return storage_options
        if not isinstance(storage_options, Mapping):
            raise TypeError(
                "storage_options must be a dict of fsspec options, "
                f"not {type(storage_options).__name__}"
            )
        return cls(dict(storage_options))

    @classmethod
    def given(cls, storage_options: Access | StorageOptions | None) -> Access | None:
        """:meth:`of` what was given; None where nothing was (what carries it, a tool's
        input shard, is then reached as the run that reads it says)."""
        return None if storage_options is None else cls.of(storage_options)

    @property
    def storage_options(self) -> dict[str, Any]:
        """The options as fsspec takes them (a copy)."""
        return dict(self.options)


LOCAL = Access()
"""Access with fsspec's defaults (the environment's credentials and endpoints)."""
