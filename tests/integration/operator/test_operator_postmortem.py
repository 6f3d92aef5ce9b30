"""The run tells the story, with a real `mlflow server`, the real API server and stand-in workers: a job that
ends faster than one progress interval still shows its last epoch, N of N; each group's post-mortem is kept
in the run, and `mwms describe`, `events` and `describe --run` read it once the pods, their events and the
TrainJob itself are gone, the last through the API server's service proxy to a Service in front of MLflow;
a run its chief left RUNNING, whose ID the status never learnt, with MLflow down as the job ended, is named
by its tags and ended once MLflow is back. Progress is read only at the end here: the interval is longer
than any job of this module."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mwms_contract import postmortem
from mwms_kit.auth_proxy import AuthProxy
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.submit import run_mwms
from mwms_kit.waits import condition, get_job, postmortem_kept, wait_condition

PROGRESS_INTERVAL = "600"  # no read while a job of this module runs: only the one at its end
TAG = "mwms.dev/job-uid"


@pytest.fixture(scope="module")
def mlflow_uri(cluster: Any, mlflow_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tier's MLflow, accepting as the chart's does the Host the API server's service proxy passes on
    (its own address as the client names it: 127.0.0.1:PORT)."""
    server = MlflowServer(
        tmp_path_factory.mktemp("mlflow"),
        host=cluster.pod_api_host,
        port=mlflow_port,
        allowed_hosts=[cluster.pod_api_host, "127.0.0.1:*"],
    )
    with server:
        yield server.url


@pytest.fixture(scope="module")
def flaky_mlflow(cluster: Any, mlflow_uri: str) -> Iterator[AuthProxy]:
    """The real MLflow behind a proxy that can be taken down (503), where pods and the operator reach it."""
    proxy = AuthProxy(mlflow_uri, [None], host=cluster.pod_api_host)
    yield proxy
    proxy.close()


@pytest.fixture(scope="module")
def operator_env(cluster: Any, mlflow_uri: str, flaky_mlflow: AuthProxy) -> dict[str, str]:
    return {
        "MWMS_TRACKING_URI": mlflow_uri,
        "MWMS_ALLOWED_TRACKING_URIS": flaky_mlflow.uri,
        "MWMS_PROGRESS_INTERVAL_SECONDS": PROGRESS_INTERVAL,
    }


@pytest.fixture
def mwms(cluster: Any, namespace: str) -> Callable[..., Any]:
    return lambda *args: run_mwms(cluster.kubeconfig, namespace, *args, timeout=120)


def mlflow_call(base: str, path: str, body: dict[str, Any] | None = None, **query: str) -> dict[str, Any]:
    """MLflow's REST API: a GET with `query`, or a POST of `body`."""
    url = f"{base}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"{}")


def run_of(base: str, experiment: str, uid: str) -> dict[str, Any] | None:
    """The job's run, found as the operator finds it (its uid tag); None before there is one."""
    try:
        found = mlflow_call(base, "experiments/get-by-name", experiment_name=experiment)
    except OSError:
        return None
    search = {"experiment_ids": [found["experiment"]["experiment_id"]], "filter": f"tags.`{TAG}` = '{uid}'"}
    runs = mlflow_call(base, "runs/search", search).get("runs") or []
    return runs[0] if runs else None


def kept(base: str, run_id: str, group: int) -> postmortem.Postmortem:
    query = urllib.parse.urlencode({"run_uuid": run_id, "path": postmortem.artifact_path(group)})
    with urllib.request.urlopen(f"{base}/get-artifact?{query}", timeout=30) as answer:
        return postmortem.parse(json.loads(answer.read()))


