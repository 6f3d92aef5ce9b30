"""`mwms logs -f`, `wait` and `submit` against a scripted API server: each ends, and says why, whatever
becomes of the job (no pod yet, deleted, a new group, suspended) or of a refused submit."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

import pytest

from mwms import cli, submit
from mwms.kube import NotFound, SubmitError
from mwms.sdk import Client

BOUND = 30  # seconds a test waits for what must end long before: a hang fails the test, not the run


def job(phase: str = "Running", restarts: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": "j"}, "status": {"phase": phase, "restarts": restarts}}


def pod(uid: str = "u1", state: str = "running", reason: str = "") -> dict[str, Any]:
    """A pod as the kubernetes client's to_dict() gives it."""
    phase = "Running" if state == "running" else "Pending"
    status = {state: {"reason": reason} if reason else {"started_at": "now"}}
    return {
        "metadata": {"name": "j-worker-0", "uid": uid},
        "status": {"phase": phase, "container_statuses": [{"name": "trainer", "state": status}]},
    }


class ScriptedApi:
    """`jobs()` and `pods()` answer get_trainjob and get_pod (None: NotFound / no pod); the log stream
    gives `log` and then, unless `log_ends`, stays open until stopped (as a kubelet's may)."""

    namespace = "team-a"

    def __init__(
        self,
        jobs: Callable[[], dict[str, Any] | None],
        pods: Callable[[], dict[str, Any] | None],
        log: list[str] = (),  # type: ignore[assignment]
        log_ends: bool = True,
    ) -> None:
        self.jobs, self.pods, self.log, self.log_ends = jobs, pods, list(log), log_ends
        self.streamed = threading.Event()

    def get_trainjob(self, name: str) -> dict[str, Any]:
        found = self.jobs()
        if found is None:
            raise NotFound(f"TrainJob {name}: not found in namespace team-a")
        return found

    def get_pod(self, name: str) -> dict[str, Any] | None:
        return self.pods()

    def stream_log(self, name: str, on_line: Callable[[str], None], stop: threading.Event) -> None:
        for line in self.log:
            on_line(line)
        self.streamed.set()
        if not self.log_ends:
            stop.wait()


def client_on(api: ScriptedApi) -> Client:
    client = Client.__new__(Client)
    client.api, client.namespace = api, api.namespace  # type: ignore[assignment]
    return client


def run_cli(monkeypatch, api: ScriptedApi, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(cli, "client_of", lambda args: client_on(api))
    out, err = io.StringIO(), io.StringIO()
    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(cli.main(list(argv), out, err)), daemon=True)
    thread.start()
    thread.join(BOUND)
    assert outcome, f"mwms {' '.join(argv)} still runs: {err.getvalue()}"
    return outcome[0], out.getvalue(), err.getvalue()


# -- logs -f ------------------------------------------------------------------------------------------------


