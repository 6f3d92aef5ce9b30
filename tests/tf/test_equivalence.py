"""1, 2 and 4 workers with the same global batch train the same model (the partial last batch is dropped)."""

from __future__ import annotations

import re

import numpy as np
from tf_support import HANG_SECONDS, group, models_of, trainjob_spec

# breast_cancer: 398 training rows, global batch 32 -> 12 full batches per epoch and 14 rows left over, the
# remainder that split 4/4/4/2 and broke the 4-worker result before (each replica's mean
# counted equally, so 4 workers differed from 1 by 2.7e-3).
TRAINER = {"epochs": 3, "globalBatchSize": 32}


def _train(replicas, server, client, tmp_path):
    name = f"equivalence-{replicas}"
    spec = trainjob_spec(name, replicas, TRAINER)
    g = group(spec, server.url, tmp_path / name, MWMS_REGISTERED_MODEL_NAME=name).start(poison_non_chief=True)
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == dict.fromkeys(range(replicas), 0), "\n".join(g.log(i)[-2000:] for i in range(replicas))
    for i in range(1, replicas):
        assert '"status":"ok"' in g.termination(i)
    # The first optimizer step is logged when it ends (a call of one step), the first epoch's end beside it.
    assert re.search(r"worker 0 first step done at unix time [\d.]+, after 1 step\(s\)\n", g.log(0))
    assert "worker 0 first epoch done at unix time " in g.log(0)
    summary = g.summary()
    import mlflow

    mlflow.set_tracking_uri(server.url)
    run = client.get_run(summary["runId"])
    assert len(models_of(run.info.experiment_id, run.info.run_id, server.url)) == 1
    versions = client.search_model_versions(f"name = '{name}'")
    assert [v.run_id for v in versions] == [run.info.run_id]  # registered once, from this run
    weights = mlflow.pyfunc.load_model(summary["modelUri"]).unwrap_python_model().keras_model.get_weights()
    return weights, summary["metrics"]


def test_one_two_four_workers_same_weights(mlflow_server, mlflow_client, tmp_path):
    results = {n: _train(n, mlflow_server, mlflow_client, tmp_path) for n in (1, 2, 4)}
    base_weights, base_metrics = results[1]
    for n in (2, 4):
        weights, metrics = results[n]
        worst = max(float(np.max(np.abs(a - b))) for a, b in zip(base_weights, weights, strict=True))
        assert worst <= 1e-5, f"{n} workers differ from 1 worker by {worst}"
        assert metrics["val_accuracy"] == base_metrics["val_accuracy"]
        assert metrics["accuracy"] == base_metrics["accuracy"]
