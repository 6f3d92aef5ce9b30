"""`mwms logs -f`, `wait` and `submit` against a scripted API server: each ends, and says why, whatever
becomes of the job (no pod yet, deleted, a new group, suspended) or of a refused submit."""

from __future__ import annotations

import io
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms import Cluster, MirroredStrategyRunner, cli, submit
from mwms.jobs import JobSuspended
from mwms.kube import SubmitError
from mwms.sdk import Client
from mwms_kit.fake_api_server import FakeApiServer, Seen, Stream, serve
from mwms_kit.fake_job_client import FakeJobClient, client_on

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


def scripted(
    jobs: Callable[[], dict[str, Any] | None],
    pods: Callable[[], dict[str, Any] | None],
    log: list[str] = (),  # type: ignore[assignment]
    log_ends: bool = True,
) -> FakeJobClient:
    """`jobs()` and `pods()` answer get_trainjob and get_pod (None: NotFound / no pod); the chief's log
    stream gives `log` and then, unless `log_ends`, stays open until stopped."""
    return FakeJobClient(job=jobs, pods=lambda name: pods(), logs=lambda name: list(log), log_ends=log_ends)


def run_cli(monkeypatch, api: FakeJobClient, *argv: str) -> tuple[int, str, str]:
    """`mwms ARGV` on `api` in a thread: a command still running after BOUND seconds fails the test."""
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
    api = scripted(jobs=lambda: job("Pending"), pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f", "--pod-running-timeout", "0.1")
    assert (code, out) == (1, "")
    lines = err.splitlines()
    assert lines[0] == "mwms logs: waiting for pod j-worker-0 to be created (trainjob/j is Pending)"
    assert "the chief pod j-worker-0 did not start within 0.1s" in lines[-1]
    assert "--pod-running-timeout" in lines[-1]


def test_logs_follow_says_why_the_container_has_not_started_then_streams_it():
    answers = iter([pod(state="waiting", reason="ContainerCreating")])
    api = scripted(jobs=lambda: job(), pods=lambda: next(answers, pod()), log=["epoch 1", "done"])
    said: list[str] = []
    lines = list(client_on(api).logs("j", follow=True, say=said.append))
    assert lines == ["epoch 1", "done"]
    assert said == [
        "waiting for the trainer container of pod j-worker-0 to start (pod Pending; ContainerCreating)"
    ]  # and nothing at the end: the same pod's log ended with its container


def test_logs_follow_ends_with_a_line_when_its_pod_is_replaced_by_a_new_group():
    """The stream stays open (a kubelet's may), the job restarts its group: the log ends, saying so."""
    state = {"job": job(), "pod": pod("u1")}
    api = scripted(jobs=lambda: state["job"], pods=lambda: state["pod"], log=["epoch 1"], log_ends=False)
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
    api = scripted(jobs=lambda: state["job"], pods=pod, log=["epoch 1"], log_ends=False)
    threading.Thread(target=lambda: api.streamed.wait() and state.update(job=None), daemon=True).start()
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f")
    assert (code, out) == (1, "epoch 1\n")
    assert err == "mwms logs: trainjob/j was deleted while its chief's log was followed\n"


def test_logs_follow_of_a_finished_job_whose_pod_is_gone_and_that_has_no_run_says_so(monkeypatch):
    """Its log would be in the job's MLflow run (mwms.logs): with no run, it ends at once, saying why."""
    api = scripted(jobs=lambda: job("Succeeded"), pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "logs", "j", "-f")
    assert (code, out) == (1, "")
    assert err == "mwms logs: no log of worker 0 in group 0: trainjob/j has no MLflow run\n"


# -- wait ---------------------------------------------------------------------------------------------------


def test_wait_returns_on_a_suspended_job_with_its_own_exit_code(monkeypatch):
    api = scripted(jobs=lambda: job("Suspended"), pods=lambda: None)
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
    api = scripted(jobs=lambda: job(next(answers, last)), pods=lambda: None)
    monkeypatch.setattr("mwms.sdk.time.sleep", lambda seconds: None)
    got, out, err = run_cli(monkeypatch, api, "wait", "j", "--for", phases)
    assert (got, out) == (code, f"trainjob/j {last}\n"), err
    if code == 1:
        assert f"trainjob/j is {last}, not Running" in err


def test_a_wait_that_times_out_on_a_job_the_operator_leaves_alone_says_why(monkeypatch):
    said = "the operator could not list namespace team-b (its pods.v1 list was refused: …)"
    unlisted = {"type": "NamespaceUnlisted", "status": "True", "reason": "WatchRefused", "message": said}
    held = job("Pending") | {"status": {"phase": "Pending", "conditions": [unlisted]}}
    api = scripted(jobs=lambda: held, pods=lambda: None)
    code, out, err = run_cli(monkeypatch, api, "wait", "j", "--timeout", "0s")
    assert (code, out) == (1, "") and f"is still Pending after 0s: {said}" in err, err
    listed = job("Pending") | {"status": {"phase": "Pending", "conditions": [unlisted | {"status": "False"}]}}
    with pytest.raises(TimeoutError, match=r"is still Pending after 0s$"):
        client_on(scripted(jobs=lambda: listed, pods=lambda: None)).wait("j", timeout=0)


def test_wait_for_a_phase_that_does_not_exist_is_a_bad_command_line_and_a_value_error(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["wait", "j", "--for", "Runing"])
    assert exited.value.code == 2 and "'Runing': not phases" in capsys.readouterr().err
    api = scripted(jobs=lambda: job(), pods=lambda: None)
    with pytest.raises(ValueError, match="no such phase: Runing"):
        client_on(api).wait("j", phases={"Runing"})


# -- submit -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [SubmitError("refused: quota"), ConnectionResetError("reset by peer"), KeyError("metadata")],
    ids=["submit-error", "connection", "bug"],
)
def test_submit_says_what_to_delete_by_hand_whatever_the_error(tmp_path, error):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(SubmitError) as raised:
        submit.submit(FakeJobClient(refuse=error), "j", submit.pack(script, None, None), replicas=1)
    assert "kubectl delete configmap j-code -n team-a" in str(raised.value)
    assert raised.value.__cause__ is error


