"""A namespace that is gone while the watch still holds its TrainJobs (it lags, at 1k jobs, behind the
namespace controller): a create there answers 404 naming the namespace, which means what a 403 "being
terminated" means, not a failure to retry; a 404 naming the object (a pod, the TrainJob) is still that
object being gone. The API server's answers below are copied verbatim from kube-apiserver v1.37.2 (the local
control plane's): a POST of a pod, a Service or an Event into a namespace that does not exist, and a GET,
PATCH or DELETE of an object that does not exist there."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from mwms_kit.fake_api_server import FakeApiServer, Seen, serve
from mwms_kit.trainjobs import trainjob
from mwms_operator.kube import client as k8s
from mwms_operator.kube import refusals
from mwms_operator.observe.state import JobKey
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig

GONE = "gone-ns"
NAMESPACE_NOT_FOUND = json.loads(
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \\"gone-ns\\" '
    'not found","reason":"NotFound","details":{"name":"gone-ns","kind":"namespaces"},"code":404}'
)
POD_NOT_FOUND = json.loads(
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"p\\" not found",'
    '"reason":"NotFound","details":{"name":"p","kind":"pods"},"code":404}'
)
TRAINJOB_NOT_FOUND = json.loads(
    '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"trainjobs.mwms.dev '
    '\\"mnist\\" not found","reason":"NotFound","details":{"name":"mnist","group":"mwms.dev","kind":'
    '"trainjobs"},"code":404}'
)
JOB = {"metadata": {"name": "mnist", "namespace": GONE, "uid": "u-1"}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    yield from serve(FakeApiServer())


def kube_for(api: FakeApiServer) -> k8s.Kube:
    return k8s.Kube(lambda: kopf.ConnectionInfo(server=api.url, token="t0k3n"))


def test_a_create_in_a_namespace_that_is_gone_means_the_namespace_ends(api):
    kube = kube_for(api)
    api.reply(404, NAMESPACE_NOT_FOUND)
    for create in (
        lambda: kube.create_pod(GONE, POD),
        lambda: kube.create_pod(GONE, POD, dry_run=True),
        lambda: kube.create_service(GONE, {"kind": "Service", "metadata": {"name": "s"}}),
        lambda: kube.post_event(JOB, "Normal", "PodsCreated", "created"),
    ):
        with pytest.raises(refusals.NamespaceEnding, match='namespaces "gone-ns" not found'):
            create()
    assert [s.method for s in api.seen] == ["POST"] * 4, "tried once each, nothing read or sent again"


def test_a_404_of_the_object_itself_is_still_the_object_gone_not_the_namespace(api):
    kube = kube_for(api)
    api.reply(404, POD_NOT_FOUND)
    assert kube.pod_uid(GONE, "p") is None
    kube.delete_pod(GONE, "p", "uid-p")
    kube.delete_pods(GONE, "mwms.dev/job-uid=u-1", "")
    api.reply(404, TRAINJOB_NOT_FOUND)
    assert kube.patch_status(GONE, "mnist", {"phase": "Running"}) is None
    kube.delete_trainjob(GONE, "mnist", "u-1")
    # A POST answered 404 for another reason (a resource not served, through a proxy) stays an error to retry.
    api.reply(404, b"404 page not found")
    with pytest.raises(refusals.ApiError) as error:
        kube.create_pod(GONE, POD)
    assert (error.value.status, error.value.kind) == (404, "")


def test_the_leader_lease_in_a_namespace_that_is_gone_is_an_error_to_retry_not_a_jobs_namespace_ending(api):
    api.reply(404, NAMESPACE_NOT_FOUND)
    with pytest.raises(refusals.ApiError) as error:
        kube_for(api).create_lease(GONE, {"metadata": {"name": "mwms-operator"}}, timeout=5)
    assert (error.value.status, error.value.kind) == (404, "namespaces")


def cluster_without_gone_ns() -> Any:
    """The API server once gone-ns went (a status written there just before it went): creates there answer
    404 naming the namespace; elsewhere they succeed."""

    versions = itertools.count(100)

    def answer(seen: Seen) -> tuple[int, Any]:
        if seen.method == "POST" and f"/namespaces/{GONE}/" in seen.path:
            return 404, NAMESPACE_NOT_FOUND
        if seen.method == "POST":
            return 201, {"metadata": {**seen.body["metadata"], "uid": f"uid-{next(versions)}"}}
        if seen.method == "PATCH":
            return 200, {"metadata": {"resourceVersion": str(next(versions))}, **seen.body}
        return 404, POD_NOT_FOUND

    return answer


async def drained(reconciler: Reconciler, *keys: JobKey) -> None:
    """Add the keys and wait until the work queue has handled them (and nothing it holds is due now)."""
    for key in keys:
        reconciler.queue.add(key)
    deadline = time.monotonic() + 30
    while len(reconciler.queue):
        assert time.monotonic() < deadline, "the work queue did not drain"
        await asyncio.sleep(0.01)


def job(key: JobKey) -> dict[str, Any]:
    stored = {"uid": key.uid, "generation": 1, "resourceVersion": "50"}
    stored["creationTimestamp"] = "2026-12-05T20:00:00Z"
    return trainjob(key.name, 2, namespace=key.namespace, metadata=stored)


def test_jobs_of_a_namespace_that_is_gone_are_dropped_once_not_retried_and_others_go_on(api, caplog):
    """The operator's work queue retries a failed reconcile (0.5 s, doubling): a 404 taken for a failure
    kept every job of the namespace trying (and logging) until its DELETED event came."""
    first, second = JobKey(GONE, "mnist", "uid-1"), JobKey(GONE, "other", "uid-2")
    elsewhere = JobKey("team-a", "mnist", "uid-3")
    api.answer = cluster_without_gone_ns()
    reconciler = Reconciler(kube_for(api), OperatorConfig())
    reconciler.bind({}, {})
    for key in (first, second, elsewhere):
        reconciler.state.job_event("ADDED", job(key))  # known, not yet queued

    async def main() -> list[Seen]:
        reconciler.queue.start()
        try:
            await drained(reconciler, first)
            assert reconciler.state.namespace_ending(GONE)
            assert not reconciler.queue.scheduled(first), "not tried again"
            in_gone = [s for s in api.seen if f"/namespaces/{GONE}/" in s.path]
            await drained(reconciler, first, second, elsewhere)
            await drained(reconciler, first, second)
            assert [s for s in api.seen if f"/namespaces/{GONE}/" in s.path] == in_gone, "nothing sent there"
            return in_gone
        finally:
            await reconciler.queue.stop()

    with caplog.at_level(logging.INFO, logger="mwms_operator"):
        in_gone = asyncio.run(main())
    assert [s.method for s in in_gone if s.method != "PATCH"] == ["POST"], "one create, not tried again"
    assert not any(reconciler.queue.scheduled(key) for key in (first, second))
    created = [s.path.split("?")[0] for s in api.seen if s.method == "POST" and "/team-a/" in s.path]
    assert created.count("/api/v1/namespaces/team-a/pods") == 2, "the job elsewhere is created"
    about_gone = [r for r in caplog.records if GONE in r.getMessage()]
    assert [r.getMessage() for r in about_gone] == [
        f"namespace {GONE} is being deleted or gone: its TrainJobs are left alone until they are gone"
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