def status_of(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    return get_job(kubectl, namespace, name).get("status") or {}


def test_a_short_job_ends_at_n_of_n_and_its_groups_postmortems_outlive_pods_events_and_the_job(
    operator, make_standin, kubectl, namespace, mlflow_uri, mwms, wait_for, trainer_image
):
    """The first group opens the run and loses worker 1 (its pod deleted); the second group fits 4 epochs
    and succeeds."""
    experiment = f"story-{namespace}"
    job = make_standin(
        "story",
        2,
        env={
            "STANDIN_MLFLOW": "first",
            "STANDIN_EPOCH_SECONDS": "0.2",
            "STANDIN_SLEEP_SECONDS": "600",
            "STANDIN_SLEEP_IN_RESTART": "0",  # group 0 waits to be broken; group 1 finishes
        },
        trainer={"epochs": 4},
        runPolicy={"backoffLimit": 2},
        mlflow={"experiment": experiment},
    )
    kubectl.apply(job, "-n", namespace)
    uid = get_job(kubectl, namespace, "story")["metadata"]["uid"]
    wait_for(lambda: run_of(mlflow_uri, experiment, uid), timeout=180, what="the chief's run")
    kubectl("delete", "pod", "story-worker-1", "-n", namespace, "--wait=false")  # a lost worker
    wait_condition(kubectl, namespace, "story", "Succeeded", timeout=240)

    def ended() -> dict[str, Any] | None:
        status = status_of(kubectl, namespace, "story")
        return status if (status.get("progress") or {}).get("progressPercentage") == 100 else None

    # The last read, at the end: 4 of 4, done, though no read came while it ran.
    done = wait_for(ended, timeout=60, what="the last progress read")
    progress = done["progress"]
    assert (progress["epoch"], progress["epochs"], progress["estimatedRemainingSeconds"]) == (4, 4, 0)
    assert done["mlflow"]["trackingUri"] == mlflow_uri
    run_id = done["mlflow"]["runId"]
    shown = mwms("get", "story")
    assert shown.returncode == 0 and shown.stdout.splitlines()[1].split()[-3:] == ["4/4", "100%", "0s"]

    wait_for(
        lambda: postmortem_kept(get_job(kubectl, namespace, "story"), 1),
        timeout=60,
        what="PostmortemKept of the last group",
    )
    restarted, succeeded = kept(mlflow_uri, run_id, 0), kept(mlflow_uri, run_id, 1)
    assert restarted.trainjob["status"]["phase"] == "Restarting"
    why = next(c for c in restarted.trainjob["status"]["conditions"] if c["type"] == "Restarting")["message"]
    assert why.startswith("worker story-worker-1 ") and [w.index for w in restarted.workers] == [0, 1]
    assert succeeded.trainjob["status"]["phase"] == "Succeeded"
    assert {w.index: w.exit_code for w in succeeded.workers}[0] == 0
    assert all(w.node for w in succeeded.workers), "each worker's node"
    assert ("trainjob/story", "ChiefSucceeded") in {(e.object, e.reason) for e in succeeded.events}

    # The pods and every event go: describe and events read what the run kept.
    kubectl("delete", "pods", "-n", namespace, "-l", "mwms.dev/job-name=story", "--wait=true")
    kubectl("delete", "events", "--all", "-n", namespace)
    described = mwms("describe", "story")
    assert described.returncode == 0, described.stderr
    assert "Kept: the workers marked * and the events from the post-mortem of group 1" in described.stdout
    assert "0*" in described.stdout.split("Workers:")[1] and "ChiefSucceeded" in described.stdout
    events = mwms("events", "story", "-o", "json")
    assert events.returncode == 0, events.stderr
    assert ("pod/story-worker-1", "Started") in {
        (e["object"], e["reason"]) for e in json.loads(events.stdout)
    }

    # The TrainJob goes too: its run, through the API server's service proxy to a Service of the cluster
    # in front of MLflow (this machine resolves no *.svc name).
    kubectl("delete", "trainjob", "story", "-n", namespace, "--wait=true")
    service = mlflow_service(kubectl, namespace, trainer_image, mlflow_uri)
    alone = mwms("describe", "--run", run_id, "--tracking-uri", service, "-o", "json")
    assert alone.returncode == 0, alone.stderr
    found = json.loads(alone.stdout)
    assert found["trainjob"]["metadata"]["name"] == "story" and found["trainjob"]["status"]["restarts"] == 1
    assert [(w["index"], w["exit_code"]) for w in found["workers"]] == [(0, 0), (1, 0)]
    assert "(through the API server's service proxy)" in found["kept"]
    reasons = {(e["object"], e["reason"]) for e in found["events"]}
    assert {("trainjob/story", "GroupRestarting"), ("trainjob/story", "ChiefSucceeded")} <= reasons


# A pod that passes TCP on to the test's MLflow on this machine: the API server's service proxy goes only to
# a Service's pods, never to an address outside the cluster.
FORWARDER = """
import socket, sys, threading

def pipe(source, target):
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        target.close()

server = socket.create_server(("", 5000))
while True:
    client, _ = server.accept()
    upstream = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    for source, target in ((client, upstream), (upstream, client)):
        threading.Thread(target=pipe, args=(source, target), daemon=True).start()
"""


def mlflow_service(kubectl: Any, namespace: str, image: str, mlflow_uri: str) -> str:
    """A Service of the cluster in front of the test's MLflow (a forwarding pod): its URI, once ready."""
    address = urllib.parse.urlsplit(mlflow_uri)
    labels = {"app": "mlflow-forward"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "mlflow-forward", "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "forward",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", FORWARDER, address.hostname, str(address.port)],
                    "ports": [{"containerPort": 5000, "name": "http"}],
                    "readinessProbe": {"tcpSocket": {"port": 5000}, "periodSeconds": 1},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mlflow-ext"},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": 5000, "targetPort": "http"}]},
    }
    kubectl.apply([pod, service], "-n", namespace)
    kubectl(
        "wait", "--for=condition=Ready", "pod/mlflow-forward", "-n", namespace, "--timeout=120s", timeout=130
    )
    return f"http://mlflow-ext.{namespace}.svc:5000"


