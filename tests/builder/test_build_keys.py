"""Sample keys from paths: the exact rules, and the fast path equal to the full rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.builder._keys import _resolve, key_base, make_keys, path_key, relative_path


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


def relative_paths(locations: list[str], root: str) -> list[str]:
    base = key_base(locations, root)
    return [relative_path(location, base) for location in locations]


def test_list_paths_are_relative_to_the_root_or_to_their_common_folder() -> None:
    inside = ["/data/lists/imgs/a/1.jpg", "/data/lists/imgs/b/2.jpg"]
    assert relative_paths(inside, "/data/lists") == ["imgs/a/1.jpg", "imgs/b/2.jpg"]
    outside = ["/data/lists/../imgs/class0/01600.jpg", "/data/imgs/class1/7.jpg"]
    assert relative_paths(outside, "/data/lists") == ["class0/01600.jpg", "class1/7.jpg"]
    urls = ["https://host.example/x/a/1.jpg", "https://host.example/x/b/2.jpg"]
    assert relative_paths(urls, "/data/lists") == ["a/1.jpg", "b/2.jpg"]
    assert relative_paths(urls, "https://host.example/x") == ["a/1.jpg", "b/2.jpg"]
    hosts = ["https://one.example/a.jpg", "https://two.example/a.jpg"]
    assert relative_paths(hosts, "/") == ["one.example/a.jpg", "two.example/a.jpg"]
    mixed = ["/data/a.jpg", "s3://bucket/a.jpg"]
    assert make_keys(relative_paths(mixed, "/elsewhere")) == ["data/a", "s3/bucket/a"]
    assert relative_paths(["/data/one.jpg"], "/elsewhere") == ["one.jpg"]


_PARTS = st.sampled_from(["a", "b", "..", ".", "c.d", "x y", ""])
_LOCATIONS = st.lists(
    st.tuples(
        st.sampled_from(["/r/", "/r/s/", "/t/", "s3://bk/", "https://h/"]),
        st.lists(_PARTS, max_size=3),
        st.sampled_from(["1.jpg", "1.png", "2.b.jpg", "2_b.jpg"]),
    ).map(lambda t: t[0] + "/".join([*t[1], t[2]])),
    unique=True,
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(locations=_LOCATIONS, root=st.sampled_from(["/r", "/r/s", "s3://bk", "/"]))
def test_list_keys_are_unique_and_safe_whatever_the_paths(locations: list[str], root: str) -> None:
    keys = make_keys(relative_paths(locations, root))
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert key and "." not in key.rsplit("/", 1)[-1]
        assert not key.startswith("/") and ".." not in key.split("/")
    assert keys == make_keys(relative_paths(locations, root))


def test_a_urls_query_stays_in_its_key_and_its_fragment_does_not() -> None:
    urls = [
        "https://cdn/x/a.jpg?sig=1.5/b&w=2",
        "https://cdn/x/a.jpg?sig=2",
        "https://cdn/x/b.png#top",
        "https://cdn/x/c?id=7",
    ]
    paths = relative_paths(urls, "/list")
    assert paths == ["a?sig=1%2E5%2Fb&w=2.jpg", "a?sig=2.jpg", "b.png", "c?id=7"]
    assert make_keys(paths) == ["a?sig=1%2E5%2Fb&w=2", "a?sig=2", "b", "c?id=7"]
    # a query that looks like an extension, and one that looks like an escape: all distinct
    tricky = [
        "https://h/a?b.jpg",
        "https://h/a.jpg?b",
        "https://h/a.jpg?x/y",
        "https://h/a.jpg?x%2Fy",
    ]
    assert len(set(make_keys(relative_paths(tricky, "/list")))) == 4
