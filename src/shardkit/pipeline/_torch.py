"""Make :class:`~shardkit.pipeline.dataset.Dataset` a ``torch.utils.data.IterableDataset``
without importing torch.

``IterableDataset`` is an abstract base class, so a class can be registered as a virtual
subclass of it: ``isinstance(ds, IterableDataset)`` is then true, which is all that
``DataLoader`` checks. If torch is already imported we register at once; if it is
installed but not imported, a one-shot import hook registers the class right after
``torch.utils.data.dataset`` is executed. So ``import shardkit`` and raw iteration never
pay for importing torch (about 1.5 s and 150 MB), and the class is a plain iterable where
torch is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

__all__ = ["register_iterable_dataset"]

_MODULE = "torch.utils.data.dataset"


def register_iterable_dataset(cls: type) -> None:
    """Register ``cls`` as a virtual ``IterableDataset`` now, or when torch is imported."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        module.IterableDataset.register(cls)
        return
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return  # torch is not installed: a plain iterable
    sys.meta_path.insert(0, _RegisterOnImport(cls))


class _RegisterOnImport:
    """A meta path finder that finds nothing itself; it wraps the loader of torch's
    dataset module. (Duck-typed: importing importlib.abc would cost ~9 ms.)"""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _MODULE:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RegisteringLoader(spec.loader, self._cls)
                return spec  # type: ignore[no-any-return]
        return None


class _RegisteringLoader:
    def __init__(self, loader: Any, cls: type) -> None:
        self._loader = loader
        self._cls = cls

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first, so the module looks as if we were never here.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        module.IterableDataset.register(self._cls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
