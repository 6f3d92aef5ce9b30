"""The model upload, whatever dies when: one READY model per run, and a failed upload never costs the fit.

One job, three starts of its group against a real `mlflow server` (through a proxy that can hold or refuse
the model's artifact uploads), the same job uid and checkpoint volume, as the operator restarts a group:
1. the chief is killed while its model's artifacts upload: MLflow keeps a PENDING model without artifacts;
2. the upload fails (503) until the retries are spent: exit 75, and the fitted model is kept on the volume;
3. MLflow is back: the chief uploads the kept model without training again; the run ends with exactly one
   model, READY and registered once, and the leftovers of 1 and 2 are gone.
"""

from __future__ import annotations

import os
import uuid

from tf_support import StallingProxy, group, models_of, runs_of, trainjob_spec

from mwms_contract import names


def _artifact_upload(method: str, path: str) -> bool:
    return method == "PUT" and "/mlflow-artifacts/artifacts/" in path


def _since_restart(log: str, restart: int) -> str:
    """The part of a worker's log (appended to by every start of the group) written by the given start."""
    return log[log.index(f", restart {restart}\n") :]


def _logged_models(run, server):
    return [str(m.status) for m in models_of(run.info.experiment_id, run.info.run_id, server.url)]


def test_killed_then_failed_upload_then_the_kept_model_is_uploaded(mlflow_server, mlflow_client, tmp_path):
    name, uid = f"upload-faults-{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    spec = trainjob_spec(name, 2, {"epochs": 2, "globalBatchSize": 32}, checkpoint=True, startup_timeout=600)
    job_dir = tmp_path / "job"

    def start(tracking_uri: str, restart: int):
        return group(
            spec, tracking_uri, job_dir, uid=uid, restart_count=restart, MWMS_REGISTERED_MODEL_NAME=name
        ).start()

    holding = StallingProxy(mlflow_server.url, _artifact_upload)
    first = start(holding.url, 0)
    try:
        assert holding.stalled.wait(900), first.log(0)[-3000:]
        first.procs[0].kill()  # the chief, in the middle of the upload
        assert first.procs[1].wait(timeout=60) == 0, first.log(1)[-3000:]
    finally:
        first.kill()
        holding.close()
    (run,) = runs_of(mlflow_client, name)
    assert _logged_models(run, mlflow_server) == ["PENDING"]  # what the restart must not hand out

    refusing = StallingProxy(mlflow_server.url, lambda *_: False, unavailable=_artifact_upload)
    second = start(refusing.url, 1)
    try:
        codes = second.wait(timeout=900)
    finally:
        refusing.close()
    assert codes == {0: names.EXIT_RETRYABLE, 1: 0}, second.log(0)[-3000:]
    assert "not training again" in _since_restart(second.log(0), 1)
    assert "epoch 1/2" not in _since_restart(second.log(0), 1)
    assert "the fitted model is kept in" in second.termination(0)
    assert "the fit is done" in _since_restart(second.log(1), 1)

    third = start(mlflow_server.url, 2)
    assert third.wait(timeout=900) == {0: 0, 1: 0}, third.log(0)[-3000:]
    assert "not training again" in _since_restart(third.log(0), 2)
    assert "epoch 1/2" not in _since_restart(third.log(0), 2)
    summary = third.summary()
    assert summary["runId"] == run.info.run_id
    (model,) = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert str(model.status) == "READY"
    assert summary["modelUri"] == f"models:/{model.model_id}"
    (version,) = mlflow_client.search_model_versions(f"name = '{name}'")
    assert str(version.status) == "READY"
    assert model.model_id in (version.model_id or version.source)  # the search may leave model_id empty
    assert set(summary["metrics"]) >= {"loss", "accuracy", "val_loss", "val_accuracy"}


def test_a_restart_that_only_uploads_the_kept_model_loads_no_data(mlflow_server, mlflow_client, tmp_path):
    """After the fit, the kept model and what its upload needs are on the volume: the restarted group uploads
    it without reading the data (here gone since the fit) and without meeting its peers."""
    import numpy as np

    from mwms_trainer import kept, model

    name, uid = f"upload-only-{uuid.uuid4().hex[:6]}", str(uuid.uuid4())
    trainer = {"dataset": "csv", "dataPath": str(tmp_path / "moved-away.csv"), "epochs": 2}
    g = group(trainjob_spec(name, 2, trainer, checkpoint=True), mlflow_server.url, tmp_path / "job", uid=uid)
    fitted = model.plain_copy(model.build_model(2, np.zeros(2), np.ones(2)))  # what the chief keeps
    upload = kept.Upload(
        params={"epochs": 2},
        columns=["a", "b"],
        training={"loss": 0.25, "accuracy": 0.875},
        held_out={"val_loss": 0.5, "val_accuracy": 0.75},
    )
    kept.keep_fitted(os.path.join(g.envs[0][names.ENV_CHECKPOINT_DIR], uid, "fitted"), fitted, upload)
    assert g.start().wait(timeout=600) == {0: 0, 1: 0}, g.log(0)[-3000:]
    assert "not training again" in g.log(0)
    assert "the fit is done" in g.log(1)
    summary = g.summary()
    assert summary["metrics"] == {**upload.held_out, **upload.training}
    (run,) = runs_of(mlflow_client, name)
    (logged,) = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert summary["modelUri"] == f"models:/{logged.model_id}" and str(logged.status) == "READY"
