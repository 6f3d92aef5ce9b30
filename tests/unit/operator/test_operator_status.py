"""The status: what a decision writes (the contract's typed status, rendered), when its deadlines fall due,
and the contract's condition reasons."""

import re
from datetime import timedelta
from pathlib import Path

from mwms_contract import conditions
from mwms_contract.status import STATUS_KEYS, MlflowRun, Progress, TrainJobStatus, format_time
from mwms_contract.trainjob import SpecError
from mwms_kit.decisions import RUN, T0, group, pod, running_status, spec, step
from mwms_operator.decide.job_status import next_due
from mwms_operator.decide.policy import REFUSALS


def test_a_decision_writes_every_status_key_but_progress_and_reads_back_the_same():
    new = step(None, [], service=False)
    running = step(new.status, group(), at=5)
    done = step(running.status, [pod(0, "Succeeded", exit_code=0, message=RUN), *group()[1:]], at=9)
    for d in (new, running, done):
        assert list(d.status) == [key for key in STATUS_KEYS.values() if key != "progress"]
        assert TrainJobStatus.from_dict(d.status) == d.new
        assert TrainJobStatus.from_dict(d.status).to_patch(progress=False) == d.status
    assert done.new.mlflow == MlflowRun("r123", "7", "models:/m/1", "http://mlflow:5000")
    assert done.new.phase == "Succeeded"


def test_a_decision_leaves_progress_to_the_run_watch_and_reads_an_older_status():
    shown = {"epoch": 2, "metrics": {"loss": 0.5}, "runId": "r", "updateTime": format_time(T0)}
    d = step({**running_status(), "progress": shown}, group(), at=5)
    assert "progress" not in d.status and d.new.progress is None
    assert TrainJobStatus.from_dict({"progress": shown}).progress == Progress(
        2, None, {"loss": 0.5}, shown["updateTime"], "r"
    )
    # An older operator's status (no counts, no disruptions, a phase only) still decides.
    old = step({"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]}, group(), at=5)
    assert old.status["restarts"] == old.status["disruptions"] == 0 and old.status["phase"] == "Running"


def test_next_due_is_the_earliest_deadline_of_the_status():
    job = spec(
        runPolicy={"activeDeadlineSeconds": 100, "startupTimeoutSeconds": 30, "ttlSecondsAfterFinished": 5}
    )
    started = {"phase": "Pending", "startTime": format_time(T0), "stalledSince": format_time(T0)}
    assert next_due(job, started) == T0 + timedelta(seconds=30)
    assert next_due(job, dict(started, stalledSince=None)) == T0 + timedelta(seconds=100)
    backoff = dict(started, phase="Restarting", nextRestartTime=format_time(T0 + timedelta(seconds=20)))
    assert next_due(job, backoff) == T0 + timedelta(seconds=20)
    done = {"phase": "Succeeded", "startTime": format_time(T0), "completionTime": format_time(T0)}
    assert next_due(job, done) == T0 + timedelta(seconds=5)
    assert next_due(spec(), done) is None, "a finished job without a TTL waits for nothing"
    assert next_due(job, dict(started, phase="Suspended")) is None
    assert next_due(SpecError("spec.replicas", "is required"), started) is None


def test_every_refusal_reason_has_its_message_and_is_in_the_troubleshooting_table():
    assert tuple(REFUSALS) == conditions.REFUSAL_REASONS
    doc = (Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md").read_text()
    table = "\n".join(line for line in doc.splitlines() if line.startswith("| "))
    assert [r for r in conditions.REFUSAL_REASONS if f"`{r}`" not in table] == []


def test_every_reason_is_documented_in_the_troubleshooting_doc():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md").read_text()
    assert [r for r in conditions.REASONS if f"`{r}`" not in doc] == []


def test_each_reason_is_one_camelcase_word_listed_once():
    assert [r for r in conditions.REASONS if not re.fullmatch(r"[A-Z][A-Za-z]+", r)] == []
    assert len(set(conditions.REASONS)) == len(conditions.REASONS)
    assert len(set(conditions.PHASES)) == len(conditions.PHASES) == 6
