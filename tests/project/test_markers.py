"""The ``service`` marker is set by what a test uses (tests/conftest.py), so that
``make quick`` (``-m "not slow and not service"``) runs without any server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import service_reason
from helpers.remote import http_service, s3_options
from helpers.scale import address_of


def _served() -> Any:
    return s3_options()


def _reads_over_http() -> None:
    http_service()


def _through_a_helper() -> None:
    _served()


def _on_an_engine() -> None:
    address_of("local")


def _plain(tmp_path: Any) -> None:
    assert tmp_path


# Looked up by name, so that these tests themselves use no service helper.
P = {f.__name__: f for f in (_served, _reads_over_http, _through_a_helper, _on_an_engine, _plain)}


def test_a_test_that_calls_a_service_helper_needs_the_service() -> None:
    assert service_reason(P["_reads_over_http"], {}, {}) == "uses http_service"
    assert service_reason(P["_through_a_helper"], {}, {}) == "uses s3_options"


def test_a_fixture_carries_its_service_to_the_tests_that_use_it() -> None:
    assert (
        service_reason(P["_plain"], {"s3_bucket": P["_plain"]}, {}) == "uses the fixture s3_bucket"
    )
    assert service_reason(P["_plain"], {"served": P["_through_a_helper"]}, {}) == "uses s3_options"


def test_a_cluster_is_needed_unless_the_engine_is_local() -> None:
    assert service_reason(P["_on_an_engine"], {}, {"engine": "local"}) == ""
    assert service_reason(P["_on_an_engine"], {}, {"engine": "dask"}) != ""
    assert service_reason(P["_on_an_engine"], {}, {}) != ""


def test_a_test_without_a_service_is_left_alone(request: pytest.FixtureRequest) -> None:
    assert service_reason(P["_plain"], {}, {}) == ""
    assert request.node.get_closest_marker("service") is None


@pytest.mark.parametrize("engine", ["local"])
def test_this_test_is_marked_as_it_uses(request: pytest.FixtureRequest, engine: str) -> None:
    address_of(engine)
    assert request.node.get_closest_marker("service") is None
