"""Optional dependencies: which extra installs each module, and how to import them.

A feature that needs an optional module calls :func:`require` before importing it; when
the module is missing that is a :class:`~shardkit.errors.MissingDependencyError` naming
the extra to install (``pip install 'shardkit[images]'``), never a data error.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependencyError

__all__ = ["EXTRAS", "optional", "require", "require_all"]

#: top-level module -> (the extra that installs it, its name on PyPI)
EXTRAS: dict[str, tuple[str, str]] = {
    "PIL": ("images", "Pillow"),
    "simplejpeg": ("images", "simplejpeg"),
    "cv2": ("images", "opencv-python-headless"),
    "torch": ("torch", "torch"),
    "s3fs": ("s3", "s3fs"),
    "gcsfs": ("gcs", "gcsfs"),
    "aiohttp": ("http", "aiohttp"),
    "ray": ("ray", "ray"),
    "dask": ("dask", "dask"),
    "distributed": ("dask", "distributed"),
    "msgpack": ("formats", "msgpack"),
    "cbor2": ("formats", "cbor2"),
    "matplotlib": ("plot", "matplotlib"),
    "blake3": ("blake3", "blake3"),  # also a core dependency (the default --hash)
    "xxhash": ("xxhash", "xxhash"),
    "pyarrow": ("parquet", "pyarrow"),
    "soundfile": ("audio", "soundfile"),
    "av": ("video", "av"),
    "tokenizers": ("tokens", "tokenizers"),
}


def missing(module: str, purpose: str) -> MissingDependencyError:
    """The error saying that ``purpose`` needs ``module`` and which extra installs it."""
    top = module.partition(".")[0]
    extra, package = EXTRAS.get(top, ("all", top))
    return MissingDependencyError(
        f"{purpose} needs {package}, which is not installed: pip install 'shardkit[{extra}]'"
    )


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module``; a :class:`MissingDependencyError` when it is not installed.

    An ImportError from *inside* an installed module (a broken install) propagates as
    it is: that is not a missing extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = exc.name or ""
        if name and (module == name or module.startswith(name + ".")):
            raise missing(module, purpose) from exc
        raise


def require_all(modules: tuple[str, ...], purpose: str) -> None:
    """Check that every one of ``modules`` imports: one :class:`MissingDependencyError`
    naming *every* missing package and the extras that install them all at once."""
    absent = []
    for module in modules:
        try:
            require(module, purpose)
        except MissingDependencyError:
            absent.append(EXTRAS.get(module.partition(".")[0], ("all", module)))
    if absent:
        packages = " and ".join(dict.fromkeys(package for _, package in absent))
        extras = ",".join(dict.fromkeys(extra for extra, _ in absent))
        raise MissingDependencyError(
            f"{purpose} needs {packages}, which {'is' if len(absent) == 1 else 'are'} not "
            f"installed: pip install 'shardkit[{extras}]'"
        )


def optional(module: str) -> ModuleType | None:
    """Import ``module`` if it is installed (an accelerator with a fallback), else None."""
    try:
        return require(module, module)
    except MissingDependencyError:
        return None
