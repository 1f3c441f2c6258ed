"""The build's fast tar path writes exactly what the reference tar encoder writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.formats import tar
from shardkit.formats.tar import tar_chunks

_KEYS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="./\x00"),
    min_size=1,
    max_size=120,
).map(lambda s: f"class/{s}")
_SIZES = st.sampled_from([0, 1, 511, 512, 513, 4095, 4096, 4097, 70_000])


@settings(max_examples=200, deadline=None)
@given(
    key=_KEYS,
    sizes=st.lists(_SIZES, min_size=1, max_size=3),
    exts=st.lists(st.sampled_from(["jpg", "cls", "json", "seg.png", "ü"]), min_size=3),
)
def test_tar_chunks_are_the_reference_encoding(key: str, sizes: list[int], exts: list[str]) -> None:
    fields = [(ext, bytes([n % 251]) * n) for ext, n in zip(exts, sizes, strict=False)]
    fields = list(dict(fields).items())  # one field per extension
    chunks, total = tar_chunks(key, fields)
    reference = tar.encode_sample({"__key__": key, **dict(fields)})
    assert b"".join(chunks) == reference
    assert total == len(reference)
