"""kube/client.py: against a real HTTP server on 127.0.0.1 that answers as the API server would: what each
answer means to a reconcile (created, there already, refused for good or for now, gone, or an error worth
retrying), what goes over the wire, and how connections and credentials are kept."""

from __future__ import annotations

import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from mwms_dev import pki
from mwms_kit.fake_api_server import FakeApiServer, Seen, serve
from mwms_operator.kube import client as k8s
from mwms_operator.kube import refusals

# Only the metadata, not a whole TrainJob: an event's apiVersion and kind must come from the operator itself.
JOB = {"metadata": {"name": "mnist", "namespace": "ns", "uid": "u-1"}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    yield from serve(FakeApiServer())


def kube_for(api: FakeApiServer, token: str = "t0k3n") -> k8s.Kube:
    return k8s.Kube(lambda: kopf.ConnectionInfo(server=api.url, token=token))


OWNER = {"kind": "TrainJob", "name": "mnist", "uid": "u-1", "controller": True}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "ownerReferences": [OWNER]},
       "spec": {"containers": []}}  # fmt: skip
CREATED = {**POD, "metadata": {**POD["metadata"], "uid": "pod-uid-1"}}


def there_already(owners: list[dict[str, Any]]) -> Callable[[Seen], tuple[int, Any]]:
    """A create answers 409; reading the object shows these owners."""

    def answer(seen: Seen) -> tuple[int, Any]:
        if seen.method == "POST":
            return 409, {"kind": "Status", "message": 'pods "p" already exists', "code": 409}
        return 200, {**POD, "metadata": {"name": "p", "uid": "theirs", "ownerReferences": owners}}

    return answer


def test_create_is_the_uid_when_created_none_when_the_jobs_object_exists_or_its_namespace_goes(api):
    kube = kube_for(api)
    api.reply(201, CREATED)
    assert kube.create_pod("ns", POD) == "pod-uid-1"
    api.answer = there_already([OWNER])
    assert kube.create_pod("ns", POD) is None
    assert [(s.method, s.path) for s in api.seen[-2:]] == [
        ("POST", "/api/v1/namespaces/ns/pods?fieldValidation=Strict"),
        ("GET", "/api/v1/namespaces/ns/pods/p"),
    ]
    api.refuse(403, 'services "x" is forbidden: unable to create new content in namespace ns because it is '
                    "being terminated")  # fmt: skip
    with pytest.raises(refusals.NamespaceEnding, match="being terminated"):
        kube.create_service("ns", {"kind": "Service"})


def test_every_request_is_counted_and_timed_by_verb_resource_and_answer(api):
    def count(verb: str, resource: str, code: str) -> float:
        labels = {"verb": verb, "resource": resource, "code": code}
        return REGISTRY.get_sample_value("mwms_api_requests_total", labels) or 0.0

    def timed(verb: str, resource: str) -> float:
        labels = {"verb": verb, "resource": resource}
        return REGISTRY.get_sample_value("mwms_api_request_duration_seconds_count", labels) or 0.0

    kube = kube_for(api)

    def seen() -> tuple[float, ...]:
        return (count("create", "pods", "201"), count("create", "pods", "409"), count("get", "pods", "200"),
                count("patch", "trainjobs/status", "200"), count("list", "events", "200"),
                timed("create", "pods"), timed("get", "pods"))  # fmt: skip

    before = seen()
    api.reply(201, POD)
    kube.create_pod("ns", POD)
    api.answer = there_already([OWNER])
    kube.create_pod("ns", POD)  # a 409, then a get of the pod that is there
    api.reply(200, {"status": {}})
    kube.patch_status("ns", "mnist", {"phase": "Running"})
    api.reply(200, {"items": []})
    kube.pod_events("ns", "p", "u")
    assert [b - a for a, b in zip(before, seen(), strict=True)] == [1, 1, 1, 1, 1, 2, 1]


