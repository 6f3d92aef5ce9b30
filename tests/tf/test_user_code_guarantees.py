"""spec.code keeps the built-in trainer's guarantees: real TensorFlow workers run by `python -m mwms_trainer`
as in a pod, a real `mlflow server` (through a proxy that can refuse uploads).

- a model the user logs (the runner's log_model, or plain mlflow.<flavor>.log_model on the chief) survives
  MLflow's transient failures, and a restarted group (same job uid) reuses it: one READY model per name;
- the chief's return value comes back whole up to 1 MiB (through an artifact of the job's run), and above it
  the job fails saying so;
- a peer lost while the model's initial weights are broadcast, at import time of the entrypoint, exits 75.
"""

from __future__ import annotations

import re
import uuid

from tf_support import HANG_SECONDS, REPO, StallingProxy, group, models_of, runs_of, trainjob_spec

from mwms.jobs import chiefs_value
from mwms_contract import names
from mwms_trainer import result as job_result

CODE = REPO / "tests" / "data" / "usercode"
MODEL_FILE = re.compile(r"/models/(m-[0-9a-f]+)/artifacts/MLmodel$")


def _code_group(name, replicas, entrypoint, tracking_uri, job_dir, args=(), **env):
    code = {"configMap": "unused-locally", "entrypoint": entrypoint, "args": list(args)}
    spec = trainjob_spec(name, replicas, None, code=code, startup_timeout=600)
    return group(spec, tracking_uri, job_dir, **{names.ENV_CODE_DIR: str(CODE)}, **env)


class FailFirstAttempts:
    """Refuses (503) every upload of the MLmodel file to the 1st and 3rd model MLflow creates: the first
    attempt of each of two models fails, whatever MLflow's client retries on its own."""

    def __init__(self) -> None:
        self.model_ids: list[str] = []

    def __call__(self, method: str, path: str) -> bool:
        found = MODEL_FILE.search(path)
        if method != "PUT" or found is None:
            return False
        if found[1] not in self.model_ids:
            self.model_ids.append(found[1])
        return self.model_ids.index(found[1]) in (0, 2)


def test_user_models_survive_mlflow_failures_and_a_restart_logs_none_again(
    mlflow_server, mlflow_client, tmp_path
):
    name, uid = f"user-models-{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    failing = FailFirstAttempts()
    proxy = StallingProxy(mlflow_server.url, lambda *_: False, unavailable=failing)
    try:
        first = _code_group(name, 1, "logs_models:train", proxy.url, tmp_path / "job", uid=uid).start()
        assert first.wait(timeout=600) == {0: 0}, first.log(0)[-4000:]
    finally:
        proxy.close()
    assert len(failing.model_ids) == 4, failing.model_ids  # two refused attempts, two that went through
    for model in ("helper", "plain"):
        assert f"MLflow log_model of '{model}' failed (attempt 1), retrying" in first.log(0)
    (run,) = runs_of(mlflow_client, name)
    models = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert sorted((m.name, str(m.status)) for m in models) == [("helper", "READY"), ("plain", "READY")]
    assert first.summary()["modelUri"] == f"models:/{next(m.model_id for m in models if m.name == 'helper')}"

    # The operator restarts the group (same job uid): the user's code runs again and logs again.
    second = _code_group(
        name, 1, "logs_models:train", mlflow_server.url, tmp_path / "job", uid=uid, restart_count=1
    ).start()
    assert second.wait(timeout=600) == {0: 0}, second.log(0)[-4000:]
    again = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert sorted(m.model_id for m in again) == sorted(m.model_id for m in models)
    assert second.log(0).count("not logging it again") == 2
    assert second.summary()["modelUri"] == first.summary()["modelUri"]


def test_a_100_kb_result_arrives_whole(mlflow_server, tmp_path):
    g = _code_group("big-result", 1, "returns.py", mlflow_server.url, tmp_path, args=["100000"]).start()
    assert g.wait(timeout=HANG_SECONDS) == {0: 0}, g.log(0)[-4000:]
    summary = g.summary()
    assert "result" not in summary and summary["resultBytes"] > 100_000
    assert summary["resultArtifact"] == f"runs:/{summary['runId']}/{job_result.ARTIFACT}"
    value = chiefs_value(summary, mlflow_server.url)  # what the client (Client().result) does
    assert value == ["x" * 98] * 1000


def test_a_result_above_1_mib_fails_the_job_saying_so(mlflow_server, tmp_path):
    g = _code_group("too-big-result", 1, "returns.py", mlflow_server.url, tmp_path, args=["2000000"]).start()
    assert g.wait(timeout=HANG_SECONDS) == {0: names.EXIT_FAILURE}, g.log(0)[-4000:]
    message = g.termination(0)
    assert message.startswith("failed: the chief's return value is "), message
    assert "bytes as JSON, above the 1048576 bytes (1 MiB) a job returns" in message


def test_a_peer_lost_while_initial_weights_are_broadcast_at_import_exits_75(mlflow_server, tmp_path):
    g = _code_group("lost-in-broadcast", 2, "builds_at_import:train", mlflow_server.url, tmp_path).start()
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes[0] == names.EXIT_RETRYABLE, g.log(0)[-4000:]
    assert codes[1] == -9  # the peer that died
    assert g.termination(0).startswith("retryable: lost a peer in train_fn: UnavailableError"), g.termination(
        0
    )
