"""Keys of a list of http(s) URLs read as the names they escape: ``caf%C3%A9%20x.jpg``
is the sample ``café x``, not ``caf%C3%A9%20x`` (what a new user saw in show, tsv, view)."""

from __future__ import annotations

from shardkit.builder.keys import make_keys, relative_paths


def test_http_url_paths_are_unescaped_into_keys() -> None:
    locations = [
        "https://host/imgs/caf%C3%A9%20x.jpg",
        "https://host/imgs/b.jpg?sig=1%2F2",
        "https://host/imgs/a%2Fb.jpg",  # an escaped slash is no folder
        "https://host/imgs/%2E%2E/%2e%2e.jpg",  # escaped dots climb nowhere
    ]
    keys = make_keys(relative_paths(locations, "https://host/"))
    assert keys == ["imgs/café x", "imgs/b", "imgs/a_b", "imgs/__/__"]


def test_object_store_names_are_taken_as_written() -> None:
    keys = make_keys(relative_paths(["s3://bucket/x/a%20b.jpg", "gs://b/y/c.jpg"], "s3://bucket/"))
    assert keys == ["s3/bucket/x/a%20b", "gs/b/y/c"]