def test_a_create_is_sent_for_strict_validation_with_the_token(api):
    """Strict: the API server refuses unknown fields (a typo) naming them, instead of dropping them."""
    api.reply(201, POD)
    kube_for(api).create_pod("team-a", POD)
    kube_for(api).create_service("team-a", {"kind": "Service"})
    pod, service = api.seen
    assert (pod.method, pod.path) == ("POST", "/api/v1/namespaces/team-a/pods?fieldValidation=Strict")
    assert service.path == "/api/v1/namespaces/team-a/services?fieldValidation=Strict"
    assert pod.body == POD and pod.headers["Content-Type"] == "application/json"
    assert pod.headers["Authorization"] == "Bearer t0k3n"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (422, "Pod is invalid: spec.containers[0].imagePullPolicy: Unsupported value"),
        (
            400,
            'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field '
            '"spec.containers[0].resourcez"',
        ),
        (403, 'pods "x" is forbidden: violates PodSecurity "restricted:latest": privileged'),
    ],
)
def test_a_refusal_for_good_is_rejected_with_the_servers_message(api, status, message):
    api.refuse(status, message)
    with pytest.raises(refusals.Rejected) as raised:
        kube_for(api).create_pod("ns", POD)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "message",
    [
        'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1',
        'pods "x" is forbidden: maximum cpu usage per Container is 500m, but limit is 1',
        'admission webhook "deny.example.com" denied the request: not today',
    ],
)
def test_a_refusal_for_now_is_refused_with_the_servers_message(api, message):
    api.refuse(403, message)
    with pytest.raises(refusals.Refused) as raised:
        kube_for(api).create_pod("ns", POD)
    assert str(raised.value) == message


WEBHOOK_DOWN = (
    'Internal error occurred: failed calling webhook "deny-workers.mwms.dev": failed to call webhook: Post '
    '"https://127.0.0.1:1/validate?timeout=5s": dial tcp 127.0.0.1:1: connect: connection refused'
)


@pytest.mark.parametrize(
    ("status", "message", "reason"),
    [
        (500, WEBHOOK_DOWN, "WebhookUnavailable"),
        (429, "the server has received too many requests", "ApiServerThrottled"),
        (500, "etcdserver: request timed out", "ApiServerError"),
        (503, "the server is currently unable to handle the request", "ApiServerError"),
    ],
)
def test_a_create_refused_by_a_webhook_down_throttling_or_a_server_error_is_refused_with_its_reason(
    api, status, message, reason
):
    """The job's status says each of these after the first try (with the server's message), instead of a
    retry only the operator's log sees."""
    api.refuse(status, message)
    with pytest.raises(refusals.Refused) as raised:
        kube_for(api).create_pod("ns", POD)
    assert (raised.value.reason, str(raised.value)) == (reason, message)
    with pytest.raises(refusals.Refused) as raised:
        kube_for(api).create_service("ns", {"kind": "Service", "metadata": {"name": "s"}})
    assert raised.value.reason == reason


@pytest.mark.parametrize("status", [500, 503, 429])
def test_other_errors_propagate_as_transient_for_a_retry(api, status):
    api.refuse(status, "etcdserver: request timed out")
    with pytest.raises(k8s.TRANSIENT_ERRORS) as raised:
        kube_for(api).pod_uid("ns", "p")
    assert isinstance(raised.value, refusals.ApiError) and raised.value.status == status
    assert "etcdserver: request timed out" in str(raised.value)


