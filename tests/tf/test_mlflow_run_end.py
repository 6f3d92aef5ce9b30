"""The run ends with the job, against a real `mlflow server` (no TensorFlow involved): the chief retries its
run's end as it retries every call and counts the epoch metrics MLflow missed in the run; and when a run is
still RUNNING once the job has ended, the operator ends it through the REST API it reads progress with."""

from __future__ import annotations

import uuid

import pytest

from mwms_contract import names
from mwms_operator.mlflow.progress import ProgressReader
from mwms_operator.settings import OperatorConfig
from mwms_trainer.mlflow_run import TAG_DROPPED_METRICS, MlflowTracker

DELAYS = (0.01, 0.01, 0.01)


def _tracker(url: str, uid: str, restart: int = 0) -> MlflowTracker:
    return MlflowTracker(
        tracking_uri=url,
        experiment_name="run-end",
        job_name="j",
        job_namespace="ns",
        job_uid=uid,
        restart_count=restart,
        params={"epochs": 3},
        delays=DELAYS,
    )


def _failing(monkeypatch, owner, name, times):
    """`owner.name` raises a connection error `times` times, then works; the calls it saw."""
    real, calls = getattr(owner, name), []

    def flaky(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise ConnectionError("connection reset by peer")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, flaky)
    return calls


def test_the_chief_retries_its_runs_end(mlflow_server, mlflow_client, monkeypatch):
    import mlflow

    tracker = _tracker(mlflow_server.url, uuid.uuid4().hex)
    calls = _failing(monkeypatch, mlflow.MlflowClient, "set_terminated", 2)
    tracker.close(ok=True)
    assert len(calls) == 3
    assert mlflow_client.get_run(tracker.run_id).info.status == "FINISHED"
    assert mlflow.active_run() is None


def test_dropped_epoch_metrics_are_counted_in_the_run_over_every_group(
    mlflow_server, mlflow_client, monkeypatch
):
    import mlflow

    uid = uuid.uuid4().hex
    tracker = _tracker(mlflow_server.url, uid)
    _failing(monkeypatch, mlflow, "log_metrics", 2)
    for epoch in range(3):
        tracker.log_epoch(epoch, {"loss": 1.0 / (epoch + 1)})
    run = mlflow_client.get_run(tracker.run_id)
    assert run.data.tags[TAG_DROPPED_METRICS] == "2", "said as soon as MLflow answers again"
    assert [m.step for m in mlflow_client.get_metric_history(tracker.run_id, "loss")] == [2]
    tracker.close(ok=False)
    restarted = _tracker(mlflow_server.url, uid, restart=1)  # the next group continues the run
    assert restarted.run_id == tracker.run_id
    _failing(monkeypatch, mlflow, "log_metrics", 1)
    restarted.log_epoch(3, {"loss": 0.2})
    restarted.close(ok=True)
    assert mlflow_client.get_run(tracker.run_id).data.tags[TAG_DROPPED_METRICS] == "3"


@pytest.mark.parametrize(("phase", "final"), [("Succeeded", "FINISHED"), ("Failed", "FAILED")])
def test_the_operator_ends_a_run_left_running_as_the_job_ended(mlflow_server, mlflow_client, phase, final):
    uid = uuid.uuid4().hex
    experiment = mlflow_client.get_experiment_by_name("run-end") or mlflow_client.create_experiment("run-end")
    experiment_id = getattr(experiment, "experiment_id", experiment)
    # The chief opened the job's run and died before its end_run.
    run_id = mlflow_client.create_run(experiment_id, tags={names.MLFLOW_TAG_JOB_UID: uid}).info.run_id
    reader = ProgressReader(
        OperatorConfig.from_env({"MWMS_TRACKING_URI": mlflow_server.url}).tracking_access()
    )
    said = reader.end_run(uid, mlflow_server.url, "run-end", phase, None)
    assert (said.type, said.status, said.reason) == ("MlflowRunEnded", True, "RunEndedByOperator")
    assert mlflow_client.get_run(run_id).info.status == final
    again = reader.end_run(uid, mlflow_server.url, "run-end", phase, run_id)
    assert (again.status, again.reason) == (True, "RunEndedByChief"), "ended: left alone"