def test_an_interrupted_submit_says_what_to_delete_by_hand(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    with pytest.raises(KeyboardInterrupt):
        submit.submit(
            FakeJobClient(refuse=KeyboardInterrupt()), "j", submit.pack(script, None, None), replicas=1
        )
    assert "kubectl delete configmap j-code -n team-a" in capsys.readouterr().err


class RestartingWhileStreaming(FakeJobClient):
    """The group restarts after the first line, while the same pod still stops: the last line comes only
    after `logs -f` has looked at the pod again."""

    def __init__(self) -> None:
        super().__init__(job=lambda: self.current, pods=lambda name: pod("u1"))
        self.current = job()
        self.looked_again = threading.Event()

    def get_pod(self, name: str) -> dict[str, Any] | None:
        if self.current["status"]["restarts"] == 1:
            self.looked_again.set()
        return super().get_pod(name)

    def stream_log(self, name: str, on_line: Callable[[str], None], stop: threading.Event) -> None:
        on_line("epoch 1")
        self.current = job("Restarting", restarts=1)
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


# -- on the wire: the real client against mwms_kit's fake API server --------------------------------------

NS = "team-a"
JOBS = f"/apis/mwms.dev/v1alpha1/namespaces/{NS}/trainjobs/"
PODS = f"/api/v1/namespaces/{NS}/pods/"
SUSPENDED = "trainjob/j is Suspended (resume it: spec.runPolicy.suspend=false)"
REFUSED = (
    'pods "j-worker-0" is forbidden: User "system:serviceaccount:team-a:dev" cannot get resource "pods/log" '
    'in API group "" in the namespace "team-a"'
)


def wire_job(phase: str = "Running", replicas: int = 1, suspend: bool | None = None) -> dict[str, Any]:
    """The TrainJob `j` as the API server sends it."""
    spec: dict[str, Any] = {"replicas": replicas}
    if suspend is not None:
        spec["runPolicy"] = {"suspend": suspend}
    metadata = {"name": "j", "namespace": NS, "uid": "job-uid"}
    return {"apiVersion": "mwms.dev/v1alpha1", "kind": "TrainJob", "metadata": metadata, "spec": spec,
            "status": {"phase": phase, "restarts": 0}}  # fmt: skip


def wire_pod(index: int = 0) -> dict[str, Any]:
    """Worker `index`'s pod, its trainer container running, as the API server sends it."""
    container = {"name": "trainer", "image": "trainer", "imageID": "", "ready": True, "restartCount": 0,
                 "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}}}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"j-worker-{index}", "uid": f"pod-{index}", "labels": {"mwms.dev/restart": "0"}},
        "spec": {"containers": [{"name": "trainer", "image": "trainer"}]},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }


def stamped(*lines: str) -> list[bytes]:
    """Log lines as `timestamps=true` gives them, one a nanosecond after the other."""
    return [f"2026-01-01T12:00:01.{i + 1:09d}Z {line}\n".encode() for i, line in enumerate(lines)]


class Wire:
    """How the fake API server answers for the TrainJob `j` (None: deleted) and its pods (by name), the
    created ConfigMap and TrainJob, and each log request (`logs`: (status, body) in turn, the last one
    again)."""

    def __init__(self, job: dict[str, Any] | None, pods: dict[str, Any], logs: list[tuple[int, Any]]) -> None:
        self.job, self.pods, self.logs = job, pods, list(logs)
        self.log_requests: list[dict[str, list[str]]] = []

    def __call__(self, seen: Seen) -> tuple[int, Any]:
        url = urllib.parse.urlparse(seen.path)
        missing = {"kind": "Status", "message": "not found", "reason": "NotFound", "code": 404}
        if url.path.endswith("/log"):
            self.log_requests.append(urllib.parse.parse_qs(url.query))
            return self.logs.pop(0) if len(self.logs) > 1 else self.logs[0]
        if seen.method in ("POST", "PATCH"):  # submit: the ConfigMap, the TrainJob, its owner
            created = dict(seen.body or {})
            created["metadata"] = {"uid": "created-uid", **(created.get("metadata") or {})}
            return (201 if seen.method == "POST" else 200), created
        if url.path.startswith(JOBS):
            return (200, self.job) if self.job is not None else (404, missing)
        if url.path.startswith(PODS):
            pod = self.pods.get(url.path.removeprefix(PODS))
            return (200, pod) if pod is not None else (404, missing)
        return 404, missing


@pytest.fixture
def wire(tmp_path) -> Iterator[tuple[FakeApiServer, Path]]:
    """The fake API server and a kubeconfig for it (namespace team-a)."""
    for fake in serve(FakeApiServer()):
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
            "users": [{"name": "dev", "user": {"token": "t0k3n"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "dev", "namespace": NS}}],
            "current-context": "fake",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(config))
        yield fake, path


