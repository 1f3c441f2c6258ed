"""Decoding samples: custom handlers, then the image spec, then the registry."""

from __future__ import annotations

import copy
import io
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ..budget import limit as budget_limit
from ..budget import refuse
from ..errors import (
    ConfigError,
    DataError,
    DecodeError,
    DecodeLimitError,
    ShardkitError,
    UnsafeDataError,
)
from ._failures import DECODE_FAILURES, GUNZIP_FAILURES, image_failures
from ._images import image_extension
from ._imagespecs import check_spec, decode_image
from ._registry import Codecs, Refused, default_codecs
from ._viewfile import Field

__all__ = ["Decoder", "Handler", "decode_sample"]

# zlib gets at most _GUNZIP_IN bytes of input and gives at most _GUNZIP_OUT per call.
_GUNZIP_IN = 1 << 16
_GUNZIP_OUT = 1 << 22
_NONZERO = re.compile(rb"[^\x00]")

#: A custom decoder: ``handler(ext, data)`` returns the decoded value, or None to pass.
Handler = Callable[[str, bytes], Any]
# A handler with ``reads_views = True`` (shardkit.audio(), shardkit.video()).
_ViewHandler = Callable[[str, Field], Any]


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
       None for fields it does not handle. ``data`` is ``bytes``, except for handlers
       with ``reads_views = True`` (:func:`shardkit.audio`, :func:`shardkit.video`): a
       field read with ``copy=False`` reaches them as the memoryview it is, uncopied;
    2. the image spec, if one is given (a name from :data:`IMAGE_SPECS`), for fields
       whose last extension is an image extension;
    3. the registry's decoder for the last extension; fields with none stay bytes
       (images too, when no spec is given, as with webdataset).

    Fields ending in ``.gz`` are gunzipped first and decoded by the rest of their
    extension (``json.gz`` -> json), as webdataset does.

    A ``.gz`` field may expand to at most the budget's ``expanded`` limit (1 GiB,
    ``SHARDKIT_MAX_EXPANDED``; ``max_gunzip_size`` bytes where it is given); past that it
    is a :class:`DecodeLimitError`, raised before more memory is taken. npz and
    ``torch.save`` fields whose zip members declare more than that limit are refused too.

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
        max_gunzip_size: int | None = None,
    ) -> None:
        if max_gunzip_size is None:
            pass
        elif isinstance(max_gunzip_size, bool) or not isinstance(max_gunzip_size, int):
            raise TypeError(f"max_gunzip_size must be an int, not {max_gunzip_size!r}")
        elif max_gunzip_size < 0:
            raise ConfigError(f"max_gunzip_size must be >= 0, not {max_gunzip_size}")
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
        self.max_gunzip_size = max_gunzip_size

    def __repr__(self) -> str:
        parts = [repr(x) for x in (self.spec, *self.handlers) if x is not None]
        if self.allow_pickle:
            parts.append("allow_pickle=True")
        if self.only is not None:
            parts.append(f"only={['.'.join(name) for name in self.only]!r}")
        if self.partial:
            parts.append("partial=True")
        if self.max_gunzip_size is not None:
            parts.append(f"max_gunzip_size={self.max_gunzip_size}")
        return f"Decoder({', '.join(parts)})"

    def for_stream(self, ctx: Any) -> Decoder:
        """This decoder for one stream of a pipeline (``ctx``: its seed, epoch, rank and
        worker): handlers with a ``for_stream(ctx)`` method (:func:`shardkit.video`,
        whose clip positions derive from them) are replaced by what it returns."""
        if not any(hasattr(h, "for_stream") for h in self.handlers):
            return self
        bound = copy.copy(self)
        bound.handlers = tuple(
            h.for_stream(ctx) if hasattr(h, "for_stream") else h for h in self.handlers
        )
        return bound

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
            if not isinstance(value, (bytes, bytearray, memoryview)):
                if not self.partial:
                    raise TypeError(
                        f"field {field!r} of sample {key!r} is {type(value).__name__}, not "
                        "bytes: is it decoded already? Pass partial=True to let it through"
                    )
                result[field] = value
                continue
            try:
                result[field] = self._decode_field(field, value)
            except (DataError, UnsafeDataError) as exc:  # bad data: say where it is
                exc.key = exc.key if exc.key is not None else key
                exc.url = exc.url if exc.url is not None else url
                raise
        return result

    def _decode_field(self, field: str, field_data: Field) -> Any:
        # Only the decoding libraries' own errors are bad data (see _failures); a
        # custom handler runs unguarded: its NameError is a bug, not a corrupt sample.
        ext = field
        while ext.lower().endswith(".gz"):
            field_data = _guarded(field, GUNZIP_FAILURES, gunzip, field_data, self.max_gunzip_size)
            ext = ext[:-3]
        # A view (copy=False) reaches the handlers that read views as it is; the others,
        # and the decoders after them, get bytes (copied once, when first needed).
        data = field_data if isinstance(field_data, bytes) else None
        for handler in self.handlers:
            if getattr(handler, "reads_views", False) is True:
                value = cast(_ViewHandler, handler)(ext, field_data)
            else:
                data = bytes(field_data) if data is None else data
                value = handler(ext, data)
            if value is not None:
                return value
        data = bytes(field_data) if data is None else data
        if self.spec is not None and image_extension(ext):
            return _guarded(field, image_failures(), decode_image, data, self.spec, ext)
        codecs = default_codecs if self.codecs is None else self.codecs
        decode = codecs.decoder(ext, allow_pickle=self.allow_pickle)
        if isinstance(decode, Refused):
            raise UnsafeDataError(
                f"refusing to unpickle field {ext!r}: unpickling runs code from the shard; "
                "pass allow_pickle=True (CLI: --allow-pickle) if you trust it"
            )
        if decode is None:
            return data
        return _guarded(field, DECODE_FAILURES, decode, data)


