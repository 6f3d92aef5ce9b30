"""Tracking servers on a shared cluster: the operator reads progress only from servers its administrator
allows (a job naming any other gets one event, and that server gets no request), with the administrator's
credentials for its own secured server; the job's workers log with their own credentials from a Secret.
And the run shows in status.mlflow as soon as the chief opened it, not only at the end."""

from __future__ import annotations

import json
import secrets
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from mwms_kit.auth_proxy import AuthProxy
from mwms_kit.waits import condition, get_job, wait_condition

OPERATOR_TOKEN = f"op-{secrets.token_hex(16)}"
TRAINER_TOKEN = f"tr-{secrets.token_hex(16)}"


@pytest.fixture(scope="module")
def secured_mlflow(cluster: Any, mlflow_uri: str) -> Iterator[AuthProxy]:
    """The real MLflow server behind a proxy that requires a bearer token, on the pod bridge's gateway (pods
    and the operator both reach it); the operator's and the trainers' tokens are both accepted."""
    proxy = AuthProxy(
        mlflow_uri, {f"Bearer {OPERATOR_TOKEN}", f"Bearer {TRAINER_TOKEN}"}, host=cluster.pod_api_host
    )
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def recorder() -> Iterator[AuthProxy]:
    """A server on 127.0.0.1 (reachable from the operator, as an internal host would be) that records every
    request: a tracking URI no administrator allowed."""
    proxy = AuthProxy("http://127.0.0.1:9", ())
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def refusing(mlflow_uri: str) -> Iterator[AuthProxy]:
    """An allowed server that refuses the operator's token (401), as after a wrong chart value."""
    proxy = AuthProxy(mlflow_uri, ())
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def operator_env(secured_mlflow: AuthProxy, refusing: AuthProxy) -> dict[str, str]:
    # The secured server is the operator's own tracking server; the refusing one is the only other allowed.
    return {
        "MWMS_TRACKING_URI": secured_mlflow.uri,
        "MWMS_ALLOWED_TRACKING_URIS": refusing.uri,
        "MWMS_TRACKING_TOKEN": OPERATOR_TOKEN,
    }