@pytest.mark.parametrize(
    ("owners", "named"),
    [
        ([], "owner: no owner"),
        ([{**OWNER, "uid": "u-old"}], "owner: TrainJob mnist (uid u-old)"),
        ([{"kind": "Deployment", "name": "web", "uid": "d-1", "controller": True}], "Deployment web"),
        ([{**OWNER, "controller": False}], "owner: TrainJob mnist (uid u-1)"),  # ours, but not as controller
    ],
    ids=["no owner", "an earlier job of the name", "another controller", "not as controller"],
)
def test_a_name_taken_by_an_object_not_the_jobs_is_a_name_conflict_naming_its_owner(api, owners, named):
    api.answer = there_already(owners)
    with pytest.raises(refusals.NameTaken) as raised:
        kube_for(api).create_pod("ns", POD)
    assert raised.value.reason == "NameConflict"
    message = str(raised.value)
    assert message.startswith("Pod p exists and is not this TrainJob's") and named in message
    assert [s.method for s in api.seen] == ["POST", "GET"], "read, never changed or deleted"


def test_a_name_freed_between_the_conflict_and_the_read_is_created_again(api):
    answers = iter([(409, {"message": "exists"}), (404, {"message": "not found"}), (201, CREATED)])
    api.answer = lambda seen: next(answers)
    assert kube_for(api).create_pod("ns", POD) == "pod-uid-1"
    assert [s.method for s in api.seen] == ["POST", "GET", "POST"]


def test_a_dry_run_create_asks_admission_and_stores_nothing(api):
    api.reply(201, CREATED)
    kube_for(api).create_pod("ns", POD, dry_run=True)
    assert api.seen[0].path == "/api/v1/namespaces/ns/pods?fieldValidation=Strict&dryRun=All"


def test_a_delete_names_the_uid_it_means_and_leaves_a_pod_that_took_the_name_alone(api):
    kube = kube_for(api)
    api.reply(200, {})
    kube.delete_pod("ns", "p", "pod-uid-1")
    kube.delete_trainjob("ns", "j", "u-1")
    pod, job = api.seen
    assert pod.body == {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "pod-uid-1"}}
    assert job.body["preconditions"] == {"uid": "u-1"}
    api.refuse(409, "Precondition failed: UID in precondition: pod-uid-1, UID in object meta: theirs")
    kube.delete_pod("ns", "p", "pod-uid-1")  # another's pod: no error, nothing done
    kube.delete_trainjob("ns", "j", "u-1")


def test_an_answer_that_is_not_a_status_object_keeps_its_text(api):
    api.answer = lambda seen: (502, b"upstream connect error")
    with pytest.raises(refusals.ApiError, match="upstream connect error"):
        kube_for(api).pod_uid("ns", "p")


def test_a_server_that_cannot_be_reached_is_a_transient_error():
    kube = k8s.Kube(lambda: kopf.ConnectionInfo(server="http://127.0.0.1:9"))  # discard port: nobody there
    with pytest.raises(k8s.TRANSIENT_ERRORS):
        kube.delete_pod("ns", "p", "pod-uid-1")


def test_gone_is_not_an_error(api):
    kube = kube_for(api)
    api.refuse(404, 'pods "p" not found')
    kube.delete_pod("ns", "p", "pod-uid-1")
    kube.delete_trainjob("ns", "j", "u-1")
    assert kube.patch_status("ns", "j", {"phase": "Running"}) is None
    assert kube.pod_uid("ns", "p") is None
    assert [(s.method, s.path) for s in api.seen[:2]] == [
        ("DELETE", "/api/v1/namespaces/ns/pods/p"),
        ("DELETE", "/apis/mwms.dev/v1alpha1/namespaces/ns/trainjobs/j"),
    ]
    api.reply(200, {"kind": "Pod", "metadata": {"name": "p", "uid": "u-1"}})
    assert kube.pod_uid("ns", "p") == "u-1"
    assert (api.seen[-1].method, api.seen[-1].path) == ("GET", "/api/v1/namespaces/ns/pods/p")
    api.refuse(500, "boom")
    with pytest.raises(refusals.ApiError):
        kube.pod_uid("ns", "p")
    with pytest.raises(refusals.ApiError):
        kube.delete_pod("ns", "p", "pod-uid-1")


