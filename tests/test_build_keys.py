"""Sample keys from paths: the exact rules, and the fast path equal to the full rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.builder.keys import _resolve, make_keys, path_key


def test_collisions_get_the_extension_then_a_counter() -> None:
    paths = ["c/a.jpg", "c/a.png", "c/a.b.png", "c/a_b.png", "c/a_b_png.jpg", "d/x y.jpg"]
    assert make_keys(paths) == [
        "c/a_jpg",
        "c/a_png",
        "c/a_b_png",
        "c/a_b_png_2",
        "c/a_b_png_3",
        "d/x y",
    ]


_NAMES = st.sampled_from(["a", "a.b", "a_b", "b", "a.b.c", "a_b_c", "ü", "x y"])
_EXTS = st.sampled_from(["jpg", "png", "JPG", "jpeg"])
_PATHS = st.lists(
    st.tuples(st.sampled_from(["c", "d/e"]), _NAMES, _EXTS).map(lambda t: f"{t[0]}/{t[1]}.{t[2]}"),
    unique=True,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(paths=_PATHS)
def test_the_fast_path_gives_what_the_full_rules_give(paths: list[str]) -> None:
    keys = make_keys(paths)
    assert keys == _resolve(paths, [path_key(p) for p in paths])
    assert len(set(keys)) == len(keys)
    assert all("." not in k.rsplit("/", 1)[-1] for k in keys)