def job_status(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    return kubectl.json("get", "trainjob", name, "-n", namespace).get("status") or {}


def events(kubectl: Any, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = kubectl.json("get", "events", "-n", namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def test_a_tracking_server_that_is_not_allowed_is_never_called(
    operator, make_standin, kubectl, namespace, recorder, wait_for
):
    # Runs long enough for several progress polls (every 2 s here) while Running.
    job = make_standin(
        "elsewhere",
        2,
        env={"STANDIN_SLEEP_SECONDS": "8"},
        mlflow={"trackingUri": recorder.uri + "/mlflow", "experiment": "x"},
    )
    kubectl.apply(job, "-n", namespace)
    told = wait_for(
        lambda: events(kubectl, namespace, "TrackingServerNotAllowed"),
        timeout=90,
        what="the TrackingServerNotAllowed event",
    )
    assert recorder.uri in told[0]["message"] and "operator.allowedTrackingUris" in told[0]["message"]
    wait_condition(kubectl, namespace, "elsewhere", "Succeeded", timeout=120)
    assert recorder.requests == [], "the operator called a tracking server nobody allowed"
    told = events(kubectl, namespace, "TrackingServerNotAllowed")
    # Progress is said once, not on every poll; the group's post-mortem, not kept there either, says so once.
    progress = [e for e in told if e["message"].startswith("status.progress is not read")]
    assert len(progress) == 1 and progress[0].get("count", 1) == 1, "said once, not on every poll"
    assert [e for e in told if e not in progress and "post-mortem" not in e["message"]] == [], told
    assert "progress" not in job_status(kubectl, namespace, "elsewhere")


def test_credentials_reach_a_secured_tracking_server_and_the_run_shows_while_it_runs(
    operator, make_standin, kubectl, namespace, secured_mlflow, wait_for
):
    """The operator reads progress with the administrator's token (MWMS_TRACKING_TOKEN from the chart's
    Secret); the chief logs with the job's own (MLFLOW_TRACKING_TOKEN from a Secret in its namespace). And
    status.mlflow.runId/experimentId appear while the job runs (the RUN ID column), not only at the end."""
    kubectl(
        "create", "secret", "generic", "mlflow-credentials", "-n", namespace,
        f"--from-literal=token={TRAINER_TOKEN}",
    )  # fmt: skip
    token_env = {
        "name": "MLFLOW_TRACKING_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "mlflow-credentials", "key": "token"}},
    }
    job = make_standin(
        "secured",
        2,
        env={"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "2"},
        trainer={"epochs": 6},
        mlflow={"trackingUri": secured_mlflow.uri, "experiment": f"secured-{namespace}"},
    )
    job["spec"]["template"]["spec"]["containers"][0]["env"].append(token_env)
    kubectl.apply(job, "-n", namespace)

    def running_with_run() -> dict[str, Any] | None:
        status = job_status(kubectl, namespace, "secured")
        return status if status.get("phase") == "Running" and status.get("mlflow", {}).get("runId") else None

    running = wait_for(running_with_run, timeout=120, interval=0.3, what="status.mlflow.runId while Running")
    assert running["mlflow"]["experimentId"]
    assert "modelUri" not in running["mlflow"]  # only the chief's final message has it
    assert running.get("completionTime") is None
    wait_for(
        lambda: job_status(kubectl, namespace, "secured").get("progress", {}).get("epoch"),
        timeout=60,
        what="status.progress.epoch",
    )
    wait_condition(kubectl, namespace, "secured", "Succeeded", timeout=120)
    done = job_status(kubectl, namespace, "secured")
    # The run found early is the run the chief reported at the end.
    assert done["mlflow"]["runId"] == running["mlflow"]["runId"] == done["progress"]["runId"]
    assert done["mlflow"]["experimentId"] == running["mlflow"]["experimentId"]

    by_token = {auth for _, _, auth in secured_mlflow.requests}
    operator_reads = [path for _, path, auth in secured_mlflow.requests if auth == f"Bearer {OPERATOR_TOKEN}"]
    assert any("runs/search" in path for path in operator_reads), "the operator read with its token"
    assert f"Bearer {TRAINER_TOKEN}" in by_token, "the chief logged with the job's own token"
    # Neither token is written anywhere a user or a log reader sees.
    seen = "\n".join(
        [
            operator.log(),
            kubectl("get", "trainjob", "secured", "-n", namespace, "-o", "yaml").stdout,
            kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout,
        ]
    )
    assert OPERATOR_TOKEN not in seen and TRAINER_TOKEN not in seen


def test_progress_that_cannot_be_read_says_why_once(
    operator, make_standin, kubectl, namespace, refusing, wait_for
):
    """A tracking server that answers 401 to the operator: ProgressUnavailable says TrackingUnauthorized while
    the job runs, with one event however many polls fail (every 2 s here)."""
    job = make_standin(
        "refused",
        2,
        env={"STANDIN_SLEEP_SECONDS": "10"},
        mlflow={"trackingUri": refusing.uri, "experiment": "r"},
    )
    kubectl.apply(job, "-n", namespace)
    unavailable = wait_for(
        lambda: condition(get_job(kubectl, namespace, "refused"), "ProgressUnavailable"),
        timeout=120,
        what="the ProgressUnavailable condition",
    )
    assert (unavailable.status, unavailable.reason) == ("True", "TrackingUnauthorized"), unavailable
    assert f"MLflow at {refusing.uri} answered 401" in unavailable.message, unavailable
    wait_condition(kubectl, namespace, "refused", "Succeeded", timeout=120)
    told = [
        e
        for e in events(kubectl, namespace, "TrackingUnauthorized")
        if e["involvedObject"]["name"] == "refused" and e["message"].startswith("status.progress is not read")
    ]
    polls = sum(1 for _, path, _ in refusing.requests if "get-by-name" in path)
    assert polls > 1 and len(told) == 1 and told[0].get("count", 1) == 1, (polls, told)


def test_a_run_left_running_by_a_failed_job_is_ended_by_the_operator(
    operator, make_standin, kubectl, namespace, secured_mlflow, wait_for
):
    """Worker 1's pod is deleted while the chief logs its epochs (backoffLimit 0: the job fails, and the chief
    is removed before it can end its run): the operator sets the run FAILED and says so."""
    kubectl(
        "create", "secret", "generic", "run-credentials", "-n", namespace,
        f"--from-literal=token={TRAINER_TOKEN}",
    )  # fmt: skip
    job = make_standin(
        "abandoned",
        2,
        env={"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "2"},
        trainer={"epochs": 60},
        runPolicy={"backoffLimit": 0},
        mlflow={"trackingUri": secured_mlflow.uri, "experiment": f"abandoned-{namespace}"},
    )
    job["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {
            "name": "MLFLOW_TRACKING_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "run-credentials", "key": "token"}},
        }
    )
    kubectl.apply(job, "-n", namespace)
    run_id = wait_for(
        lambda: job_status(kubectl, namespace, "abandoned").get("mlflow", {}).get("runId"),
        timeout=120,
        what="the chief's run",
    )
    kubectl("delete", "pod", "abandoned-worker-1", "-n", namespace, "--wait=false")
    wait_condition(kubectl, namespace, "abandoned", "Failed", timeout=120)
    ended = wait_for(
        lambda: condition(get_job(kubectl, namespace, "abandoned"), "MlflowRunEnded"),
        timeout=60,
        what="the MlflowRunEnded condition",
    )
    assert (ended.status, ended.reason) == ("True", "RunEndedByOperator"), ended
    assert (
        ended.message
        == f"MLflow run {run_id} was RUNNING when the job was Failed: the operator set it FAILED"
    )
    request = urllib.request.Request(
        f"{secured_mlflow.uri}/api/2.0/mlflow/runs/get?run_id={run_id}",
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert json.loads(answer.read())["run"]["info"]["status"] == "FAILED"


def test_metrics_count_outcomes_by_namespace(operator, make_standin, kubectl, namespace):
    """The metrics endpoint as Prometheus scrapes it: jobs by namespace and phase, and one count per
    finished job in mwms_trainjobs_succeeded_total / mwms_trainjobs_failed_total for this namespace."""
    ok = make_standin("counted-ok", 2)
    failing = make_standin("counted-bad", 2, env={"STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "2"})
    kubectl.apply([ok, failing], "-n", namespace)
    for name, type_ in (("counted-ok", "Succeeded"), ("counted-bad", "Failed")):
        wait_condition(kubectl, namespace, name, type_, timeout=120)
    time.sleep(3)  # a few more reconciles of the finished jobs: they must not count again
    text = operator.metrics_text()
    expected = [
        f'mwms_trainjobs_succeeded_total{{namespace="{namespace}"}} 1.0',
        f'mwms_trainjobs_failed_total{{namespace="{namespace}",reason="WorkerFailed"}} 1.0',
        f'mwms_trainjobs{{namespace="{namespace}",phase="Succeeded"}} 1.0',
        f'mwms_trainjobs{{namespace="{namespace}",phase="Failed"}} 1.0',
    ]
    assert [line for line in expected if line not in text.splitlines()] == []
