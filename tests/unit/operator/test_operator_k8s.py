"""k8s.py's error mapping: what each API answer means to a reconcile (created, there already, refused for
good, gone, or an error worth retrying)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
from kubernetes.client import V1ObjectMeta, V1Pod
from kubernetes.client.exceptions import ApiException

from mwms_operator import k8s


def refusal(status: int, message: str = "") -> ApiException:
    error = ApiException(status=status, reason="Refused")
    error.body = json.dumps({"message": message})
    return error


class Answering:
    """Stands in for the generated client: every call raises `error`, or returns `value`."""

    def __init__(self, error: ApiException | None = None, value: Any = None) -> None:
        self.error, self.value = error, value

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.error is not None:
                raise self.error
            return self.value

        return call


def kube(error: ApiException | None = None, value: Any = None) -> k8s.Kube:
    client = k8s.Kube.__new__(k8s.Kube)
    client.core = client.custom = Answering(error, value)
    return client


def test_create_is_true_when_created_and_false_when_it_exists_or_its_namespace_goes():
    assert kube().create_pod("ns", {}) is True
    assert kube(refusal(409)).create_pod("ns", {}) is False
    assert (
        kube(refusal(403, 'pods "x" is forbidden: ns is being terminated')).create_service("ns", {}) is False
    )


@pytest.mark.parametrize(
    "error",
    [
        refusal(422, "Pod is invalid: spec.containers[0].imagePullPolicy: Unsupported value"),
        refusal(400, "bad request"),
        refusal(403, 'pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged'),
    ],
)
def test_a_refusal_for_good_is_rejected_with_the_servers_message(error):
    with pytest.raises(k8s.Rejected) as raised:
        kube(error).create_pod("ns", {})
    assert str(raised.value) == json.loads(error.body)["message"]


@pytest.mark.parametrize(
    "message",
    [
        'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1',
        'pods "x" is forbidden: maximum cpu usage per Container is 500m, but limit is 1',
        'admission webhook "deny.example.com" denied the request: not today',
    ],
)
def test_a_refusal_for_now_is_refused_with_the_servers_message(message):
    with pytest.raises(k8s.Refused) as raised:
        kube(refusal(403, message)).create_pod("ns", {})
    assert str(raised.value) == message


@pytest.mark.parametrize("status", [500, 503])
def test_other_errors_propagate_for_a_retry(status):
    with pytest.raises(ApiException):
        kube(refusal(status, "etcdserver: request timed out")).create_pod("ns", {})


def test_a_body_the_clients_own_schema_refuses_is_rejected_naming_the_field():
    """The generated client validates a body against its models before sending it: a typo never reaches the
    API server, and must not end as a traceback either."""
    client = k8s.Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "trainer", "image": "i", "resourcez": {}}]},
    }
    with pytest.raises(k8s.Rejected) as raised:
        client.create_pod("ns", pod)
    assert str(raised.value).startswith("Pod is invalid: spec.containers[0].resourcez: ")


def test_gone_is_not_an_error():
    kube(refusal(404)).delete_pod("ns", "p")
    kube(refusal(404)).delete_trainjob("ns", "j")
    assert kube(refusal(404)).patch_status("ns", "j", {"phase": "Running"}) is None
    assert kube(refusal(404)).pod_uid("ns", "p") is None
    assert kube(value=V1Pod(metadata=V1ObjectMeta(uid="u-1"))).pod_uid("ns", "p") == "u-1"
    with pytest.raises(ApiException):
        kube(refusal(500)).pod_uid("ns", "p")
