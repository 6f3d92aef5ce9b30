"""The worker log's cap (worker_log.CappedLog) and when a worker keeps its log at all."""

from __future__ import annotations

import os
import socket
import time
import urllib.error

import pytest

from mwms_contract import names
from mwms_kit.fake_api_server import FakeApiServer, mlflow, served
from mwms_trainer import worker_log

JOB_ENV = {
    names.ENV_TRACKING_URI: "http://mlflow:5000",
    names.ENV_JOB_UID: "u",
    names.ENV_TF_CONFIG: '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
    names.ENV_EXPERIMENT_NAME: "e",
}


def test_a_log_within_the_cap_is_kept_whole_and_unmarked():
    log = worker_log.CappedLog(1000)
    for i in range(50):
        log.add(f"line {i}\n".encode())
    assert log.text() == "".join(f"line {i}\n" for i in range(50))
    assert names.LOG_CUT_MARKER not in log.text()


def test_a_long_log_keeps_its_beginning_and_end_and_says_how_much_was_cut():
    log = worker_log.CappedLog(800)
    lines = [f"{i:09d}\n".encode() for i in range(1000)]  # 10 bytes a line, 10000 bytes in all
    for line in lines:
        log.add(line)
    text = log.text()
    head, marker, tail = text.partition(f"\n{names.LOG_CUT_MARKER} ")
    assert marker, text[:300]
    assert head == b"".join(lines)[:100].decode()  # the first eighth
    assert tail.endswith(b"".join(lines)[-700:].decode())  # and the end, up to the cap
    assert "9200 bytes of this worker's log were cut here: it wrote 10000 bytes" in tail
    assert len(head) + len(tail.split("\n", 1)[1]) == 800


def test_only_a_jobs_worker_with_a_tracking_server_keeps_its_log():
    assert worker_log.wanted(JOB_ENV)
    assert not worker_log.wanted({**JOB_ENV, names.ENV_TRACKING_URI: ""})
    assert not worker_log.wanted({k: v for k, v in JOB_ENV.items() if k != names.ENV_JOB_UID})
    assert not worker_log.wanted({**JOB_ENV, names.ENV_LOG_CAP: "0"})
    assert worker_log.cap_of({names.ENV_LOG_CAP: "4096"}) == 4096
    assert worker_log.cap_of({}) == names.LOG_CAP_BYTES


def test_each_group_keeps_its_own_log_path():
    assert names.log_artifact_path(0, 1) == "logs/group-0/worker-1.log"
    assert names.log_artifact_path(3, 0) == "logs/group-3/worker-0.log"


def test_the_jobs_credentials_never_follow_a_redirect():
    elsewhere = socket.socket()
    elsewhere.bind(("127.0.0.1", 0))
    elsewhere.listen()
    target = f"http://127.0.0.1:{elsewhere.getsockname()[1]}"
    redirecting = FakeApiServer(answer=lambda seen: (307, b"", {"Location": target + seen.path}))
    try:
        with served(redirecting):
            env = {**JOB_ENV, names.ENV_TRACKING_URI: redirecting.url}
            with pytest.raises(urllib.error.HTTPError) as refused:
                worker_log.upload({**env, "MLFLOW_TRACKING_TOKEN": "secret"}, "a log", delays=())
        assert refused.value.code == 307
        elsewhere.settimeout(0.2)
        with pytest.raises(TimeoutError):
            elsewhere.accept()  # nobody came with the token
    finally:
        elsewhere.close()


def test_a_server_that_never_answers_ends_the_upload_within_its_budget(monkeypatch):
    """A blackholed server (it accepts, never answers) must not hold the worker past its grace period."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    monkeypatch.setattr(worker_log, "UPLOAD_SECONDS", 1.0)
    env = {**JOB_ENV, names.ENV_TRACKING_URI: f"http://127.0.0.1:{silent.getsockname()[1]}"}
    try:
        with pytest.raises(OSError):
            worker_log.upload(env, "a log")
    finally:
        silent.close()


def test_a_stopped_worker_only_uploads_the_run_having_been_found_while_it_ran():
    """A worker stopped by a signal has 2.5 s: the run's search is done before, so only the PUT is left."""
    run = {"info": {"run_id": "r1", "artifact_uri": "mlflow-artifacts:/1/r1/artifacts"}}
    with served(FakeApiServer(answer=mlflow(run, experiment_id="1"))) as tracking:
        capture = worker_log.Capture({**JOB_ENV, names.ENV_TRACKING_URI: tracking.url})
        capture.open()
        os.write(capture._write, b"a line of the trainer\n")
        capture.in_parent()  # the trainer's end of the pipe closes: the reader gets the line, then EOF
        deadline = time.monotonic() + 30
        while capture.run is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert capture.run is not None and capture.run["run_id"] == "r1"
        searched = len(tracking.seen)
        capture.finish(stopped=True)
        artifact = "/api/2.0/mlflow-artifacts/artifacts/1/r1/artifacts/logs/group-0/worker-0.log"
        assert [(seen.method, seen.route) for seen in tracking.seen[searched:]] == [("PUT", artifact)]
        assert tracking.seen[-1].body == b"a line of the trainer\n"


def test_a_worker_stopped_before_it_found_the_run_has_time_to_search_for_it(capsys):
    """Stopped between the chief opening the run and its next lookup: the search and the PUT take 3 s,
    more than the 2.5 s a stopped worker gets when the run is already known."""
    run = {"info": {"run_id": "r1", "artifact_uri": "mlflow-artifacts:/1/r1/artifacts"}}
    answer = mlflow(run, experiment_id="1")

    def slow(seen):
        time.sleep(1.0)
        return answer(seen)

    with served(FakeApiServer(answer=slow)) as tracking:
        capture = worker_log.Capture({**JOB_ENV, names.ENV_TRACKING_URI: tracking.url})
        capture.log.add(b"a line of the chief\n")
        capture.finish(stopped=True)
        uploaded = "this worker's log is in MLflow at runs:/r1/logs/group-0/worker-0.log"
        assert uploaded in capsys.readouterr().err
        assert tracking.seen[-1].body == b"a line of the chief\n"
