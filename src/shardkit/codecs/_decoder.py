"""Decoding samples: custom handlers, then the image spec, then the registry."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError, DecodeError, UnsafeDataError
from ._images import image_extension
from ._imagespecs import check_spec, decode_image
from ._registry import Codecs, Refused, default_codecs

__all__ = ["Decoder", "Handler", "decode_sample"]

#: A custom decoder: ``handler(ext, data)`` returns the decoded value, or None to pass.
Handler = Callable[[str, bytes], Any]


def _parse_only(only: str | Sequence[str] | None) -> tuple[tuple[str, ...], ...] | None:
    if only is None:
        return None
    names = only.split() if isinstance(only, str) else list(only)
    if not all(isinstance(name, str) and name for name in names):
        raise TypeError(f"only= takes extension names, not {only!r}")
    return tuple(tuple(name.lower().removeprefix(".").split(".")) for name in names)


class Decoder:
    """Decode the bytes fields of samples; picklable, so it can go to DataLoader workers.

    ``Decoder("rgb8")`` decodes images to HxWx3 uint8 arrays and every other known
    extension with the built-in decoders. Each non-dunder field is tried against:

    1. the custom ``handlers`` (callables ``handler(ext, data)``), in order; ``ext`` is
       the field's full extension as in the sample (``seg.png``) and a handler returns
       None for fields it does not handle;
    2. the image spec, if one is given (a name from :data:`IMAGE_SPECS`), for fields
       whose last extension is an image extension;
    3. the registry's decoder for the last extension; fields with none stay bytes
       (images too, when no spec is given, as with webdataset).

    Fields ending in ``.gz`` are gunzipped first and decoded by the rest of their
    extension (``json.gz`` -> json), as webdataset does.

    ``allow_pickle`` lets ``pyd``/``pickle``/``pkl`` fields (and object arrays in npy/npz,
    and arbitrary objects in ``pth``) decode; that runs code from the shard, so without it
    those fields raise :class:`UnsafeDataError`. ``only`` restricts decoding to fields
    whose extension ends with one of the names (``["jpg", "seg.png"]``, or a
    space-separated string); the other fields pass through as they are. Fields that are
    no longer bytes raise TypeError unless ``partial=True``, which passes them through.
    A field that fails to decode raises :class:`DecodeError` carrying the sample key and
    URL. ``codecs`` is the registry to use (default: :data:`default_codecs`, looked up at
    decode time in the process that decodes).
    """

    def __init__(
        self,
        *handlers: str | Handler,
        allow_pickle: bool = False,
        only: str | Sequence[str] | None = None,
        partial: bool = False,
        codecs: Codecs | None = None,
    ) -> None:
        specs = [check_spec(h) for h in handlers if isinstance(h, str)]
        if len(specs) > 1:
            raise ConfigError(f"give at most one image spec, not {specs}")
        for handler in handlers:
            if not isinstance(handler, str) and not callable(handler):
                raise TypeError(
                    f"a handler is an image spec name or a callable (ext, data), "
                    f"not {type(handler).__name__}"
                )
        self.spec: str | None = specs[0] if specs else None
        self.handlers: tuple[Handler, ...] = tuple(h for h in handlers if not isinstance(h, str))
        self.allow_pickle = bool(allow_pickle)
        self.only = _parse_only(only)
        self.partial = bool(partial)
        self.codecs = codecs

    def __repr__(self) -> str:
        parts = [repr(x) for x in (self.spec, *self.handlers) if x is not None]
        if self.allow_pickle:
            parts.append("allow_pickle=True")
        if self.only is not None:
            parts.append(f"only={['.'.join(name) for name in self.only]!r}")
        if self.partial:
            parts.append("partial=True")
        return f"Decoder({', '.join(parts)})"

    def _selected(self, field: str) -> bool:
        if self.only is None:
            return True
        parts = tuple(field.lower().split("."))
        return any(parts[-len(target) :] == target for target in self.only)

    def __call__(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """A new sample with each selected bytes field decoded; dunder keys are kept."""
        key, url = sample.get("__key__"), sample.get("__url__")
        key = key if isinstance(key, str) else None
        url = url if isinstance(url, str) else None
        result: dict[str, Any] = {}
        for field, value in sample.items():
            if field.startswith("__") or not self._selected(field):
                result[field] = value
                continue
            if isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
            if not isinstance(value, bytes):
                if not self.partial:
                    raise TypeError(
                        f"field {field!r} of sample {key!r} is {type(value).__name__}, not "
                        "bytes: is it decoded already? Pass partial=True to let it through"
                    )
                result[field] = value
                continue
            try:
                result[field] = self._decode_field(field, value)
            except UnsafeDataError as exc:
                raise UnsafeDataError(exc.message, key=key, url=url) from None
            except Exception as exc:
                raise DecodeError(
                    f"cannot decode field {field!r}: {type(exc).__name__}: {exc}",
                    key=key,
                    url=url,
                ) from exc
        return result

    def _decode_field(self, ext: str, data: bytes) -> Any:
        while ext.lower().endswith(".gz"):
            ext, data = ext[:-3], gzip.decompress(data)
        for handler in self.handlers:
            value = handler(ext, data)
            if value is not None:
                return value
        if self.spec is not None and image_extension(ext):
            return decode_image(data, self.spec, ext)
        codecs = default_codecs if self.codecs is None else self.codecs
        decode = codecs.decoder(ext, allow_pickle=self.allow_pickle)
        if isinstance(decode, Refused):
            raise UnsafeDataError(
                f"refusing to unpickle field {ext!r}: unpickling runs code from the shard; "
                "pass allow_pickle=True (CLI: --allow-pickle) if you trust it"
            )
        if decode is None:
            return data
        return decode(data)


def decode_sample(
    sample: Mapping[str, Any],
    *handlers: str | Handler,
    allow_pickle: bool = False,
    only: str | Sequence[str] | None = None,
    partial: bool = False,
    codecs: Codecs | None = None,
) -> dict[str, Any]:
    """Decode one sample: ``Decoder(*handlers, **options)(sample)``."""
    decoder = Decoder(
        *handlers, allow_pickle=allow_pickle, only=only, partial=partial, codecs=codecs
    )
    return decoder(sample)