def test_status_is_a_json_merge_patch_of_the_status_subresource(api):
    written = {"metadata": {"resourceVersion": "7"}, "status": {"phase": "Running"}}
    api.reply(200, written)
    assert kube_for(api).patch_status("ns", "mnist", {"phase": "Running", "stalledSince": None}) == written
    (patch,) = api.seen
    assert patch.method == "PATCH"
    assert patch.path == "/apis/mwms.dev/v1alpha1/namespaces/ns/trainjobs/mnist/status"
    assert patch.headers["Content-Type"] == "application/merge-patch+json"
    assert patch.body == {"status": {"phase": "Running", "stalledSince": None}}  # null removes the field


def test_a_pods_events_are_listed_by_its_name_and_uid(api):
    event = {"reason": "Unhealthy", "message": "Readiness probe failed: waiting for peers"}
    api.reply(200, {"kind": "EventList", "items": [event]})
    assert kube_for(api).pod_events("ns", "mnist-worker-1", "u-2") == [event]
    (get,) = api.seen
    assert get.method == "GET"
    assert get.path == (
        "/api/v1/namespaces/ns/events?fieldSelector=involvedObject.kind%3DPod%2C"
        "involvedObject.name%3Dmnist-worker-1%2CinvolvedObject.uid%3Du-2&resourceVersion=0"
    )  # resourceVersion 0: from the API server's cache, not a quorum read of the namespace's events


def test_an_event_names_the_trainjob_and_a_failed_post_is_only_logged(api, caplog):
    kube = kube_for(api)
    api.reply(201, {})
    kube.post_event(JOB, "Normal", "PodsCreated", "created worker pods")
    (post,) = api.seen
    assert (post.method, post.path) == ("POST", "/api/v1/namespaces/ns/events")
    assert post.body["involvedObject"] == {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "name": "mnist",
        "namespace": "ns",
        "uid": "u-1",
    }
    assert (post.body["type"], post.body["reason"], post.body["message"]) == (
        "Normal", "PodsCreated", "created worker pods"
    )  # fmt: skip
    api.refuse(403, 'events "mnist." is forbidden: exceeded quota: q, requested: count/events=1')
    with caplog.at_level("INFO", logger="mwms_operator.kube.client"):
        kube.post_event(JOB, "Warning", "Failed", "x")
    assert "event Failed on ns/mnist not posted" in caplog.text
    api.refuse(403, "unable to create new content in namespace ns because it is being terminated")
    with pytest.raises(refusals.NamespaceEnding):
        kube.post_event(JOB, "Warning", "Failed", "x")


def test_one_thread_keeps_one_connection_and_survives_its_closing(api):
    kube = kube_for(api)
    for _ in range(5):
        kube.pod_uid("ns", "p")
    assert len({s.client for s in api.seen}) == 1, "a keep-alive connection per thread"
    # The server drops an idle connection without a word (as on an idle timeout): the next call, sent on
    # the dead connection, is sent again on a new one instead of failing.
    api.drop_after_answer = True
    kube.pod_uid("ns", "p")
    api.drop_after_answer = False
    assert kube.pod_uid("ns", "p") is None
    assert len({s.client for s in api.seen}) == 2
    assert len(api.seen) == 7