def test_a_run_left_running_that_the_status_never_named_is_found_by_its_tags_and_ended(
    operator, make_standin, kubectl, namespace, mlflow_uri, flaky_mlflow, wait_for
):
    """The chief opened the job's run (here: the test, as a chief would: RUNNING, tagged with the job's uid)
    and its group dies before any read found it, while MLflow is down: the condition names the run by its
    tags; once MLflow is back and the operator looks again (here after the operator restarts) it is found
    and ended."""
    experiment = f"orphan-{namespace}"
    job = make_standin(
        "orphan",
        2,
        env={"STANDIN_SLEEP_SECONDS": "600"},
        runPolicy={"backoffLimit": 0},
        mlflow={"trackingUri": flaky_mlflow.uri, "experiment": experiment},
    )
    kubectl.apply(job, "-n", namespace)
    uid = get_job(kubectl, namespace, "orphan")["metadata"]["uid"]
    experiment_id = mlflow_call(mlflow_uri, "experiments/create", {"name": experiment})["experiment_id"]
    opened = {"experiment_id": experiment_id, "run_name": "orphan", "tags": [{"key": TAG, "value": uid}]}
    run_id = mlflow_call(mlflow_uri, "runs/create", opened)["run"]["info"]["run_id"]
    wait_for(
        lambda: status_of(kubectl, namespace, "orphan").get("phase") == "Running", timeout=180, what="Running"
    )
    assert "runId" not in (status_of(kubectl, namespace, "orphan").get("mlflow") or {}), "never read"

    flaky_mlflow.down = True
    kubectl("delete", "pod", "orphan-worker-1", "-n", namespace, "--wait=false")
    wait_condition(kubectl, namespace, "orphan", "Failed", timeout=120)
    named = wait_for(
        lambda: condition(get_job(kubectl, namespace, "orphan"), "MlflowRunEnded"),
        timeout=60,
        what="MlflowRunEnded",
    )
    assert (named.status, named.reason) == ("False", "TrackingServerError"), named
    assert named.message.startswith(
        f"the job's MLflow run (tag {TAG}={uid} in experiment '{experiment}'), if its chief opened one, may "
        "still be RUNNING though the job is Failed"
    )
    assert run_of(mlflow_uri, experiment, uid)["info"]["status"] == "RUNNING"

    flaky_mlflow.down = False
    operator.stop()
    operator.start()  # a run not yet ended is looked for again at the start

    def ended() -> Any:
        found = condition(get_job(kubectl, namespace, "orphan"), "MlflowRunEnded")
        return found if found is not None and found.true else None

    done = wait_for(ended, timeout=120, what="the run ended")
    assert done.reason == "RunEndedByOperator"
    assert (
        done.message == f"MLflow run {run_id} was RUNNING when the job was Failed: the operator set it FAILED"
    )
    assert run_of(mlflow_uri, experiment, uid)["info"]["status"] == "FAILED"
