"""Collating a list of items into a batch.

Items that are tuples give a tuple of columns, dicts a dict of columns (keyed by the
first item's keys), anything else one column. A column becomes:

* ``"auto"`` (the default): numbers -> a numpy array; numpy arrays -> one stacked array;
  torch tensors -> one stacked tensor; anything else (str, bytes, dicts, ...) -> a list.
* ``"numpy"``: as auto, and tensors become numpy arrays too.
* ``"torch"``: numbers and arrays become torch tensors (arrays are stacked without a copy
  through :func:`torch.from_numpy`).
* ``None``: no collation, the batch is the list of items.

Or pass your own ``collate(items) -> batch``. Arrays of different shapes cannot stack:
that raises ValueError naming the column (resize in ``.map()``, or use ``collate=None``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

__all__ = ["Collate", "collate_batch"]

Collate = Literal["auto", "numpy", "torch"] | Callable[[list[Any]], Any] | None

_NUMBERS = (int, float, bool)


def collate_batch(items: list[Any], mode: Collate) -> Any:
    """Collate ``items`` as ``mode`` says (see the module docs)."""
    if mode is None:
        return items
    if callable(mode):
        return mode(items)
    first = items[0]
    if isinstance(first, tuple):
        return tuple(_column([item[i] for item in items], mode, str(i)) for i in range(len(first)))
    if isinstance(first, dict):
        return {key: _column([item[key] for item in items], mode, key) for key in first}
    return _column(items, mode, "items")


def _column(values: Sequence[Any], mode: str, name: str) -> Any:
    first = values[0]
    kind = _kind(first)
    if kind == "other" or any(_kind(v) != kind for v in values[1:]):
        return list(values)
    if kind == "tensor":
        import torch

        stacked = _stack(torch.stack, values, name)
        return stacked.numpy() if mode == "numpy" else stacked
    import numpy as np

    array = np.asarray(values) if kind == "number" else _stack(np.stack, values, name)
    if mode == "torch":
        from .._optional import require

        require("torch", "collate='torch'")
        import torch

        return torch.from_numpy(array)
    return array


def _stack(stack: Callable[[Any], Any], values: Sequence[Any], name: str) -> Any:
    try:
        return stack(list(values))
    except (ValueError, RuntimeError) as exc:
        shapes = sorted({tuple(v.shape) for v in values})
        raise ValueError(
            f"cannot stack column {name!r}: shapes {shapes[:3]} differ; resize in .map() "
            "or pass collate=None"
        ) from exc


def _kind(value: Any) -> str:
    if isinstance(value, _NUMBERS):
        return "number"
    module = type(value).__module__
    if module == "numpy":
        return "array" if type(value).__name__ == "ndarray" else "number"
    if module.startswith("torch") and type(value).__name__ in ("Tensor", "Parameter"):
        return "tensor"
    return "other"