def bounded(call: Callable[[], Any]) -> Any:
    """call()'s value or exception, or a failed test when it has not returned within BOUND seconds."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", call()))
        except BaseException as e:  # noqa: BLE001  (handed to the test)
            outcome.append(("error", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert outcome, "still runs: it hangs"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


def mwms_on(kubeconfig: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = bounded(lambda: cli.main([*argv, "--kubeconfig", str(kubeconfig)], out, err))
    return code, out.getvalue(), err.getvalue()


def test_logs_follow_with_pods_log_refused_names_the_missing_right_and_exits_1(wire):
    fake, kubeconfig = wire
    refused = {"kind": "Status", "status": "Failure", "message": REFUSED, "reason": "Forbidden", "code": 403}
    fake.answer = Wire(wire_job(), {"j-worker-0": wire_pod()}, [(403, refused)])
    code, out, err = mwms_on(kubeconfig, "logs", "j", "-f")
    assert (code, out) == (1, ""), err
    assert err.startswith(f"mwms logs: the API server refused the log of pod j-worker-0: {REFUSED}")
    assert "(this needs the RBAC right to get pods/log in namespace team-a: a Role with" in err
    assert "`kubectl auth can-i get pods/log -n team-a` checks it)" in err
    assert mwms_on(kubeconfig, "logs", "j") == (1, "", err)  # the log so far: the same refusal


def test_follow_with_pods_log_refused_says_so_and_still_follows_the_job_to_its_end(wire):
    fake, kubeconfig = wire
    refused = {"kind": "Status", "status": "Failure", "message": REFUSED, "reason": "Forbidden", "code": 403}
    wired = Wire(wire_job(), {"j-worker-0": wire_pod()}, [(403, refused)])
    fake.answer = wired
    out, followed = io.StringIO(), []
    client = Client(kubeconfig=kubeconfig)
    following = threading.Thread(target=lambda: followed.append(bounded(lambda: client.follow("j", out))))
    following.start()
    wait_until(lambda: "pods/log" in out.getvalue())
    wired.job = wire_job("Succeeded")
    following.join(BOUND)
    assert [job.phase for job in followed] == ["Succeeded"]
    assert f"j: the API server refused the log of pod j-worker-0: {REFUSED}" in out.getvalue()


def wait_until(condition: Callable[[], Any]) -> None:
    """Polls what a follower printed (a StringIO tells no one when it is written)."""
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, "it never came"
        time.sleep(0.05)


def test_a_reset_log_stream_is_followed_again_from_the_line_after_the_last_one(wire):
    fake, kubeconfig = wire
    wired = Wire(
        wire_job(),
        {"j-worker-0": wire_pod()},
        [
            (200, Stream(stamped("epoch 1", "epoch 2")[1:], cut=True)),  # --tail 1, then a reset
            (200, Stream(stamped("epoch 1", "epoch 2", "epoch 3"), cut=True)),  # the whole log again
            (200, Stream(stamped("epoch 1", "epoch 2", "epoch 3", "epoch 4"))),  # and it ends
        ],
    )
    fake.answer = wired
    code, out, err = mwms_on(kubeconfig, "logs", "j", "-f", "--tail", "1")
    assert (code, out, err) == (0, "epoch 2\nepoch 3\nepoch 4\n", "")
    asked = [(q.get("tailLines"), str(q.get("timestamps")).lower()) for q in wired.log_requests]
    assert asked == [(["1"], "['true']"), (None, "['true']"), (None, "['true']")]  # older clients say True


def test_a_log_that_lost_the_last_line_it_gave_resumes_after_its_time(wire):
    """The log rotated while the stream was down: the line after the last one given is the first later."""
    fake, kubeconfig = wire
    lines = stamped("epoch 1", "epoch 2", "epoch 3", "epoch 4")
    fake.answer = Wire(
        wire_job(),
        {"j-worker-0": wire_pod()},
        [(200, Stream(lines[:2], cut=True)), (200, Stream(lines[1:1] + lines[2:]))],
    )
    assert mwms_on(kubeconfig, "logs", "j", "-f") == (0, "epoch 1\nepoch 2\nepoch 3\nepoch 4\n", "")


def test_a_log_stream_that_keeps_breaking_is_named_and_exits_1(wire, monkeypatch):
    monkeypatch.setattr("mwms.kube.STREAM_RETRY_DELAYS", (0.0, 0.0))
    fake, kubeconfig = wire
    fake.answer = Wire(
        wire_job(),
        {"j-worker-0": wire_pod()},
        [(200, Stream(stamped("epoch 1"), cut=True)), (200, Stream(stamped("epoch 1"), cut=True))],
    )
    code, out, err = mwms_on(kubeconfig, "logs", "j", "-f")
    assert (code, out) == (1, "epoch 1\n"), err
    assert err.startswith("mwms logs: the log of pod j-worker-0 broke off 3 times in a row")
    assert err.endswith("the last: Response ended prematurely\n")


def test_logs_follow_of_a_suspended_job_ends_at_once_as_wait_does(wire):
    fake, kubeconfig = wire
    fake.answer = Wire(wire_job("Suspended", suspend=True), {}, [(404, {})])
    assert mwms_on(kubeconfig, "logs", "j", "-f") == (3, "", f"mwms logs: {SUSPENDED}\n")
    assert mwms_on(kubeconfig, "logs", "j", "-f", "--all")[::2] == (3, f"mwms logs: {SUSPENDED}\n")
    assert mwms_on(kubeconfig, "wait", "j") == (3, "trainjob/j Suspended\n", f"mwms wait: {SUSPENDED}\n")


def held_log(*lines: str) -> tuple[Stream, threading.Event, threading.Event]:
    """A log stream that gives `lines`, then stays open until `ended` is set (its container ends)."""
    sent, ended = threading.Event(), threading.Event()

    def chunks() -> Iterator[bytes]:
        yield from stamped(*lines)
        sent.set()
        ended.wait(BOUND)

    return Stream(chunks()), sent, ended


def test_a_suspend_mid_stream_ends_logs_follow_saying_so(wire):
    fake, kubeconfig = wire
    log, sent, ended = held_log("epoch 1")
    wired = Wire(wire_job(), {"j-worker-0": wire_pod()}, [(200, log)])
    fake.answer = wired
    result: list[tuple[int, str, str]] = []
    following = threading.Thread(target=lambda: result.append(mwms_on(kubeconfig, "logs", "j", "-f")))
    following.start()
    assert sent.wait(BOUND)
    wired.job, wired.pods = wire_job("Suspended", suspend=True), {}  # the operator deleted the pod
    ended.set()
    following.join(BOUND)
    assert result == [(3, "epoch 1\n", f"mwms logs: pod j-worker-0 is gone: {SUSPENDED}\n")]


def test_submit_follow_and_the_sdk_end_on_a_suspended_job_as_wait_does(wire, tmp_path):
    fake, kubeconfig = wire
    fake.answer = Wire(wire_job("Suspended", suspend=True), {}, [(404, {})])
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    code, out, err = mwms_on(kubeconfig, "submit", str(script), "--name", "j", "--follow")
    assert (code, err) == (3, f"mwms submit: {SUSPENDED}\n")
    assert out.splitlines() == ["trainjob/j created in namespace team-a", "j: Suspended"]
    with pytest.raises(JobSuspended, match=re.escape(SUSPENDED)):
        bounded(lambda: Client(kubeconfig=kubeconfig).follow("j", io.StringIO()))
    runner = MirroredStrategyRunner(use_gpu=False, cluster=Cluster(kubeconfig=str(kubeconfig)))
    with pytest.raises(JobSuspended, match=re.escape(SUSPENDED).replace("/j", r"/train-\w+")):
        bounded(lambda: runner.run(train))


def train() -> int:
    return 1


def test_a_suspend_while_following_ends_follow_saying_so(wire):
    fake, kubeconfig = wire
    log, sent, ended = held_log("epoch 1")
    wired = Wire(wire_job(), {"j-worker-0": wire_pod()}, [(200, log)])
    fake.answer = wired
    out = io.StringIO()
    raised: list[BaseException] = []

    def follow() -> None:
        try:
            bounded(lambda: Client(kubeconfig=kubeconfig).follow("j", out))
        except JobSuspended as e:
            raised.append(e)

    following = threading.Thread(target=follow)
    following.start()
    assert sent.wait(BOUND)
    wait_until(lambda: "epoch 1" in out.getvalue())
    wired.job, wired.pods = wire_job("Suspended", suspend=True), {}
    ended.set()
    following.join(BOUND)
    assert [str(e) for e in raised] == [SUSPENDED]
    assert out.getvalue().splitlines() == ["j: Running", "[worker-0] epoch 1", "j: Suspended"]


def test_logs_follow_all_of_a_job_deleted_while_followed_exits_1_as_logs_follow_does(wire):
    fake, kubeconfig = wire
    logs = [held_log("epoch 1") for _ in range(2)]
    pods = {f"j-worker-{i}": wire_pod(i) for i in range(2)}
    wired = Wire(wire_job(replicas=2), pods, [(200, log) for log, _, _ in logs])
    fake.answer = wired
    result: list[tuple[int, str, str]] = []
    argv = ("logs", "j", "-f", "--all")
    following = threading.Thread(target=lambda: result.append(mwms_on(kubeconfig, *argv)))
    following.start()
    assert all(sent.wait(BOUND) for _, sent, _ in logs)
    wired.job, wired.pods = None, {}
    for _, _, ended in logs:
        ended.set()
    following.join(BOUND)
    [(code, out, err)] = result
    assert sorted(out.splitlines()) == ["[worker-0] epoch 1", "[worker-1] epoch 1"]
    assert (code, err) == (1, "mwms logs: trainjob/j was deleted while its chief's log was followed\n")
