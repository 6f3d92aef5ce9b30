"""`mwms logs` picks its source (the group's pod, else the job's MLflow run, served here over HTTP as the
tracking server serves artifacts), and `describe`/`events` read workers and Events from plain dicts."""

from __future__ import annotations

import datetime
import http.server
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from mwms import describe
from mwms_kit.fake_job_client import FakeJobClient, run_cli

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


class Artifacts(http.server.ThreadingHTTPServer):
    """The tracking server's /get-artifact: {(run, path): text}; the Authorization headers it got."""

    def __init__(self, files: dict[tuple[str, str], str]) -> None:
        self.files, self.auth = files, []  # type: ignore[var-annotated]
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    server: Artifacts

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.server.auth.append(self.headers.get("Authorization"))
        text = self.server.files.get((query.get("run_uuid", ""), query.get("path", "")))
        if url.path != "/get-artifact" or text is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def mlflow() -> Iterator[Artifacts]:
    server = Artifacts({})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def trainjob(uri: str, restarts: int = 1, phase: str = "Running", replicas: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "team-a", "uid": "uid-1"},
        "spec": {"replicas": replicas, "mlflow": {"trackingUri": uri}},
        "status": {"phase": phase, "restarts": restarts, "mlflow": {"runId": "r1", "experimentId": "1"}},
    }


def pod(index: int, group: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"j-worker-{index}",
            "uid": f"p{index}",
            "labels": {"mwms.dev/restart": str(group)},
        },
        "spec": {"node_name": "node-1"},
        "status": {"phase": "Running", **status},
    }


def live(name: str) -> list[str]:
    return [f"live {name} line {i}" for i in range(5)]


def job_api(job: dict[str, Any], pods: dict[str, dict[str, Any]], events: list[Any] = ()) -> FakeJobClient:
    """The job, its pods and Events; each pod's log is five `live` lines."""
    return FakeJobClient(job=job, pods=pods, events=list(events), logs=live)


def run(monkeypatch, api: FakeJobClient, *argv: str) -> tuple[int, str, str]:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return run_cli(monkeypatch, api, *argv)


def test_the_current_groups_log_comes_from_its_pod(monkeypatch, mlflow):
    api = job_api(trainjob(mlflow.uri), {"j-worker-1": pod(1, 1)})
    assert run(monkeypatch, api, "logs", "j", "--worker", "1", "--tail", "2") == (
        0,
        "live j-worker-1 line 3\nlive j-worker-1 line 4\n",
        "",
    )


def test_an_earlier_groups_log_comes_from_the_run_even_while_a_new_pod_has_its_name(monkeypatch, mlflow):
    mlflow.files[("r1", "logs/group-0/worker-0.log")] = "old 1\nold 2\nold 3\n"
    api = job_api(trainjob(mlflow.uri), {"j-worker-0": pod(0, 1)})
    assert run(monkeypatch, api, "logs", "j", "--previous")[:2] == (0, "old 1\nold 2\nold 3\n")
    assert run(monkeypatch, api, "logs", "j", "--group", "0", "--tail", "1")[:2] == (0, "old 3\n")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "t0k")
    run(monkeypatch, api, "logs", "j", "--group", "0")
    assert mlflow.auth[-1] == "Bearer t0k"  # the user's own MLflow credentials


def test_all_workers_of_a_job_whose_pods_are_gone_and_a_missing_one_says_why_and_exits_1(monkeypatch, mlflow):
    """The others' logs are all printed; the exit code is the missing one's alone (`--worker 1`)."""
    mlflow.files[("r1", "logs/group-1/worker-0.log")] = "chief\n"
    api = job_api(trainjob(mlflow.uri, phase="Failed"), {})
    code, out, err = run(monkeypatch, api, "logs", "j", "--all")
    assert (code, out) == (1, "[worker-0] chief\n")
    said = err.splitlines()
    assert said[0].startswith(
        "mwms logs: [worker-1] no log of worker 1 in group 1: its pod is gone and run r1 "
    )
    assert said[1:] == ["mwms logs: the log of worker 1 could not be read (said above)"]
    code, out, err = run(monkeypatch, api, "logs", "j", "--worker", "1")
    assert (code, out) == (1, "")
    assert "logs/group-1/worker-1.log" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--group", "5"], "trainjob/j has groups 0 to 1, not 5"),
        (["--worker", "2"], "trainjob/j has workers 0 to 1, not 2"),
    ],
)
def test_a_group_or_worker_that_does_not_exist_is_exit_1(monkeypatch, mlflow, argv, said):
    code, _, err = run(monkeypatch, job_api(trainjob(mlflow.uri), {}), "logs", "j", *argv)
    assert code == 1 and said in err


def test_previous_of_a_job_that_never_restarted_says_so(monkeypatch, mlflow):
    code, _, err = run(monkeypatch, job_api(trainjob(mlflow.uri, restarts=0), {}), "logs", "j", "-p")
    assert code == 1 and "has not restarted its group: there is no previous group" in err


def test_no_tracking_server_known_says_to_set_one(monkeypatch):
    job = trainjob("")
    job["spec"]["mlflow"] = {}
    code, _, err = run(monkeypatch, job_api(job, {}), "logs", "j")
    assert code == 1 and "set MLFLOW_TRACKING_URI" in err


