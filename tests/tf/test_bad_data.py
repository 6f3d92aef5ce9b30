"""Bad data fails clearly: non-finite inputs exit 2 on every worker; a diverged fit fails, logs no model."""

from __future__ import annotations

from tf_support import HANG_SECONDS, group, models_of, runs_of, trainjob_spec

from mwms_contract import names


def test_nan_in_a_csv_exits_2_naming_the_column_and_rows(mlflow_server, mlflow_client, tmp_path):
    path = tmp_path / "d.csv"
    rows = ["a,b,label"] + [f"{i},{i % 7},{i % 2}" for i in range(100)] + [",1,0", "nan,2,1"]
    path.write_text("\n".join(rows))
    trainer = {"dataset": "csv", "dataPath": str(path), "epochs": 1, "globalBatchSize": 10}
    g = group(trainjob_spec("nan-input", 2, trainer), mlflow_server.url, tmp_path).start()
    assert g.wait(timeout=600) == {0: names.EXIT_INVALID_CONFIG, 1: names.EXIT_INVALID_CONFIG}
    for i in (0, 1):
        message = g.termination(i)
        assert message.startswith("invalid configuration: MWMS_TRAINER_CONFIG.dataPath: 2 of 102 rows"), (
            message
        )
        assert "in column(s) 'a';" in message
    assert runs_of(mlflow_client, "nan-input") == []


def test_a_diverging_fit_fails_permanently_naming_the_epoch(mlflow_server, mlflow_client, tmp_path):
    trainer = {"epochs": 5, "learningRate": 1e38, "hiddenUnits": [16]}
    g = group(trainjob_spec("diverges", 2, trainer), mlflow_server.url, tmp_path).start()
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == {0: names.EXIT_FAILURE, 1: names.EXIT_FAILURE}, g.log(0)[-3000:]
    for i in (0, 1):
        message = g.termination(i)
        assert message.startswith("failed: the loss became nan in epoch "), message
        assert "of 5: the fit diverged" in message
    [run] = runs_of(mlflow_client, "diverges")
    assert run.info.status == "FAILED"
    assert models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url) == []
