"""Invalid settings exit 2 on every worker, name the setting, and write nothing to MLflow."""

from __future__ import annotations

import json

import pytest
from tf_support import group, runs_of, trainjob_spec

from mwms_contract import names


@pytest.mark.parametrize(
    ("trainer", "env", "setting"),
    [
        ({"dataset": "mnist"}, {}, "MWMS_TRAINER_CONFIG.dataset"),
        ({"epochs": -1}, {}, "MWMS_TRAINER_CONFIG.epochs"),
        ({"globalBatchSize": 1}, {}, "MWMS_TRAINER_CONFIG.globalBatchSize"),
        ({}, {"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"]'}, "TF_CONFIG"),
        (
            {},
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"index": 5}})},
            "TF_CONFIG",
        ),
    ],
    ids=["unknown-dataset", "negative-epochs", "batch-below-workers", "malformed-tf-config", "bad-task"],
)
def test_invalid_setting_exits_2_and_names_it(mlflow_server, mlflow_client, tmp_path, trainer, env, setting):
    name = f"invalid-{tmp_path.name}".lower().replace("_", "-")[:60]
    hosts = ["127.0.0.1:1", "127.0.0.1:2"]
    g = group(
        trainjob_spec(name, 2, {}), mlflow_server.url, tmp_path
    )  # two workers, as the operator starts them
    for i, worker_env in enumerate(g.envs):
        worker_env[names.ENV_TF_CONFIG] = json.dumps(
            {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        )
        worker_env[names.ENV_TRAINER_CONFIG] = json.dumps(trainer)
        worker_env.update(env)
    codes = g.start().wait(timeout=600)
    assert codes == {0: names.EXIT_INVALID_CONFIG, 1: names.EXIT_INVALID_CONFIG}, g.log(0)
    for i in range(2):
        message = g.termination(i)
        assert message.startswith(f"invalid configuration: {setting}"), message
        assert setting in g.log(i)
    assert runs_of(mlflow_client, name) == []
    assert mlflow_client.get_experiment_by_name(name) is None