def _guarded(
    field: str, failures: tuple[type[Exception], ...], fn: Callable[..., Any], *args: Any
) -> Any:
    """``fn(*args)``, with the decoding library's ``failures`` as a DecodeError."""
    try:
        return fn(*args)
    except DecodeError as exc:  # a decoder that names its library's error itself
        raise type(exc)(
            f"cannot decode field {field!r}: {exc.message}", key=exc.key, url=exc.url
        ) from (exc.__cause__ or exc)
    except ShardkitError:  # ours already say what they are (ConfigError is a ValueError)
        raise
    except failures as exc:
        raise DecodeError(f"cannot decode field {field!r}: {type(exc).__name__}: {exc}") from exc


def decode_sample(
    sample: Mapping[str, Any],
    *handlers: str | Handler,
    allow_pickle: bool = False,
    only: str | Sequence[str] | None = None,
    partial: bool = False,
    codecs: Codecs | None = None,
    max_gunzip_size: int | None = None,
) -> dict[str, Any]:
    """Decode one sample: ``Decoder(*handlers, **options)(sample)``."""
    decoder = Decoder(
        *handlers,
        allow_pickle=allow_pickle,
        only=only,
        partial=partial,
        codecs=codecs,
        max_gunzip_size=max_gunzip_size,
    )
    return decoder(sample)


def gunzip(data: Field, limit: int | None) -> bytes:
    """Decompress gzip data (every member, as ``gzip.decompress``) to at most ``limit`` bytes
    (None: the budget's ``expanded`` limit, a :class:`DecodeLimitError` past it).

    Raises ValueError once the output would pass ``limit``, having held at most
    ``limit + 1`` bytes of it (in one buffer: pieces go to a BytesIO, whose getvalue()
    hands that buffer over); zlib checks each member's CRC and length. Input goes to
    zlib in chunks, so that what is copied per member is bounded: a field of a million
    empty members takes linear time, not quadratic (``gzip.decompress`` copies the rest
    of the data after each member).
    """
    budgeted = limit is None
    if limit is None:
        limit = budget_limit("expanded")
    out = io.BytesIO()
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        inflater = zlib.decompressobj(wbits=31)
        pending: bytes | memoryview = b""
        step = 512  # doubles: what a member hands back is never more than it used
        while not inflater.eof:
            if not pending:
                if pos >= len(view):
                    raise EOFError("gzipped data ends before the end of its stream")
                pending = view[pos : pos + step]
                pos += len(pending)
                step = min(2 * step, _GUNZIP_IN)
            room = min(limit + 1 - out.tell(), _GUNZIP_OUT)
            out.write(inflater.decompress(pending, room))
            if out.tell() > limit:
                if budgeted:
                    what = "a gzipped field, inflated so far"
                    refuse("expanded", out.tell(), what=what, error=DecodeLimitError)
                raise ValueError(f"gzipped data expands past max_gunzip_size ({limit} bytes)")
            pending = inflater.unconsumed_tail
        pos -= len(inflater.unused_data)  # the bytes after this member go back
        nonzero = _NONZERO.search(data, pos)  # like gzip.decompress, skip zero padding
        pos = nonzero.start() if nonzero else len(view)
    return out.getvalue()
