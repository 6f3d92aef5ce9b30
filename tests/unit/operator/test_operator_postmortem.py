"""A group's post-mortem: decided when a group ends (success, failure, restart), its pods read from the API
server before they are deleted and their events after, off the reconcile, built by the contract's pure
builder within its size bound, and written into the job's MLflow run (an HTTP server answering as MLflow)
with every failure named in the PostmortemKept condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mwms_contract import postmortem
from mwms_kit.decisions import running_status
from mwms_kit.fake_api_server import FakeApiServer, Seen, mlflow, served
from mwms_kit.fake_kube import KEY, FakeKube, Indexes, job_body, pod_body
from mwms_operator.kube.group_remains import group_events
from mwms_operator.kube.refusals import ApiError
from mwms_operator.mlflow.keeper import keep_postmortem
from mwms_operator.reconciler import Reconciler
from mwms_operator.settings import OperatorConfig

RUN = {
    "info": {"run_id": "r-1", "experiment_id": "3", "status": "FINISHED",
             "artifact_uri": "mlflow-artifacts:/3/r-1/artifacts"},
    "data": {},
}  # fmt: skip
NODE = "node-1"


def final_pod(index: int, exit_code: int, reason: str, message: str = "") -> dict[str, Any]:
    """A worker pod as the API server holds it once its trainer exited."""
    body = pod_body(index, phase="Succeeded" if exit_code == 0 else "Failed")
    body["spec"] = {"nodeName": NODE}
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "message": message,
        "startedAt": "2026-12-02T10:00:02Z",
        "finishedAt": "2026-12-02T10:01:00Z",
    }
    body["status"]["containerStatuses"] = [
        {"name": "trainer", "restartCount": 0, "state": {"terminated": terminated}}
    ]
    return body


def event(
    kind: str, name: str, reason: str, message: str, at: str = "2026-12-02T10:00:30Z"
) -> dict[str, Any]:
    return {
        "type": "Normal",
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": kind, "name": name},
        "lastTimestamp": at,
        "count": 1,
        "source": {"component": "kubelet"},
    }


def ended_group(reconciler: Reconciler, indexes: Indexes, **spec: Any) -> FakeKube:
    """A running job of 2 workers whose chief has just exited 0; the API server holds their final pods."""
    pods = [final_pod(0, 0, "Completed"), final_pod(1, 0, "Completed")]
    reconciler.job_event("ADDED", {**job_body(2, **spec), "status": running_status()})
    for body in pods:
        indexes.pod(body)
    kube = reconciler.kube
    kube.group_pods = pods
    kube.pod_event_lists = {
        "mnist": [event("TrainJob", "mnist", "PodsCreated", "created worker pods", "2026-12-02T10:00:01Z")],
        "mnist-worker-1": [event("Pod", "mnist-worker-1", "Started", "Started container trainer")],
    }
    return kube


def built(reconciler: Reconciler, group: int = 0) -> dict[str, Any]:
    """The group's post-mortem as the post-mortem worker builds it: the rest read now."""
    document = reconciler.runs._postmortems[(KEY, group)][2]
    return asyncio.run(document()) if callable(document) else document


def test_a_group_that_ends_has_its_postmortem_read_before_its_pods_are_deleted(reconciler, indexes):
    kube = ended_group(reconciler, indexes, runPolicy={"cleanPodPolicy": "All"})
    asyncio.run(reconciler.reconcile(KEY))
    names = [name for name, _ in kube.calls]
    assert names.index("job_pods") < names.index("delete_pods"), "read while the final states exist"
    assert kube.named("job_pods") == [(KEY.uid, 0)]
    assert kube.named("pod_events") == [], "the events outlive the pods: read off the reconcile"
    ((item, (uri, _, _, tries)),) = reconciler.runs._postmortems.items()
    assert item == (KEY, 0) and uri == "http://mlflow:5000" and tries == 0
    kept = postmortem.parse(built(reconciler))
    assert set(kube.named("pod_events")) == {
        ("mnist", KEY.uid),
        ("mnist-worker-0", "pod-0-0"),
        ("mnist-worker-1", "pod-1-0"),
    }
    assert kept.trainjob["status"]["phase"] == "Succeeded" and kept.trainjob["metadata"]["uid"] == KEY.uid
    assert [(w.index, w.exit_code, w.reason, w.node, w.finished_at) for w in kept.workers] == [
        (0, 0, "Completed", NODE, "2026-12-02T10:01:00Z"),
        (1, 0, "Completed", NODE, "2026-12-02T10:01:00Z"),
    ]
    # The job's and its pods' events, oldest first, and the one this decision posts: the end itself.
    assert [(e.object, e.reason) for e in kept.events] == [
        ("trainjob/mnist", "PodsCreated"),
        ("pod/mnist-worker-1", "Started"),
        ("trainjob/mnist", "ChiefSucceeded"),
    ]
    assert kept.cut == ()


