"""The fake API server refuses loudly what it does not model: a 501 naming it, and a failure
when the fake stops, so that a test can't pass on an answer a real API server would not give."""

import httpx
import pytest

from tests.gateway import kube_fake

NAMESPACED = "/apis/sandbox.cozystack.io/v1alpha1/namespaces/alice/workspacesandboxes"


def test_a_route_it_does_not_model_is_a_501_naming_it_and_fails_the_test() -> None:
    with pytest.raises(
        AssertionError, match=r"does not model: \['GET /api/v1/pods'\]"
    ):  # raised as the block ends
        with kube_fake.serve() as (_, url):
            answer = httpx.get(url + "/api/v1/pods")
            assert answer.status_code == 501
            assert answer.json()["reason"] == "NotImplemented"
            assert "does not model GET /api/v1/pods" in answer.json()["message"]


def test_a_watch_it_does_not_model_fails_the_test_too() -> None:
    with pytest.raises(AssertionError, match="does not model"):
        with kube_fake.serve() as (_, url):
            assert httpx.get(url + "/api/v1/pods?watch=true").status_code == 501


def test_what_it_models_leaves_nothing_to_fail_on() -> None:
    with kube_fake.serve() as (cluster, url):
        assert httpx.get(url + NAMESPACED).status_code == 200
        assert httpx.get(url + NAMESPACED + "/missing").status_code == 404
    assert cluster.unmodelled == []
