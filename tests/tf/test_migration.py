"""docs/migration.md: the seed's train(), ported, run by MirroredStrategyRunner: one run, one model."""

from __future__ import annotations

from tf_support import models_of, runs_of

from mwms_trainer import MirroredStrategyRunner


def test_ported_seed_gives_one_run_and_one_model(mlflow_server, mlflow_client, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "ported-seed")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    import ported_seed  # here, not at collection: it imports TensorFlow

    result = MirroredStrategyRunner(num_slots=2, use_custom_strategy=True).run(ported_seed.train, epochs=3)
    assert set(result) >= {"loss", "accuracy", "val_loss", "val_accuracy"}  # the chief's return value
    runs = runs_of(mlflow_client, "ported-seed")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert run.data.tags["mwms.dev/job-uid"]
    assert run.data.params["replicas"] == "2", "the key the built-in trainer logs, so the two paths compare"
    assert sorted(m.step for m in mlflow_client.get_metric_history(run.info.run_id, "loss")) == [0, 1, 2]
    models = models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)
    assert [m.name for m in models] == ["mymodel"]