def test_a_job_with_no_tracking_server_to_call_reads_no_postmortem(reconciler, indexes):
    kube = ended_group(reconciler, indexes, mlflow={"trackingUri": "file:///mlruns"})
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.status(KEY)["phase"] == "Succeeded"
    assert kube.named("job_pods") == [] and kube.named("pod_events") == [], "nothing would keep what it read"
    assert reconciler.runs._postmortems == {}


def test_a_postmortem_that_cannot_be_read_whole_says_so_and_the_job_ends_all_the_same(reconciler, indexes):
    kube = ended_group(reconciler, indexes, runPolicy={"cleanPodPolicy": "All"})
    kube.events_error = ApiError(500, "etcdserver: request timed out")
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.status(KEY)["phase"] == "Succeeded"
    assert kube.named("delete_pods"), "the group's pods are cleaned up as ever"
    assert built(reconciler)["cut"] == [
        "the group's pods could not be read: (500) etcdserver: request timed out",
        "the events of 1 of 1 objects could not be read: (500) etcdserver: request timed out",
    ]


def test_a_restarted_group_keeps_the_postmortem_of_the_group_that_failed(reconciler, indexes):
    kube = ended_group(reconciler, indexes)
    failed = final_pod(1, 137, "OOMKilled")
    indexes.pods.clear()
    for body in (pod_body(0, phase="Running"), failed):
        indexes.pod(body)
    kube.group_pods = [failed]
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.state.status(KEY)["phase"] == "Restarting"
    kept = postmortem.parse(built(reconciler))
    assert kept.group == 0 and kept.trainjob["status"]["restarts"] == 1
    assert [(w.index, w.exit_code, w.reason) for w in kept.workers] == [(1, 137, "OOMKilled")]


def test_events_that_take_too_long_are_left_out_and_said_so():
    kube = FakeKube()
    listed = kube.pod_events

    def slow(*args: Any) -> list[dict[str, Any]]:
        time.sleep(1.0)  # a LIST the API server matches against every event of a busy namespace
        return listed(*args)

    kube.pod_events = slow  # type: ignore[method-assign]
    events, notes = asyncio.run(group_events(kube, KEY, [final_pod(0, 0, "Completed")], within=0.1))  # type: ignore[arg-type]
    assert events == [] and notes == ["the events of 2 objects could not be read within 0.1 s"]


def test_an_event_this_decision_posted_and_the_api_server_has_since_is_kept_once():
    done = event("TrainJob", "mnist", "ChiefSucceeded", "worker 0 exited 0")
    posting = [("Normal", "ChiefSucceeded", "worker 0 exited 0"), ("Normal", "PodsDeleted", "cleaned up")]
    document = postmortem.build(job_body(), 0, {"phase": "Succeeded"}, [], [done], "2026-12-02T11:00:00Z",
                                posting=posting)  # fmt: skip
    assert [(e.reason, e.source) for e in postmortem.parse(document).events] == [
        ("ChiefSucceeded", "kubelet"),
        ("PodsDeleted", "mwms-operator"),
    ]


def test_the_postmortem_stays_within_its_bound_and_says_what_was_cut():
    many = [
        event("Pod", "j-worker-0", "BackOff", "x" * 5000, f"2026-12-02T10:{i // 60:02d}:{i % 60:02d}Z")
        for i in range(400)
    ]
    document = postmortem.build(
        job_body(),
        0,
        {"phase": "Failed"},
        [final_pod(0, 1, "Error", "y" * 10_000)],
        many,
        "2026-12-02T11:00:00Z",
    )
    assert len(postmortem.encode(document)) <= postmortem.MAX_BYTES
    kept = postmortem.parse(document)
    assert kept.cut[0] == "200 older events (at most 200 are kept)"
    assert "older events, to stay within 262144 bytes" in kept.cut[1]
    assert kept.events[-1].last_seen == "2026-12-02T10:06:39Z", "the newest are kept"
    assert len(kept.workers[0].message) == postmortem.MAX_TEXT


@pytest.fixture
def tracking() -> Iterator[FakeApiServer]:
    with served(FakeApiServer(answer=mlflow(RUN))) as fake:
        yield fake


def access_to(server: FakeApiServer):
    return OperatorConfig.from_env({"MWMS_TRACKING_URI": server.url}).tracking_access()


def document(group: int = 0) -> dict[str, Any]:
    return postmortem.build(job_body(), group, {"phase": "Failed"}, [], [], "2026-12-02T11:00:00Z")


def test_the_postmortem_is_written_into_the_jobs_run_through_the_artifact_proxy(tracking):
    said = keep_postmortem(access_to(tracking), "uid-1", tracking.url, "e", document(2))
    assert (said.type, said.status, said.reason) == ("PostmortemKept", True, "PostmortemWritten")
    assert said.message == "the post-mortem of group 2 (postmortem/group-2.json) is kept in MLflow run r-1"
    (put,) = [seen for seen in tracking.seen if seen.method == "PUT"]
    assert put.route == "/api/2.0/mlflow-artifacts/artifacts/3/r-1/artifacts/postmortem/group-2.json"
    assert postmortem.parse(put.body).group == 2  # the fake parses the JSON it is sent


