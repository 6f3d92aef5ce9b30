"""The job's run from wherever kubectl works: the client reads it on the tracking server the job's status
names, through the API server's service proxy (with the user's own kubeconfig credentials) when that server
is a Service this machine does not reach, and says what to set otherwise. With the pods, their events or the
TrainJob gone, `describe`, `events` and `describe --run` read the post-mortems the run keeps; `ui` serves the
run's page. The API server here is a scripted HTTP server, answering as MLflow behind its service proxy."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms import cli
from mwms.sdk import Client
from mwms_contract import postmortem
from mwms_kit.fake_api_server import FakeApiServer, Seen, kubeconfig_for, serve

NS = "team-a"
SERVICE_URI = "http://mlflow.mwms-system.svc:5000"  # the chart's bundled MLflow: no DNS here
PROXY = "/api/v1/namespaces/mwms-system/services/mlflow:5000/proxy"
JOB = f"/apis/mwms.dev/v1alpha1/namespaces/{NS}/trainjobs"
MISSING = {"kind": "Status", "status": "Failure", "message": "not found", "reason": "NotFound", "code": 404}
BOUND = 60  # seconds: what must end long before fails the test instead of hanging it


def trainjob(uri: str = SERVICE_URI) -> dict[str, Any]:
    """A finished 2-worker job whose status names its run and the tracking server that holds it."""
    status = {
        "phase": "Succeeded",
        "restarts": 0,
        "mlflow": {"runId": "r1", "experimentId": "4", "trackingUri": uri},
    }
    metadata = {"name": "j", "namespace": NS, "uid": "job-uid"}
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {"replicas": 2},
        "status": status,
    }


def final_pod(index: int, code: int, reason: str) -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": reason, "startedAt": "2026-01-01T12:00:00Z",
                  "finishedAt": "2026-01-01T12:05:00Z"}  # fmt: skip
    return {
        "metadata": {"name": f"j-worker-{index}", "uid": f"p{index}",
                     "labels": {"mwms.dev/replica-index": str(index), "mwms.dev/restart": "0"}},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "trainer", "restartCount": 0,
                                                                "state": {"terminated": terminated}}]},
    }  # fmt: skip


def kept_document() -> dict[str, Any]:
    events = [
        {"type": "Normal", "reason": "PodsCreated", "message": "created worker pods j-worker-0, j-worker-1",
         "involvedObject": {"kind": "TrainJob", "name": "j"}, "lastTimestamp": "2026-01-01T11:59:00Z"},
        {"type": "Normal", "reason": "Started", "message": "Started container trainer",
         "involvedObject": {"kind": "Pod", "name": "j-worker-1"}, "lastTimestamp": "2026-01-01T12:00:00Z"},
    ]  # fmt: skip
    pods = [final_pod(0, 0, "Completed"), final_pod(1, 0, "Completed")]
    return postmortem.build(
        trainjob(), 0, trainjob()["status"], pods, events, "2026-01-01T12:05:01Z",
        posting=[("Normal", "ChiefSucceeded", "worker 0 (j-worker-0) exited 0; MLflow run r1")],
    )  # fmt: skip


class Cluster:
    """The API server (the job: None once deleted; no pods, no events left) and, behind its service proxy,
    the bundled MLflow: run r1 with worker 1's log and group 0's post-mortem."""

    def __init__(self) -> None:
        self.job: dict[str, Any] | None = trainjob()
        self.proxy_refused: int | None = None  # the API server refuses the service proxy (403: RBAC)
        self.host_refused = False  # MLflow refuses the Host the proxy passes on
        self.artifacts = {
            "logs/group-0/worker-1.log": b"worker 1 line 1\nworker 1 line 2\n",
            "postmortem/group-0.json": json.dumps(kept_document()).encode(),
        }
        self.system_metrics = {  # what each worker logged under its node id
            "system/worker-0/cpu_usage_cores": [0.5, 1.75, 1.2],
            "system/worker-0/system_memory_peak_megabytes": [400.0, 912.4, 912.4],
            "system/worker-1/cpu_usage_cores": [0.9, 0.25],
            "system/worker-1/system_memory_peak_megabytes": [800.0, 850.6],
        }

    def __call__(self, seen: Seen) -> tuple[Any, ...]:
        url = urllib.parse.urlparse(seen.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path.startswith(PROXY):
            return self.mlflow(url.path.removeprefix(PROXY), query)
        if url.path == JOB:
            return 200, {"kind": "TrainJobList", "items": [self.job] if self.job else []}
        if url.path.startswith(JOB):
            return (200, self.job) if self.job else (404, MISSING)
        if url.path == "/api/v1/services":
            service = {
                "metadata": {"name": "mlflow", "namespace": "mwms-system"},
                "spec": {"ports": [{"port": 5000}]},
            }
            return 200, {"kind": "ServiceList", "items": [service]}
        if url.path.endswith(("/pods", "/events")):
            return 200, {"kind": "List", "items": []}
        return 404, MISSING

    def mlflow(self, path: str, query: dict[str, str]) -> tuple[Any, ...]:
        if self.proxy_refused:
            message = 'services "mlflow:5000" is forbidden: User "dev" cannot get resource "services/proxy"'
            return self.proxy_refused, {**MISSING, "message": message, "code": self.proxy_refused}
        if self.host_refused:
            return (
                403,
                b"Invalid Host header - possible DNS rebinding attack detected",
                {"Content-Type": "text/plain"},
            )
        if path == "/get-artifact":
            found = self.artifacts.get(query.get("path", "")) if query.get("run_uuid") == "r1" else None
            return (
                (200, found, {"Content-Type": "text/plain"}) if found else (404, {"error_code": "NOT_FOUND"})
            )
        if path == "/api/2.0/mlflow/artifacts/list" and query.get("path") == "postmortem":
            return 200, {"files": [{"path": "postmortem/group-0.json", "is_dir": False}]}
        if path == "/api/2.0/mlflow/metrics/get-history" and query.get("run_id") == "r1":
            values = self.system_metrics.get(query.get("metric_key", ""), [])
            return 200, {
                "metrics": [{"key": query["metric_key"], "value": v, "step": i} for i, v in enumerate(values)]
            }
        if path == "/api/2.0/mlflow/runs/get" and query.get("run_id") == "r1":
            return 200, {"run": {"info": {"run_id": "r1", "experiment_id": "4"}, "data": {}}}
        if path in ("", "/"):
            return 200, b"<html>MLflow</html>", {"Content-Type": "text/html"}
        return 404, {"error_code": "RESOURCE_DOES_NOT_EXIST"}


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> Iterator[tuple[FakeApiServer, Cluster, Path]]:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for fake in serve(FakeApiServer()):
        fake.answer = answers = Cluster()
        yield fake, answers, kubeconfig_for(fake, tmp_path / "kubeconfig", NS)


def mwms(kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    out, err, outcome = io.StringIO(), io.StringIO(), []
    thread = threading.Thread(
        target=lambda: outcome.append(cli.main([*argv, "--kubeconfig", str(kubeconfig)], out, err)),
        daemon=True,
    )
    thread.start()
    thread.join(BOUND)
    assert outcome, f"mwms {' '.join(argv)} still runs: it hangs"
    return outcome[0], out.getvalue(), err.getvalue()


def authorization(seen: Seen) -> str | None:
    return {k.lower(): v for k, v in seen.headers.items()}.get("authorization")


def proxied(fake: FakeApiServer) -> list[Seen]:
    return [seen for seen in fake.seen if seen.route.startswith(PROXY)]


def test_a_finished_workers_log_is_read_through_the_service_proxy_with_the_users_own_rights(cluster):
    fake, _, kubeconfig = cluster
    assert mwms(kubeconfig, "logs", "j", "--worker", "1") == (0, "worker 1 line 1\nworker 1 line 2\n", "")
    (read,) = proxied(fake)
    assert read.route == f"{PROXY}/get-artifact"
    assert authorization(read) == "Bearer t0k3n", "the user's kubeconfig credentials"


def test_a_refused_service_proxy_names_the_right_it_needs(cluster):
    _, answers, kubeconfig = cluster
    answers.proxy_refused = 403
    code, out, err = mwms(kubeconfig, "logs", "j", "--worker", "1")
    assert (code, out) == (1, "")
    assert 'cannot get resource "services/proxy"' in err
    assert "this needs the RBAC right to get services/proxy in namespace mwms-system" in err


def test_an_mlflow_that_refuses_the_proxys_host_says_which_value_admits_it(cluster):
    _, answers, kubeconfig = cluster
    answers.host_refused = True
    code, _, err = mwms(kubeconfig, "logs", "j", "--worker", "1")
    assert code == 1 and "mlflow.extraAllowedHosts" in err and "Invalid Host header" in err


def test_a_server_that_is_no_service_and_does_not_answer_says_what_to_set(cluster):
    _, answers, kubeconfig = cluster
    answers.job = trainjob("http://127.0.0.1:9")
    code, _, err = mwms(kubeconfig, "logs", "j", "--worker", "1")
    assert code == 1 and "set MLFLOW_TRACKING_URI (or pass --tracking-uri)" in err


def test_describe_of_a_job_whose_pods_and_events_are_gone_shows_what_its_run_kept(cluster):
    _, _, kubeconfig = cluster
    code, out, err = mwms(kubeconfig, "describe", "j")
    assert code == 0, err
    workers = out.split("Workers:")[1].split("Kept:")[0].splitlines()
    assert [row.split()[:7] for row in workers[2:]] == [
        ["0*", "j-worker-0", "0", "Succeeded", "Terminated", "Completed", "0"],
        ["1*", "j-worker-1", "0", "Succeeded", "Terminated", "Completed", "0"],
    ]
    assert "Kept: the workers marked * and the events from the post-mortem of group 0" in out
    assert (
        "kept in MLflow run r1, MLflow at http://mlflow.mwms-system.svc:5000 (through the API server's" in out
    )
    assert "ChiefSucceeded" in out.split("Events:")[1]
    code, out, _ = mwms(kubeconfig, "events", "j", "-o", "json")
    assert code == 0
    assert [(e["object"], e["reason"]) for e in json.loads(out)] == [
        ("trainjob/j", "PodsCreated"),
        ("pod/j-worker-1", "Started"),
        ("trainjob/j", "ChiefSucceeded"),
    ]


def test_describe_shows_each_workers_peaks_from_its_system_metrics_in_the_run(cluster):
    _, answers, kubeconfig = cluster
    code, out, err = mwms(kubeconfig, "describe", "j")
    assert code == 0, err
    peaks = out.split("Peaks (each worker's system metrics in the run):")[1].split("Events:")[0]
    assert [row.split() for row in peaks.strip().splitlines()[1:]] == [
        ["0", "1.75", "912"],
        ["1", "0.90", "851"],
    ]
    code, out, _ = mwms(kubeconfig, "describe", "j", "-o", "json")
    assert json.loads(out)["peaks"]["1"] == {"cpu_usage_cores": 0.9, "system_memory_peak_megabytes": 850.6}
    answers.system_metrics = {  # worker 1's writes failed: named, not left out silently
        key: values for key, values in answers.system_metrics.items() if "/worker-1/" not in key
    }
    code, out, _ = mwms(kubeconfig, "describe", "j")
    assert "none from worker 1: its log says why (mwms logs --worker N)" in out
    answers.system_metrics = {}  # sampling turned off: no section
    code, out, _ = mwms(kubeconfig, "describe", "j")
    assert code == 0 and "Peaks" not in out


def test_describe_run_finds_a_deleted_jobs_run_on_the_bundled_mlflow(cluster):
    _, answers, kubeconfig = cluster
    answers.job = None
    code, out, err = mwms(kubeconfig, "describe", "--run", "r1", "-o", "json")
    assert code == 0, err
    described = json.loads(out)
    assert described["trainjob"]["metadata"]["name"] == "j"
    assert described["trainjob"]["status"]["phase"] == "Succeeded"
    assert [(w["index"], w["exit_code"], w["node"], w["finished_at"]) for w in described["workers"]] == [
        (0, 0, "node-1", "2026-01-01T12:05:00Z"),
        (1, 0, "node-1", "2026-01-01T12:05:00Z"),
    ]
    assert [e["reason"] for e in described["events"]] == ["PodsCreated", "Started", "ChiefSucceeded"]
    assert described["kept"].startswith("all of it from the post-mortem of group 0")
    text = Client(kubeconfig=kubeconfig).describe_run("r1")  # the SDK: the same
    assert [w.exit_code for w in text.workers] == [0, 0]


def test_describe_run_that_no_known_server_has_says_what_to_set(cluster):
    _, answers, kubeconfig = cluster
    answers.job = None
    code, _, err = mwms(kubeconfig, "describe", "--run", "r9")
    assert code == 1 and "MLflow run r9 was not found" in err and "set MLFLOW_TRACKING_URI" in err
    assert mwms(kubeconfig, "describe")[0] == 1, "a name or --run"


def test_runs_shows_where_each_run_is(cluster):
    _, _, kubeconfig = cluster
    code, out, _ = mwms(kubeconfig, "runs")
    assert code == 0 and out.splitlines()[0].split()[-2:] == ["TRACKING", "URI"]
    assert out.splitlines()[1].split()[-1] == SERVICE_URI


def test_ui_serves_the_runs_page_through_the_service_proxy_on_a_loopback_port_until_closed(cluster):
    fake, _, kubeconfig = cluster
    with Client(kubeconfig=kubeconfig).ui("j") as page:
        assert page.server is not None and page.url.startswith("http://127.0.0.1:")
        assert page.url.endswith("/#/experiments/4/runs/r1")
        root = page.url.split("#")[0]
        with urllib.request.urlopen(root, timeout=BOUND) as answer:
            assert answer.read() == b"<html>MLflow</html>"
        # A page the API server's proxy rewrote asks for the proxy's own path: the same place.
        with urllib.request.urlopen(root.rstrip("/") + PROXY + "/", timeout=BOUND) as answer:
            assert answer.read() == b"<html>MLflow</html>"
        assert {authorization(seen) for seen in proxied(fake)} == {"Bearer t0k3n"}
        # Only a loopback name reaches it: a page must not under another host name (DNS rebinding).
        foreign = urllib.request.Request(root, headers={"Host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(foreign, timeout=BOUND)
        assert refused.value.code == 403
    with pytest.raises(OSError):
        urllib.request.urlopen(root, timeout=5)  # closed: nothing listens any more


def test_ui_of_a_server_this_machine_reaches_just_names_its_page(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with serve_mlflow() as mlflow:
        for fake in serve(FakeApiServer()):
            answers = Cluster()
            answers.job = trainjob(mlflow.url)
            fake.answer = answers
            kubeconfig = kubeconfig_for(fake, tmp_path / "kubeconfig", NS)
            assert mwms(kubeconfig, "ui", "j") == (0, f"{mlflow.url}/#/experiments/4/runs/r1\n", "")
            assert proxied(fake) == []


def serve_mlflow() -> Any:
    """MLflow as this machine reaches it: the run r1 at its own address."""
    from mwms_kit.fake_api_server import served

    return served(
        FakeApiServer(
            answer=lambda seen: Cluster().mlflow(
                seen.route, dict(urllib.parse.parse_qsl(urllib.parse.urlparse(seen.path).query))
            )
        )
    )
