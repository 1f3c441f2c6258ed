"""The registry: extension -> encoder and decoder, and encoding whole samples."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError, EncodeError, ShardkitError
from . import _builtin as b
from ._failures import ENCODE_FAILURES
from ._images import ENCODABLE_IMAGE_EXTENSIONS, encode_image, last_component
from ._tenbin import decode_tenbin, encode_tenbin
from ._text import plain_bytes

__all__ = [
    "REFUSED",
    "Codecs",
    "Refused",
    "FieldDecoder",
    "FieldEncoder",
    "default_codecs",
    "register",
]

FieldEncoder = Callable[[Any], bytes]
FieldDecoder = Callable[[bytes], Any]


class Refused:
    """Marks a field whose only decoder unpickles and ``allow_pickle`` is off."""

    def __repr__(self) -> str:
        return "REFUSED"


REFUSED = Refused()


@dataclass(frozen=True)
class _Entry:
    encode: FieldEncoder | None = None
    decode: FieldDecoder | None = None
    # Used instead of ``decode`` when the caller passes allow_pickle=True.
    decode_trusted: FieldDecoder | None = None


class Codecs:
    """A registry mapping an extension (``jpg``, ``cls``...) to an encoder and a decoder.

    ``Codecs()`` starts with the built-in set (webdataset's); :data:`default_codecs` is
    the process-wide registry that :func:`encode_sample` and :class:`Decoder` use unless
    given another. Fields dispatch on the lower-cased last dot-component of their
    extension: ``seg.png`` uses the ``png`` entry. Registries pickle (with their
    functions, which must be picklable too).
    """

    def __init__(self, *, builtins: bool = True) -> None:
        self._table: dict[str, _Entry] = dict(_BUILTINS) if builtins else {}

    def register(
        self,
        ext: str,
        *,
        encoder: FieldEncoder | None = None,
        decoder: FieldDecoder | None = None,
    ) -> None:
        """Add or replace the encoder and/or decoder of one extension component.

        ``encoder(value) -> bytes`` runs on values that are not already bytes or str;
        ``decoder(data: bytes) -> value`` runs on field bytes. Giving only one of them
        keeps the other as it was.
        """
        if not isinstance(ext, str) or not ext or "." in ext or ext.startswith("__"):
            raise ConfigError(
                f"register() takes one extension component such as 'png', not {ext!r}: "
                "fields dispatch on the last component of their extension"
            )
        if encoder is None and decoder is None:
            raise ConfigError(f"register({ext!r}) needs encoder= or decoder= (or both)")
        for name, fn in (("encoder", encoder), ("decoder", decoder)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name} must be callable, not {type(fn).__name__}")
        ext = ext.lower()
        entry = self._table.get(ext, _Entry())
        if encoder is not None:
            entry = replace(entry, encode=encoder)
        if decoder is not None:
            entry = replace(entry, decode=decoder, decode_trusted=None)
        self._table[ext] = entry

    def copy(self) -> Codecs:
        """An independent registry with the same entries."""
        new = Codecs(builtins=False)
        new._table = dict(self._table)
        return new

    def extensions(self) -> frozenset[str]:
        """Every extension component with an encoder or a decoder."""
        return frozenset(self._table)

    def encode_sample(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """A new sample whose non-dunder values are all bytes (see :func:`encode_sample`).

        A field ending in ``.gz`` is encoded by the rest of its extension (``json.gz``:
        json) and then gzipped (deterministically: no timestamp), as webdataset does;
        bytes that are gzip data already (they start with the gzip magic) pass through.
        """
        key = sample.get("__key__")
        key = key if isinstance(key, str) else None
        return {
            field: value if field.startswith("__") else self._encode_field(field, value, key)
            for field, value in sample.items()
        }

    def _encode_field(self, field: str, value: Any, key: str | None) -> bytes:
        if field.lower().endswith(".gz"):
            if isinstance(value, (bytes, bytearray, memoryview)) and value[:2] == b"\x1f\x8b":
                return bytes(value)  # gzipped already (a field read from a shard)
            return b.gzip_bytes(self._encode_field(field[:-3], value, key))
        data = plain_bytes(value)
        if data is not None:
            return data
        ext = last_component(field)
        entry = self._table.get(ext)
        kind = type(value).__name__
        if entry is None or entry.encode is None:
            raise EncodeError(
                f"field {field!r}: no encoder for ext {ext!r} and value of type {kind}: "
                "pass bytes or str, or register an encoder",
                key=key,
            )
        try:
            data = entry.encode(value)
        except ShardkitError:  # ours say what they are (a missing extra is no bad value)
            raise
        except ENCODE_FAILURES as exc:  # anything else is a bug in the encoder: it propagates
            raise EncodeError(
                f"field {field!r}: cannot encode a {kind} as {ext!r}: {exc}", key=key
            ) from exc
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            raise EncodeError(
                f"field {field!r}: the {ext!r} encoder returned {type(data).__name__}, not bytes",
                key=key,
            )
        return data

    def decoder(self, ext: str, *, allow_pickle: bool) -> FieldDecoder | Refused | None:
        """The decoder for ``ext``'s last component; REFUSED if it would need pickle."""
        entry = self._table.get(last_component(ext))
        if entry is None:
            return None
        if allow_pickle and entry.decode_trusted is not None:
            return entry.decode_trusted
        if entry.decode is None and entry.decode_trusted is not None:
            return REFUSED
        return entry.decode


def _builtins() -> dict[str, _Entry]:
    table: dict[str, _Entry] = {}

    def add(exts: str, entry: _Entry) -> None:
        table.update(dict.fromkeys(exts.split(), entry))

    add("cls cls2 class count index inx id", _Entry(b.encode_int, b.decode_int))
    add("txt text transcript", _Entry(None, b.decode_text))
    add("json jsn", _Entry(b.encode_json, b.decode_json))
    add("pyd pickle pkl", _Entry(b.encode_pickle, None, b.unpickle))
    add("pth", _Entry(b.encode_torch, b.decode_torch, b.decode_torch_trusted))
    add("npy", _Entry(b.encode_npy, b.decode_npy, b.decode_npy_trusted))
    add("npz", _Entry(b.encode_npz, b.decode_npz, b.decode_npz_trusted))
    add("ten tb tenbin", _Entry(encode_tenbin, decode_tenbin))
    add("mp msg msgpack", _Entry(b.encode_msgpack, b.decode_msgpack))
    add("cbor", _Entry(b.encode_cbor, b.decode_cbor))
    # Images encode here; they decode through a Decoder's image spec (else stay bytes).
    for ext in ENCODABLE_IMAGE_EXTENSIONS:
        table[ext] = _Entry(functools.partial(encode_image, ext=ext))
    return table


_BUILTINS = _builtins()

#: The process-wide registry used when no other is given.
default_codecs = Codecs()


def register(
    ext: str, *, encoder: FieldEncoder | None = None, decoder: FieldDecoder | None = None
) -> None:
    """Add or replace an extension in :data:`default_codecs` (see :meth:`Codecs.register`).

    Registrations are per process: a DataLoader worker started with ``spawn`` sees those
    made when your modules are imported, not ones made later in the parent.
    """
    default_codecs.register(ext, encoder=encoder, decoder=decoder)