def test_threads_do_not_share_a_connection(api):
    kube = kube_for(api)
    threads = [threading.Thread(target=kube.pod_uid, args=("ns", "p")) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({s.client for s in api.seen}) == 3


def test_a_401_logs_in_again_and_retries_once(api):
    """A ServiceAccount token is rotated on disk: after a 401 the credentials are read again."""
    tokens = iter(["old", "new"])
    kube = k8s.Kube(lambda: kopf.ConnectionInfo(server=api.url, token=next(tokens)))
    good = {"metadata": {"uid": "u-9"}}
    api.answer = lambda seen: (200, good) if seen.headers["Authorization"] == "Bearer new" else (401, {})
    assert kube.pod_uid("ns", "p") == "u-9"
    assert [s.headers["Authorization"] for s in api.seen] == ["Bearer old", "Bearer new"]


def test_no_credentials_is_a_login_error():
    with pytest.raises(kopf.LoginError):
        k8s.Kube(lambda: None)


@pytest.fixture(scope="module")
def certs() -> dict[str, pki.CertKey]:
    ca = pki.new_ca("test-ca")
    return {
        "ca": ca,
        "server": pki.serving_cert(ca, "apiserver", ("localhost",), ("127.0.0.1",)),
        "client": pki.client_cert(ca, "admin", ("system:masters",)),
        "other_ca": pki.new_ca("someone-else"),
    }


@pytest.fixture
def tls_api(certs, tmp_path) -> Iterator[FakeApiServer]:
    """HTTPS that asks for a client certificate, as the API server does for a kubeconfig's admin user."""
    (tmp_path / "server.crt").write_bytes(certs["server"].cert_pem)
    (tmp_path / "server.key").write_bytes(certs["server"].key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.load_verify_locations(cadata=certs["ca"].cert_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    yield from serve(FakeApiServer(), tls=context)


def test_tls_with_the_kubeconfigs_ca_and_client_certificate_data(tls_api, certs):
    info = kopf.ConnectionInfo(
        server=tls_api.url,
        ca_data=certs["ca"].cert_pem,
        certificate_data=certs["client"].cert_pem,
        private_key_data=certs["client"].key_pem,
    )
    tls_api.reply(200, {"metadata": {"uid": "u-2"}})
    assert k8s.Kube(lambda: info).pod_uid("ns", "p") == "u-2"
    assert "Authorization" not in tls_api.seen[0].headers


def test_a_server_certificate_from_another_ca_is_refused(tls_api, certs):
    info = kopf.ConnectionInfo(
        server=tls_api.url,
        ca_data=certs["other_ca"].cert_pem,
        certificate_data=certs["client"].cert_pem,
        private_key_data=certs["client"].key_pem,
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        k8s.Kube(lambda: info).pod_uid("ns", "p")
    assert tls_api.seen == []


def test_a_jobs_pods_go_in_one_deletecollection_by_both_selectors_and_none_left_is_no_error(api):
    def count() -> float:
        labels = {"verb": "deletecollection", "resource": "pods", "code": "200"}
        return REGISTRY.get_sample_value("mwms_api_requests_total", labels) or 0.0

    kube, before = kube_for(api), count()
    api.reply(200, {"kind": "PartialObjectMetadataList", "items": [{"metadata": {"name": "a"}}]})
    labels = "mwms.dev/job-uid=u-1,mwms.dev/restart in (0),mwms.dev/replica-index in (1,2)"
    kube.delete_pods("ns", labels, "status.phase!=Succeeded,status.phase!=Failed")
    (seen,) = api.seen
    path, query = seen.path.split("?")
    assert (seen.method, path, seen.body) == ("DELETE", "/api/v1/namespaces/ns/pods", None)
    assert urllib.parse.parse_qs(query) == {
        "labelSelector": [labels],
        "fieldSelector": ["status.phase!=Succeeded,status.phase!=Failed"],
    }
    # The answer lists the pods deleted: asked for as their metadata only (kube-apiserver v1.37 answers a
    # PartialObjectMetadataList, without the pods' specs and status), and not even parsed.
    assert seen.headers["Accept"] == (
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    )
    assert count() == before + 1, "counted as the API server names it"
    api.reply(200, b"{not parsed")
    kube.delete_pods("ns", labels, "")
    api.refuse(404, 'namespaces "ns" not found')
    kube.delete_pods("ns", labels, "")
    api.refuse(403, 'pods is forbidden: cannot deletecollection resource "pods"')
    with pytest.raises(refusals.ApiError) as refused:
        kube.delete_pods("ns", labels, "")
    assert refused.value.status == 403
