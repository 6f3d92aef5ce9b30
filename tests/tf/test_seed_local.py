"""The seed's fit as `mwms local manifests/samples/seed-breast-cancer.yaml --json`: 4 workers, defaults."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tf_support import REPO, models_of, runs_of

from mwms_contract import names
from mwms_trainer import local
from mwms_trainer.input.exact import load_split
from mwms_trainer.trainer_config import TrainerConfig

SAMPLE = REPO / "manifests" / "samples" / "seed-breast-cancer.yaml"


def test_seed_sample_four_workers_one_run_one_model(mlflow_server, mlflow_client, tmp_path, capsys):
    code = local.main(
        [str(SAMPLE), "--tracking-uri", mlflow_server.url, "--json", "--workdir", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["replicas"] == 4
    assert summary["exitCodes"] == [0, 0, 0, 0]

    # Exactly one run in the job's experiment, tagged with the job's identity, with one model.
    runs = runs_of(mlflow_client, "breast-cancer")
    assert [r.info.run_id for r in runs] == [summary["runId"]]
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags[names.MLFLOW_TAG_JOB_UID]
    assert run.data.tags["mwms.dev/job-name"] == "breast-cancer"
    assert run.data.tags["mwms.dev/job-namespace"] == "default"
    assert run.data.params["replicas"] == "4"
    assert run.data.params["perWorkerBatchSize"] == "8"
    defaults = TrainerConfig()
    assert run.data.params["epochs"] == str(defaults.epochs)
    history = mlflow_client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(defaults.epochs))
    models = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert len(models) == 1
    assert summary["modelUri"] == f"models:/{models[0].model_id}"

    # The model takes raw rows (the scaler is inside) and scores the held-out split as the chief reported.
    import mlflow

    mlflow.set_tracking_uri(mlflow_server.url)
    split = load_split(defaults)
    predictions = np.asarray(mlflow.pyfunc.load_model(summary["modelUri"]).predict(split.x_test)).reshape(-1)
    accuracy = float(np.mean((predictions > 0.5) == (split.y_test > 0.5)))
    assert accuracy == pytest.approx(summary["metrics"]["val_accuracy"], abs=1e-6)
    assert accuracy >= 0.95
    assert run.data.metrics["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)
