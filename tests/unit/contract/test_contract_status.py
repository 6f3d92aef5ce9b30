"""The typed status (mwms_contract.status): what the operator writes parses back to the same bytes, an older
or partial status still parses, and the keys are exactly those the CRD's status schema declares."""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import yaml

from mwms_contract import status as st
from mwms_contract.status import Condition, MlflowRun, Progress, ReplicaCounts, TrainJobStatus

CRD = Path(__file__).resolve().parents[3] / "manifests" / "crd.yaml"

# A status as the operator writes it (every key), then the run watch's progress.
WRITTEN = {
    "phase": "Running",
    "restarts": 2,
    "disruptions": 1,
    "nextRestartTime": "2026-01-01T00:01:00Z",
    "stalledSince": "2026-01-01T00:00:10Z",
    "containerErrorSince": "2026-01-01T00:00:20Z",
    "startTime": "2026-01-01T00:00:00Z",
    "groupStartTime": "2026-01-01T00:00:30Z",
    "completionTime": "2026-01-01T00:09:00Z",
    "chiefPod": "j-worker-0",
    "mlflow": {"runId": "r1", "experimentId": "7", "modelUri": "models:/m/1"},
    "progress": {
        "runId": "r1",
        "epoch": 3,
        "epochs": 6,
        "metrics": {"loss": 0.5, "accuracy": 1},
        "updateTime": "2026-01-01T00:05:00Z",
    },
    "observedGeneration": 4,
    "conditions": [
        {
            "type": "Running",
            "status": "True",
            "reason": "AllWorkersRunning",
            "message": "all 2 workers are running (restart 2)",
            "lastTransitionTime": "2026-01-01T00:00:40Z",
            "observedGeneration": 4,
        }
    ],
    "replicaStatuses": {"active": 2, "ready": 2, "succeeded": 0, "failed": 0},
}


def crd_status_schema():
    (version,) = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]


def test_a_written_status_round_trips_to_the_same_bytes():
    status = TrainJobStatus.from_dict(WRITTEN)
    assert json.dumps(status.to_dict()) == json.dumps(WRITTEN)
    assert status.phase == "Running" and status.restarts == 2 and status.chief_pod == "j-worker-0"
    assert status.mlflow == MlflowRun("r1", "7", "models:/m/1")
    assert status.progress == Progress(3, 6, {"loss": 0.5, "accuracy": 1}, "2026-01-01T00:05:00Z", "r1")
    assert status.replica_statuses == ReplicaCounts(2, 2, 0, 0)
    assert status.holds("Running") and not status.holds("Failed") and status.condition("Failed") is None


def test_the_patch_sets_every_field_and_removes_the_absent():
    patch = TrainJobStatus(phase="Pending", chief_pod="j-worker-0").to_patch(progress=False)
    assert list(patch) == [k for k in st.STATUS_KEYS.values() if k != "progress"]
    assert patch["phase"] == "Pending" and patch["restarts"] == 0 and patch["conditions"] == []
    assert patch["nextRestartTime"] is None and patch["mlflow"] is None  # null: a merge patch removes it
    assert "progress" in TrainJobStatus().to_patch()


def test_an_older_or_partial_status_still_parses():
    assert TrainJobStatus.from_dict(None) == TrainJobStatus() == TrainJobStatus.from_dict({})
    old = {
        "phase": "Restarting",
        "restarts": "1",
        "conditions": [{"type": "Restarting", "status": "True"}, "junk"],
        "mlflow": {"runId": "r"},
        "progress": {"epoch": 2, "metrics": {"loss": 0.1, "note": "text"}},
        "somethingNewer": {"kept": "by the API server, not by us"},
    }
    status = TrainJobStatus.from_dict(old)
    assert status.phase == "Restarting" and status.restarts == 1 and status.disruptions == 0
    assert status.conditions == (Condition("Restarting", "True"),)
    assert status.mlflow == MlflowRun(run_id="r") and status.mlflow.to_dict() == {"runId": "r"}
    assert status.progress == Progress(epoch=2, metrics={"loss": 0.1})
    assert status.replica_statuses is None and status.start_time is None
    assert "somethingNewer" not in status.to_dict()


def test_an_unknown_phase_keeps_its_text_and_bad_numbers_are_zero():
    status = TrainJobStatus.from_dict({"phase": "Quarantined", "restarts": "many", "disruptions": None})
    assert status.phase == "Quarantined" and status.restarts == status.disruptions == 0


def test_run_patch_names_only_what_a_look_at_the_run_learned():
    progress = Progress(epoch=1, metrics={}, run_id="r")
    assert st.run_patch(progress=progress) == {"progress": {"runId": "r", "epoch": 1, "metrics": {}}}
    assert st.run_patch(mlflow=MlflowRun("r", "7")) == {"mlflow": {"runId": "r", "experimentId": "7"}}
    assert st.run_patch() == {}


def test_every_key_is_one_the_crd_declares():
    schema = crd_status_schema()
    assert set(st.STATUS_KEYS.values()) == set(schema)
    nested = {
        "conditions": (st.CONDITION_KEYS, schema["conditions"]["items"]["properties"]),
        "replicaStatuses": (st.COUNT_KEYS, schema["replicaStatuses"]["properties"]),
        "mlflow": (st.RUN_KEYS, schema["mlflow"]["properties"]),
        "progress": (st.PROGRESS_KEYS, schema["progress"]["properties"]),
    }
    for name, (keys, declared) in nested.items():
        assert set(keys.values()) == set(declared), name
    enum = schema["conditions"]["items"]["properties"]["status"]["enum"]
    assert {st.TRUE, st.FALSE, st.UNKNOWN} == set(enum)


def test_status_times_are_utc_whole_seconds_and_messages_are_cut_at_the_limit():
    moment = datetime(2026, 1, 1, 1, 0, 0, 500_000, tzinfo=timezone(timedelta(hours=1)))
    assert st.format_time(moment) == "2026-01-01T00:00:00Z"
    assert st.parse_time("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, tzinfo=UTC)
    assert st.parse_time(None) is None and st.parse_time("") is None
    assert st.truncate("x" * st.MAX_MESSAGE) == "x" * st.MAX_MESSAGE
    cut = st.truncate("x" * (st.MAX_MESSAGE + 1))
    assert len(cut) == st.MAX_MESSAGE and cut.endswith("…")
