"""Make :class:`~shardkit.pipeline._dataset.Dataset` a ``torch.utils.data.IterableDataset``
(and :class:`~shardkit.pipeline._indexed.IndexedDataset` a ``torch.utils.data.Dataset``)
without importing torch.

``IterableDataset`` is an abstract base class, so a class can be registered as a virtual
subclass of it: ``isinstance(ds, IterableDataset)`` is then true, which is all that
``DataLoader`` checks. If torch is already imported we register at once; if it is
installed but not imported, a one-shot import hook registers the class right after
``torch.utils.data.dataset`` is executed. So ``import shardkit`` and raw iteration never
pay for importing torch (about 1.5 s and 150 MB), and the class is a plain iterable where
torch is not installed.

``Dataset`` (map-style) is not an abstract base class, so it cannot be registered:
:func:`register_map_dataset` gives the class torch's ``Dataset`` as its base instead, by
assigning ``__bases__`` when ``torch.utils.data.dataset`` is executed (or at once). The
class must derive from :class:`MapBase`, a ``Generic`` with the same layout as torch's
``Dataset``, which is what makes the assignment allowed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec

__all__ = ["MapBase", "register_iterable_dataset", "register_map_dataset"]

_T_co = TypeVar("_T_co", covariant=True)


class MapBase(Generic[_T_co]):
    """The stand-in base of a map-style dataset until torch's ``Dataset`` replaces it."""


_MODULE = "torch.utils.data.dataset"


def register_iterable_dataset(cls: type) -> None:
    """Register ``cls`` as a virtual ``IterableDataset`` now, or when torch is imported."""
    _when_torch_data(lambda module: module.IterableDataset.register(cls))


def register_map_dataset(cls: type) -> None:
    """Make ``cls`` (a subclass of :class:`MapBase`) a subclass of torch's ``Dataset`` now,
    or when torch is imported."""

    def rebase(module: ModuleType) -> None:
        cls.__bases__ = tuple(module.Dataset if base is MapBase else base for base in cls.__bases__)

    _when_torch_data(rebase)


def _when_torch_data(action: Callable[[ModuleType], None]) -> None:
    """Run ``action(torch.utils.data.dataset)`` now if it is imported, else right after
    it is (nothing where torch is not installed)."""
    module = sys.modules.get(_MODULE)
    if module is not None:
        action(module)
        return
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return  # torch is not installed: a plain class
    sys.meta_path.insert(0, _RegisterOnImport(action))


class _RegisterOnImport:
    """A meta path finder that finds nothing itself; it wraps the loader of torch's
    dataset module. (Duck-typed: importing importlib.abc would cost ~9 ms.)"""

    def __init__(self, action: Callable[[ModuleType], None]) -> None:
        self._action = action

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
                    spec.loader = _RegisteringLoader(spec.loader, self._action)
                return spec  # type: ignore[no-any-return]
        return None


class _RegisteringLoader:
    def __init__(self, loader: Any, action: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._action = action

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        # Put the real loader back first, so the module looks as if we were never here.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._action(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