def test_logs_follow_waits_for_a_pod_that_does_not_exist_with_a_bound_saying_what_it_waits_for(monkeypatch):
    api = ScriptedApi(jobs=lambda: job("Pending"), pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f", "--pod-running-timeout", "0.1")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "mwms logs: waiting for pod j-worker-0 to be created (trainjob/j is Pending)"
    assert "the chief pod j-worker-0 did not start within 0.1s" in lines[-1]
    assert "--pod-running-timeout" in lines[-1]


def test_logs_follow_says_why_the_container_has_not_started_then_streams_it():
    answers = iter([pod(state="waiting", reason="ContainerCreating")])
    api = ScriptedApi(jobs=lambda: job(), pods=lambda: next(answers, pod()), log=["epoch 1", "done"])
    said: list[str] = []
    lines = list(client_on(api).logs("j", follow=True, say=said.append))
    assert lines == ["epoch 1", "done"]
    assert said == [
        "waiting for the trainer container of pod j-worker-0 to start (pod Pending; ContainerCreating)"
    ]  # and nothing at the end: the same pod's log ended with its container


def test_logs_follow_ends_with_a_line_when_its_pod_is_replaced_by_a_new_group():
    """The stream stays open (a kubelet's may), the job restarts its group: the log ends, saying so."""
    state = {"job": job(), "pod": pod("u1")}
    api = ScriptedApi(jobs=lambda: state["job"], pods=lambda: state["pod"], log=["epoch 1"], log_ends=False)
    said: list[str] = []
    lines = client_on(api).logs("j", follow=True, say=said.append)
    assert next(lines) == "epoch 1"
    assert api.streamed.wait(BOUND)
    state["job"], state["pod"] = job("Running", restarts=1), pod("u2")
    thread = threading.Thread(target=lambda: said.append(f"rest: {list(lines)}"), daemon=True)
    thread.start()
    thread.join(BOUND)
    assert said == [
        "pod j-worker-0 was replaced: trainjob/j restarted its group (restart 1); "
        "`mwms logs -f j` follows the new chief",
        "rest: []",
    ]


def test_logs_follow_ends_when_the_job_is_deleted(monkeypatch):
    state: dict[str, Any] = {"job": job()}
    api = ScriptedApi(jobs=lambda: state["job"], pods=pod, log=["epoch 1"], log_ends=False)
    threading.Thread(target=lambda: api.streamed.wait() and state.update(job=None), daemon=True).start()
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f")
    assert (code, out) == (1, "epoch 1\n")
    assert err == "mwms logs: trainjob/j was deleted while its chief's log was followed\n"


def test_logs_follow_of_a_finished_job_whose_pod_is_gone_and_that_has_no_run_says_so(monkeypatch):
    """Its log would be in the job's MLflow run (mwms.logs): with no run, it ends at once, saying why."""
    api = ScriptedApi(jobs=lambda: job("Succeeded"), pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f")
    assert (code, out) == (1, "")
    assert err == "mwms logs: no log of worker 0 in group 0: trainjob/j has no MLflow run\n"


# -- wait ---------------------------------------------------------------------------------------------------


def test_wait_returns_on_a_suspended_job_with_its_own_exit_code(monkeypatch):
    api = ScriptedApi(jobs=lambda: job("Suspended"), pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "wait", "j")
    assert (code, out) == (cli.EXIT_SUSPENDED, "trainjob/j Suspended\n") and code == 3
    assert "trainjob/j is Suspended" in err
    assert client_on(api).wait("j").phase == "Suspended"


@pytest.mark.parametrize(
    ("phases", "seen", "code"),
    [
        ("Running", ["Pending", "Running"], 0),
        ("Running,Succeeded", ["Pending", "Succeeded"], 0),
        ("Suspended", ["Running", "Suspended"], 0),
        ("Running", ["Pending", "Failed"], 1),  # it can no longer become Running: it says so
        ("Succeeded", ["Running", "Suspended"], 3),
    ],
)
def test_wait_for_a_set_of_phases(monkeypatch, phases, seen, code):
    answers = iter(seen)
    last = seen[-1]
    api = ScriptedApi(jobs=lambda: job(next(answers, last)), pods=lambda: None)
    monkeypatch.setattr("mwms.sdk.time.sleep", lambda seconds: None)
    got, out, err = run_cli(monkeypatch, api, "wait", "j", "--for", phases)
    assert (got, out) == (code, f"trainjob/j {last}\n"), err
    if code == 1:
        assert f"trainjob/j is {last}, not Running" in err


def test_wait_for_a_phase_that_does_not_exist_is_a_bad_command_line_and_a_value_error(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["wait", "j", "--for", "Runing"])
    assert exited.value.code == 2 and "'Runing': not phases" in capsys.readouterr().err
    api = ScriptedApi(jobs=lambda: job(), pods=lambda: None)
    with pytest.raises(ValueError, match="no such phase: Runing"):
        client_on(api).wait("j", phases={"Runing"})


# -- submit -------------------------------------------------------------------------------------------------


class RefusingApi:
    """Creates the ConfigMap; the TrainJob's creation fails with `error`; nothing can be deleted."""

    namespace = "team-a"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def create_configmap(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def create_trainjob(self, body: dict[str, Any]) -> dict[str, Any]:
        raise self.error

    def delete_configmap(self, name: str) -> None:
        raise SubmitError(f"the API server refused deleting ConfigMap {name}: forbidden")

    delete_trainjob = delete_configmap


@pytest.mark.parametrize(
    "error",
    [SubmitError("refused: quota"), ConnectionResetError("reset by peer"), KeyError("metadata")],
    ids=["submit-error", "connection", "bug"],
)
def test_submit_says_what_to_delete_by_hand_whatever_the_error(tmp_path, error):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(SubmitError) as raised:
        submit.submit(RefusingApi(error), "j", submit.pack(script, None, None), replicas=1)
    assert "kubectl delete configmap j-code -n team-a" in str(raised.value)
    assert raised.value.__cause__ is error


def test_an_interrupted_submit_says_what_to_delete_by_hand(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(KeyboardInterrupt):
        submit.submit(RefusingApi(KeyboardInterrupt()), "j", submit.pack(script, None, None), replicas=1)
    assert "kubectl delete configmap j-code -n team-a" in capsys.readouterr().err


class RestartingWhileStreaming(ScriptedApi):
    """The group restarts after the first line, while the same pod still stops: the last line comes only
    after `logs -f` has looked at the pod again."""

    def __init__(self) -> None:
        super().__init__(jobs=lambda: self.job, pods=lambda: pod("u1"))
        self.job = job()
        self.looked_again = threading.Event()

    def get_pod(self, name: str) -> dict[str, Any] | None:
        if self.job["status"]["restarts"] == 1:
            self.looked_again.set()
        return super().get_pod(name)

    def stream_log(self, name: str, on_line: Callable[[str], None], stop: threading.Event) -> None:
        on_line("epoch 1")
        self.job = job("Restarting", restarts=1)
        self.looked_again.wait(BOUND)
        on_line("stopped: uploading the log")


def test_logs_follow_keeps_a_stopped_groups_last_lines_then_says_a_new_group_started():
    api = RestartingWhileStreaming()
    said: list[str] = []
    followed = client_on(api).logs("j", follow=True, say=said.append)
    assert list(followed) == ["epoch 1", "stopped: uploading the log"]
    assert said == [
        "pod j-worker-0 ended: trainjob/j restarted its group (restart 1); "
        "`mwms logs -f j` follows the new chief"
    ]