@pytest.mark.parametrize(
    ("run", "answer", "reason", "said"),
    [
        (None, None, "NoMlflowRun", "the job has no MLflow run in experiment 'e' (its chief never opened"),
        ({**RUN, "info": {**RUN["info"], "artifact_uri": "s3://bucket/3/r-1"}}, None, "ArtifactsNotProxied",
         "the run keeps its artifacts at s3://bucket/3/r-1, which the tracking server does not proxy"),
        (RUN, (503, b"down"), "TrackingServerError", "answered 503"),
    ],
)  # fmt: skip
def test_a_postmortem_that_cannot_be_kept_is_named(run, answer, reason, said):
    def answers(seen: Seen) -> tuple[int, Any]:
        return answer if answer is not None and seen.method == "PUT" else mlflow(run)(seen)

    with served(FakeApiServer(answer=answers)) as fake:
        found = keep_postmortem(access_to(fake), "uid-1", fake.url, "e", document())
    assert (found.status, found.reason, found.warning) == (False, reason, True)
    assert found.message.startswith("the post-mortem of group 0 (postmortem/group-0.json) is not kept: ")
    assert said in found.message


def test_a_server_the_administrator_does_not_allow_gets_no_postmortem_and_no_request(tracking):
    others = OperatorConfig.from_env({}).tracking_access()
    said = keep_postmortem(others, "uid-1", tracking.url, "e", document())
    assert (said.status, said.reason) == (False, "TrackingServerNotAllowed") and tracking.seen == []


def test_a_failed_write_is_tried_again_and_the_next_decision_says_why_with_one_event(indexes):
    with served(FakeApiServer(answer=lambda seen: (503, b"down"))) as fake:
        reconciler = Reconciler(FakeKube(), OperatorConfig.from_env({"MWMS_TRACKING_URI": fake.url}))  # type: ignore[arg-type]
        reconciler.bind(indexes.pods, indexes.services)
        kube = ended_group(reconciler, indexes, mlflow={"trackingUri": fake.url})
        asyncio.run(reconciler.reconcile(KEY))
        reconciler.queue._dirty.clear()
        asyncio.run(reconciler.runs._keep((KEY, 0)))
        assert reconciler.runs.postmortems.scheduled((KEY, 0)), "tried again after a progress interval"
        assert reconciler.queue._dirty == {KEY}, "a new condition: the job is decided again"
        asyncio.run(reconciler.reconcile(KEY))
        kept = next(c for c in reconciler.state.status(KEY)["conditions"] if c["type"] == "PostmortemKept")
        assert (kept["status"], kept["reason"]) == ("False", "TrackingServerError")
        assert kube.named("event").count("TrackingServerError") == 1
        fake.answer = mlflow(RUN)
        asyncio.run(reconciler.runs._keep((KEY, 0)))
        assert (KEY, 0) not in reconciler.runs._postmortems, "kept: not tried again"
        asyncio.run(reconciler.reconcile(KEY))
        kept = next(c for c in reconciler.state.status(KEY)["conditions"] if c["type"] == "PostmortemKept")
        assert (kept["status"], kept["reason"]) == ("True", "PostmortemWritten")


def test_a_job_deleted_before_its_postmortem_is_written_still_gets_it_written(tracking, indexes):
    reconciler = Reconciler(FakeKube(), OperatorConfig.from_env({"MWMS_TRACKING_URI": tracking.url}))  # type: ignore[arg-type]
    reconciler.bind(indexes.pods, indexes.services)
    ended_group(reconciler, indexes, mlflow={"trackingUri": tracking.url})
    asyncio.run(reconciler.reconcile(KEY))
    reconciler.job_event("DELETED", reconciler.state.jobs[KEY])
    asyncio.run(reconciler.runs._keep((KEY, 0)))
    assert [seen.route for seen in tracking.seen if seen.method == "PUT"] == [
        "/api/2.0/mlflow-artifacts/artifacts/3/r-1/artifacts/postmortem/group-0.json"
    ]


@pytest.mark.parametrize(("exit_code", "phase"), [(0, "Succeeded"), (1, "Failed")])
def test_a_worker_whose_trainer_ended_before_its_pods_phase_was_written_ends_as_its_trainer_did(
    exit_code, phase
):
    terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}
    pod = {
        "metadata": {"name": "j-worker-1", "labels": {}},
        "status": {
            "phase": "Running",  # the kubelet has not written the pod's phase yet
            "containerStatuses": [{"name": "trainer", "state": {"terminated": terminated}}],
        },
    }
    end = postmortem.worker_end(pod)
    assert (end.phase, end.state, end.exit_code) == (phase, "Terminated", exit_code)
    still_running = {
        **pod,
        "status": {**pod["status"], "containerStatuses": [{"name": "trainer", "state": {"running": {}}}]},
    }
    assert postmortem.worker_end(still_running).phase == "Running"
