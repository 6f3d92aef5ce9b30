"""What the operator says when MLflow cannot be read or written: the reason of each failure (a real
HTTP server answering 401, 403, 5xx or garbage), the ProgressUnavailable condition with one event per change
of reason, and the MlflowRunEnded condition once the job has ended (a run left RUNNING is ended, or named)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from mwms_contract.conditions import (
    MLFLOW_RUN_ENDED,
    PROGRESS_FLOWING,
    PROGRESS_UNAVAILABLE,
    RUN_ENDED_BY_CHIEF,
    RUN_ENDED_BY_OPERATOR,
    TRACKING_REASONS,
)
from mwms_kit.decisions import META, T0, conditions, group, running_status, spec
from mwms_kit.fake_api_server import FakeApiServer, mlflow, served
from mwms_kit.fake_kube import KEY, FakeKube, Indexes, job_body
from mwms_operator.decide.policy import decide
from mwms_operator.mlflow.progress import ProgressReader, Unreadable
from mwms_operator.observe.findings import Said
from mwms_operator.settings import OperatorConfig

RUN = {"info": {"run_id": "r-1", "experiment_id": "3", "status": "RUNNING"}, "data": {}}


@pytest.fixture
def servers() -> Iterator[Callable[..., FakeApiServer]]:
    """`servers(status=200, body=None, run=None)`: a server that answers `status` with `body` to every
    request, or, without a body, as MLflow would to the three calls the operator makes (finding `run`)."""
    with ExitStack() as stack:

        def make(status: int = 200, body: bytes | None = None, run: dict | None = None) -> FakeApiServer:
            answer = mlflow(run) if body is None else lambda seen: (status, body)
            return stack.enter_context(served(FakeApiServer(answer=answer)))

        yield make


def reader_of(server: FakeApiServer) -> ProgressReader:
    return ProgressReader(OperatorConfig.from_env({"MWMS_TRACKING_URI": server.url}).tracking_access())


def updates(server: FakeApiServer) -> list[dict]:
    """The run updates the server was sent."""
    return [seen.body for seen in server.seen if seen.route.endswith("/runs/update")]


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (401, b"", "TrackingUnauthorized"),
        (403, b"", "TrackingForbidden"),
        (500, b"", "TrackingServerError"),
        (503, b"<html>down</html>", "TrackingServerError"),
        (200, b"<html>a login page</html>", "TrackingBadReply"),
        (200, b"[1, 2]", "TrackingBadReply"),
        (400, b"{}", "TrackingBadReply"),
    ],
)
def test_each_failure_of_the_tracking_server_has_its_reason(servers, status, body, reason):
    server = servers(status=status, body=body)
    found = reader_of(server).read("uid-1", server.url, "e", None)
    assert isinstance(found, Unreadable) and found.reason == reason, found
    assert found.message.startswith(f"MLflow at {server.url}"), found.message


def test_an_experiment_the_chief_has_not_created_yet_is_no_failure(servers):
    server = servers(status=404, body=b'{"error_code": "RESOURCE_DOES_NOT_EXIST"}')
    assert reader_of(server).read("uid-1", server.url, "e", None) is None


UNAUTHORIZED = Said("ProgressUnavailable", True, "TrackingUnauthorized", "answered 401", warning=True)
DOWN = Said("ProgressUnavailable", True, "TrackingUnreachable", "connection refused", warning=True)
FLOWING = Said("ProgressUnavailable", False, "ProgressFlowing", "status.progress is read")


def _decide(status, said, pods=None):
    pods = group() if pods is None else pods
    return decide(META, spec(), pods, service_exists=True, now=T0, previous=status, said=(said,))


def test_progress_unavailable_is_said_with_one_event_per_change_of_reason_and_cleared_when_it_flows():
    status = running_status()
    quiet = _decide(status, FLOWING)
    assert "ProgressUnavailable" not in conditions(quiet) and quiet.events == (), "nothing was wrong"
    first = _decide(status, UNAUTHORIZED)
    assert conditions(first)["ProgressUnavailable"] == ("True", "TrackingUnauthorized")
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "TrackingUnauthorized")]
    again = _decide(first.status, dataclasses.replace(UNAUTHORIZED, message="answered 401 again"))
    assert again.events == (), "the same reason on the next poll: no second event"
    changed = _decide(again.status, DOWN)
    assert [e.reason for e in changed.events] == ["TrackingUnreachable"]
    cleared = _decide(changed.status, FLOWING)
    assert conditions(cleared)["ProgressUnavailable"] == ("False", "ProgressFlowing")
    assert [(e.type, e.reason) for e in cleared.events] == [("Normal", "ProgressFlowing")]


def test_a_run_left_running_is_ended_as_the_job_ended(servers):
    server = servers(run=RUN)
    said = reader_of(server).end_run("uid-1", server.url, "e", "Failed", None)
    assert (said.type, said.status, said.reason) == ("MlflowRunEnded", True, "RunEndedByOperator")
    assert said.message == "MLflow run r-1 was RUNNING when the job was Failed: the operator set it FAILED"
    assert [(u["run_id"], u["status"]) for u in updates(server)] == [("r-1", "FAILED")]
    ended = servers(run={**RUN, "info": {**RUN["info"], "status": "FINISHED"}})
    said = reader_of(ended).end_run("uid-1", ended.url, "e", "Succeeded", "r-1")
    assert (said.status, said.reason) == (True, "RunEndedByChief") and updates(ended) == []


def test_a_run_the_operator_cannot_end_is_named_in_the_condition(servers):
    server = servers(status=403, body=b"")
    said = reader_of(server).end_run("uid-1", server.url, "e", "Succeeded", "r-1")
    assert (said.type, said.status, said.reason) == ("MlflowRunEnded", False, "TrackingForbidden")
    assert said.message.startswith("MLflow run r-1 may still be RUNNING though the job is Succeeded: ")
    # A run the status never named (the chief died before a read found it, and MLflow is down as the job
    # ends) is named by the tags it is found by, and looked for again.
    unknown = reader_of(server).end_run("uid-1", server.url, "e", "Succeeded", None)
    assert (unknown.status, unknown.reason) == (False, "TrackingForbidden")
    assert unknown.message.startswith(
        "the job's MLflow run (tag mwms.dev/job-uid=uid-1 in experiment 'e'), if its chief opened one, may "
        "still be RUNNING though the job is Succeeded: "
    )
    outsider = servers(run=RUN)
    not_allowed = ProgressReader(OperatorConfig.from_env({}).tracking_access())
    assert not_allowed.end_run("uid-1", outsider.url, "e", "Failed", None) is None
    assert updates(outsider) == []


def test_a_finished_job_says_whether_its_run_has_ended():
    done = dict(running_status(), phase="Failed", completionTime="2026-12-02T10:00:05Z")
    open_run = Said(
        "MlflowRunEnded", False, "TrackingUnreachable", "MLflow run r-1 may still be RUNNING", True
    )
    d = _decide(done, open_run, pods=[])
    assert d.rule == "finished" and conditions(d)["MlflowRunEnded"] == ("False", "TrackingUnreachable")
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "TrackingUnreachable")]
    ended = Said("MlflowRunEnded", True, "RunEndedByOperator", "MLflow run r-1 ... set it FAILED", True)
    d = _decide(d.status, ended, pods=[])
    assert conditions(d)["MlflowRunEnded"] == ("True", "RunEndedByOperator")
    assert [e.reason for e in d.events] == ["RunEndedByOperator"]


def _reconciler(server: FakeApiServer):
    from mwms_operator.reconciler import Reconciler

    config = OperatorConfig.from_env({"MWMS_TRACKING_URI": server.url})
    reconciler = Reconciler(FakeKube(), config)  # type: ignore[arg-type]
    indexes = Indexes()
    reconciler.bind(indexes.pods, indexes.services)
    return reconciler, KEY


def _job(uri: str, status: dict) -> dict:
    return {**job_body(mlflow={"trackingUri": uri}), "status": status}


def test_a_poll_that_fails_is_said_by_the_next_decision_and_the_same_failure_again_says_nothing(servers):
    server = servers(status=401, body=b"")
    reconciler, key = _reconciler(server)
    running = dict(running_status(), phase="Running")
    reconciler.job_event("ADDED", _job(server.url, running))
    asyncio.run(reconciler.runs.poll(key))
    assert reconciler.queue._dirty == {key}, "a new reason: the job is decided again"
    asyncio.run(reconciler.reconcile(key))
    status = reconciler.state.status(key)
    unavailable = next(c for c in status["conditions"] if c["type"] == "ProgressUnavailable")
    assert (unavailable["status"], unavailable["reason"]) == ("True", "TrackingUnauthorized")
    assert reconciler.kube.named("event").count("TrackingUnauthorized") == 1
    reconciler.queue._dirty.clear()
    asyncio.run(reconciler.runs.poll(key))
    assert reconciler.queue._dirty == set(), "the same reason: nothing new to decide"


def test_an_ended_job_whose_run_is_left_running_gets_it_ended_once(servers):
    server = servers(run=RUN)
    reconciler, key = _reconciler(server)
    done = dict(running_status(), phase="Succeeded", completionTime="2026-12-02T10:00:05Z")
    reconciler.job_event("ADDED", _job(server.url, done))
    reconciler.runs.schedule(key, spec(mlflow={"trackingUri": server.url}), done)
    asyncio.run(reconciler.runs.poll(key))
    assert [(u["run_id"], u["status"]) for u in updates(server)] == [("r-1", "FINISHED")]
    asyncio.run(reconciler.reconcile(key))
    ended = next(c for c in reconciler.state.status(key)["conditions"] if c["type"] == "MlflowRunEnded")
    assert (ended["status"], ended["reason"]) == ("True", "RunEndedByOperator")
    reconciler.runs.queue._dirty.clear()
    reconciler.runs.schedule(key, spec(mlflow={"trackingUri": server.url}), reconciler.state.status(key))
    assert reconciler.runs.queue._dirty == set(), "ended: not looked at again"


def test_each_reason_of_issue_30_is_in_the_failure_modes_doc():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "reliability.md").read_text()
    table = doc.split("# Failure modes and what you see", 1)[1]
    said = (
        *TRACKING_REASONS,
        PROGRESS_FLOWING,
        RUN_ENDED_BY_CHIEF,
        RUN_ENDED_BY_OPERATOR,
        PROGRESS_UNAVAILABLE,
    )
    assert [r for r in (*said, MLFLOW_RUN_ENDED) if f"`{r}" not in table] == []


def test_a_condition_said_before_an_operator_restart_is_cleared_when_a_read_works(servers):
    server = servers(status=404, body=b"{}")  # healthy: the chief has not created the experiment yet
    reconciler, key = _reconciler(server)
    said = _decide(running_status(), UNAUTHORIZED).status  # what the operator before the restart wrote
    reconciler.job_event("ADDED", _job(server.url, said))
    asyncio.run(reconciler.runs.poll(key))
    asyncio.run(reconciler.reconcile(key))
    cleared = next(
        c for c in reconciler.state.status(key)["conditions"] if c["type"] == "ProgressUnavailable"
    )
    assert (cleared["status"], cleared["reason"]) == ("False", "ProgressFlowing")


def test_a_run_the_status_never_named_is_found_by_its_tags_once_the_server_is_back_and_ended(servers):
    """The chief died before any read found its run, and MLflow is down as the job ends: the condition names
    the run by its tags, the look is tried again, and once the server answers the run is ended."""
    server = servers(status=503, body=b"down")
    reconciler, key = _reconciler(server)
    done = dict(running_status(), phase="Failed", completionTime="2026-12-02T10:00:05Z")
    job = spec(mlflow={"trackingUri": server.url})
    reconciler.job_event("ADDED", _job(server.url, done))
    reconciler.runs.schedule(key, job, done)
    asyncio.run(reconciler.runs.poll(key))
    assert reconciler.runs.queue.scheduled(key), "looked for again after a progress interval"
    asyncio.run(reconciler.reconcile(key))
    ended = next(c for c in reconciler.state.status(key)["conditions"] if c["type"] == "MlflowRunEnded")
    assert (ended["status"], ended["reason"]) == ("False", "TrackingServerError")
    assert ended["message"].startswith(
        "the job's MLflow run (tag mwms.dev/job-uid=uid-1 in experiment 'mnist'), if its chief opened one, "
        "may still be RUNNING though the job is Failed"
    )
    server.answer = mlflow(RUN)  # back, with the run its chief left RUNNING
    asyncio.run(reconciler.runs.poll(key))
    assert [(u["run_id"], u["status"]) for u in updates(server)] == [("r-1", "FAILED")]
    asyncio.run(reconciler.reconcile(key))
    ended = next(c for c in reconciler.state.status(key)["conditions"] if c["type"] == "MlflowRunEnded")
    assert (ended["status"], ended["reason"]) == ("True", "RunEndedByOperator")


def test_a_run_named_by_its_tags_that_turns_out_not_to_exist_is_said_so(servers):
    server = servers(run=None)
    said = reader_of(server).end_run("uid-1", server.url, "e", "Failed", None, said_before=True)
    assert (said.status, said.reason) == (True, "NoMlflowRun")
    assert reader_of(server).end_run("uid-1", server.url, "e", "Failed", None) is None, "nothing said before"


def finished_run(epoch: int, epochs: int) -> dict:
    return {
        "info": {**RUN["info"], "status": "FINISHED"},
        "data": {
            "metrics": [{"key": "loss", "value": 0.1, "step": epoch - 1, "timestamp": 5000}],
            "params": [{"key": "epochs", "value": str(epochs)}],
        },
    }


@pytest.mark.parametrize(
    ("phase", "run", "shown"),
    [
        ("Succeeded", finished_run(4, 4), {"epoch": 4, "epochs": 4, "progressPercentage": 100,
                                           "estimatedRemainingSeconds": 0}),
        ("Failed", finished_run(3, 8), {"epoch": 3, "epochs": 8, "progressPercentage": 37}),
    ],
)  # fmt: skip
def test_a_job_that_ends_gets_its_last_progress_read(servers, phase, run, shown):
    """Its last epochs were logged after the last poll (or it ran shorter than one): the look at its end
    reads them, so a Succeeded job shows N of N, done, and a Failed one where it stopped."""
    server = servers(run=run)
    reconciler, key = _reconciler(server)
    done = dict(running_status(), phase=phase, completionTime="2026-12-02T10:00:05Z")
    reconciler.job_event("ADDED", _job(server.url, done))
    reconciler.runs.schedule(key, spec(mlflow={"trackingUri": server.url}), done)
    asyncio.run(reconciler.runs.poll(key))
    (patch,) = [p for p in reconciler.kube.patches if "progress" in p]
    assert {k: v for k, v in patch["progress"].items() if k in shown} == shown
    assert set(patch["progress"]) - set(shown) == {"runId", "metrics", "updateTime"}
    assert patch["mlflow"]["runId"] == "r-1"