def test_group_and_previous_and_worker_and_all_exclude_each_other(monkeypatch, mlflow, capsys):
    for argv in (["--group", "0", "--previous"], ["--worker", "1", "--all"]):
        with pytest.raises(SystemExit) as exit_:
            run(monkeypatch, job_api(trainjob(mlflow.uri), {}), "logs", "j", *argv)
        assert exit_.value.code == 2


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "name": "trainer",
        "restart_count": 0,
        "state": {"waiting": {"reason": reason, "message": message}},
    }


def test_each_workers_state_and_last_reason():
    unscheduled = pod(
        0, 0, phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1"}],
    )  # fmt: skip
    assert describe.worker_state(0, unscheduled).reason == "Unschedulable"
    crashed = pod(1, 0, container_statuses=[waiting("CrashLoopBackOff", "back-off 10s")])
    state = describe.worker_state(1, crashed)
    assert (state.state, state.reason, state.message, state.group) == (
        "Waiting",
        "CrashLoopBackOff",
        "back-off 10s",
        0,
    )
    done = pod(
        1, 0,
        container_statuses=[
            {"name": "trainer", "state": {"terminated": {"reason": "Error", "exit_code": 75}}}
        ],
    )  # fmt: skip
    assert (describe.worker_state(1, done).reason, describe.worker_state(1, done).exit_code) == ("Error", 75)
    assert describe.worker_state(2, None).pod is None


def event(kind: str, name: str, reason: str, uid: str = "", when: int = 0, count: int = 1) -> dict[str, Any]:
    return {
        "involvedObject": {"kind": kind, "name": name, "uid": uid},
        "reason": reason,
        "message": f"{reason} happened",
        "type": "Warning" if reason.startswith("Failed") else "Normal",
        "count": count,
        "lastTimestamp": (NOW - datetime.timedelta(minutes=when)).isoformat(),
    }


def test_events_are_the_jobs_and_its_pods_only_oldest_first(monkeypatch, mlflow):
    events = [
        event("Pod", "j-worker-0", "Started", when=1),
        event("TrainJob", "j", "GroupRestarted", uid="uid-1", when=2, count=3),
        event("TrainJob", "j", "Old", uid="uid-0"),  # an earlier job of the same name
        event("Pod", "jx-worker-0", "Started"),  # another job's pod
        event("Pod", "j-worker-1", "FailedScheduling", when=5),
    ]
    api = job_api(trainjob(mlflow.uri), {"j-worker-0": pod(0, 1)}, events)
    code, out, _ = run(monkeypatch, api, "events", "j")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert [line.split()[-4:-2] for line in lines[1:]] == [
        ["FailedScheduling", "pod/j-worker-1"],
        ["GroupRestarted", "trainjob/j"],
        ["Started", "pod/j-worker-0"],
    ]
    assert "(x3)" in lines[2]
    code, out, err = run(monkeypatch, api, "describe", "j")
    assert code == 0, err
    assert "Run ID:       r1" in out and "Restarts:     1" in out
    workers = out.split("Workers:")[1].split("Events:")[0].splitlines()
    assert workers[2].split()[:4] == ["0", "j-worker-0", "1", "Running"]
    assert workers[3].split()[:2] == ["1", "<none>"]
    assert "GroupRestarted" in out.split("Events:")[1]


def test_a_job_with_no_events_says_so(monkeypatch, mlflow):
    assert run(monkeypatch, job_api(trainjob(mlflow.uri), {}), "events", "j")[1] == (
        "No events for trainjob/j in namespace team-a.\n"
    )


def test_refusals_reading_the_run_name_the_server(monkeypatch):
    api = job_api(trainjob("http://127.0.0.1:9"), {})
    code, _, err = run(monkeypatch, api, "logs", "j")
    assert code == 1 and err.startswith(
        "mwms logs: cannot read logs/group-1/worker-0.log of run r1: MLflow at http://127.0.0.1:9 does not "
        "answer from this machine ("
    )
    assert err.endswith(
        "set MLFLOW_TRACKING_URI (or pass --tracking-uri) to an address of that server this machine reaches\n"
    )


def streaming(job: dict[str, Any], pods: dict[str, dict[str, Any]]) -> FakeJobClient:
    """Every pod's container runs; each worker's stream gives two lines and ends with the container."""
    return FakeJobClient(job=job, pods=pods, logs=lambda name: [f"{name} says {i}" for i in range(2)])


def test_follow_all_streams_every_workers_log_each_line_prefixed(monkeypatch, mlflow):
    running = {"name": "trainer", "state": {"running": {"started_at": "now"}}}
    pods = {f"j-worker-{i}": pod(i, 1, container_statuses=[running]) for i in range(2)}
    code, out, err = run(monkeypatch, streaming(trainjob(mlflow.uri), pods), "logs", "j", "--all", "-f")
    assert (code, err) == (0, "")
    assert sorted(out.splitlines()) == [
        "[worker-0] j-worker-0 says 0",
        "[worker-0] j-worker-0 says 1",
        "[worker-1] j-worker-1 says 0",
        "[worker-1] j-worker-1 says 1",
    ]
    assert out.index("j-worker-0 says 0") < out.index("j-worker-0 says 1")
