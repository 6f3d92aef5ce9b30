"""trainer_config.py: MWMS_TRAINER_CONFIG defaults (the seed's) and validation naming the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mwms_contract import names
from mwms_contract.tf_config import tf_config
from mwms_trainer.errors import ConfigError
from mwms_trainer.trainer_config import DATASETS, SHARDINGS, TrainerConfig, load, parse_trainer_config

S = "MWMS_TRAINER_CONFIG."


def test_defaults_reproduce_the_seed():
    cfg = parse_trainer_config(None)
    assert cfg == parse_trainer_config("{}") == TrainerConfig()
    assert (cfg.dataset, cfg.testSize, cfg.seed, cfg.learningRate, cfg.hiddenUnits) == (
        "breast_cancer",
        0.3,
        42,
        0.001,
        (),
    )
    assert cfg.globalBatchSize == 32
    assert cfg.epochs > 1  # the seed's one epoch underfits (docs/migration.md)


def test_every_setting_is_read():
    raw = {
        "dataset": "csv", "seed": 7, "epochs": 3, "globalBatchSize": 64, "learningRate": 0.01,
        "testSize": 0.2, "hiddenUnits": [16, 8], "syntheticSamples": 500, "syntheticFeatures": 5,
        "dataPath": "/d.csv", "labelColumn": "y", "sharding": "files",
    }  # fmt: skip
    cfg = parse_trainer_config(json.dumps(raw), num_workers=4)
    assert cfg.as_params() == raw


@pytest.mark.parametrize(
    ("raw", "workers", "setting"),
    [
        ("[1]", 1, "MWMS_TRAINER_CONFIG"),
        ("{bad", 1, "MWMS_TRAINER_CONFIG"),
        ({"dataset": "mnist"}, 1, S + "dataset"),
        ({"epochs": -1}, 1, S + "epochs"),
        ({"epochs": 0}, 1, S + "epochs"),
        ({"epochs": 2.5}, 1, S + "epochs"),
        ({"epochs": True}, 1, S + "epochs"),
        ({"seed": -3}, 1, S + "seed"),
        ({"globalBatchSize": 1}, 2, S + "globalBatchSize"),
        ({"globalBatchSize": 30}, 4, S + "globalBatchSize"),
        ({"learningRate": 0}, 1, S + "learningRate"),
        ({"learningRate": "fast"}, 1, S + "learningRate"),
        ({"testSize": 1.0}, 1, S + "testSize"),
        ({"testSize": 0}, 1, S + "testSize"),
        ({"hiddenUnits": [8, 0]}, 1, S + "hiddenUnits"),
        ({"hiddenUnits": 8}, 1, S + "hiddenUnits"),
        ({"dataset": "csv"}, 1, S + "dataPath"),
        ({"dataset": "parquet", "dataPath": ""}, 1, S + "dataPath"),
        ({"labelColumn": ""}, 1, S + "labelColumn"),
        ({"sharding": "rows"}, 1, S + "sharding"),
        ({"sharding": "files"}, 1, S + "sharding"),  # breast_cancer has no files to shard
        ({"syntheticSamples": 3}, 1, S + "syntheticSamples"),
        ({"epoch": 5}, 1, S + "epoch"),  # a typo is an error, not a silent default
    ],
)
def test_invalid_settings_name_the_setting(raw, workers, setting):
    text = raw if isinstance(raw, str) else json.dumps(raw)
    with pytest.raises(ConfigError) as err:
        parse_trainer_config(text, num_workers=workers)
    assert err.value.setting == setting
    assert err.value.exit_code == names.EXIT_INVALID_CONFIG


def _env(**extra):
    env = {
        names.ENV_TF_CONFIG: json.dumps(tf_config(["a:1", "b:1"], 1)),
        names.ENV_TRACKING_URI: "http://mlflow:5000",
        names.ENV_JOB_NAME: "job",
        names.ENV_JOB_NAMESPACE: "ns",
        names.ENV_JOB_UID: "uid-1",
        names.ENV_RESTART_COUNT: "2",
        names.ENV_EXPERIMENT_NAME: "exp",
    }
    env.update(extra)
    return env


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, 300),  # a hand-started group: the startup timeout also bounds the wait for peers
        ({"MWMS_STARTUP_TIMEOUT_SECONDS": "60"}, 60),
        ({"MWMS_STARTUP_TIMEOUT_SECONDS": "60", "MWMS_PEER_WAIT_SECONDS": "0"}, None),  # in a pod: no limit
        ({"MWMS_PEER_WAIT_SECONDS": "30"}, 30),
    ],
)
def test_the_wait_for_peers_is_bounded_by_the_startup_timeout_unless_the_operator_says_otherwise(
    extra, expected
):
    assert load(_env(**extra)).peer_wait_seconds == expected


def test_load_reads_the_operator_environment():
    s = load(_env(MWMS_CHECKPOINT_DIR="/mwms/checkpoint", MWMS_STARTUP_TIMEOUT_SECONDS="60"))
    assert (s.cluster.rank, s.cluster.num_workers) == (1, 2)
    assert (s.job_name, s.job_namespace, s.job_uid, s.restart_count) == ("job", "ns", "uid-1", 2)
    assert (s.experiment_name, s.tracking_uri, s.checkpoint_dir) == (
        "exp",
        "http://mlflow:5000",
        "/mwms/checkpoint",
    )
    assert s.startup_timeout_seconds == 60
    assert s.termination_log == "/dev/termination-log"
    assert s.registered_model_name is None
    assert (s.checkpoint_store, s.checkpoint_every_steps) == (None, None)  # a volume, saved at epochs' ends
    store = {names.ENV_CHECKPOINT_STORE: "s3://b/p", names.ENV_CHECKPOINT_EVERY_STEPS: "50"}
    s = load(_env(MWMS_CHECKPOINT_DIR="/c", **store))
    assert (s.checkpoint_store, s.checkpoint_every_steps) == ("s3://b/p", 50)


@pytest.mark.parametrize(
    ("extra", "setting"),
    [
        ({names.ENV_TRACKING_URI: ""}, names.ENV_TRACKING_URI),
        ({names.ENV_RESTART_COUNT: "x"}, names.ENV_RESTART_COUNT),
        ({names.ENV_STARTUP_TIMEOUT: "0"}, names.ENV_STARTUP_TIMEOUT),
        ({names.ENV_PEER_WAIT: "-1"}, names.ENV_PEER_WAIT),
        ({names.ENV_TRAINER_CONFIG: '{"globalBatchSize": 3}'}, S + "globalBatchSize"),  # 2 workers
        ({names.ENV_CHECKPOINT_STORE: "run"}, names.ENV_CHECKPOINT_DIR),  # a store needs a local folder
        (
            {names.ENV_CHECKPOINT_STORE: "gs://b/c", names.ENV_CHECKPOINT_DIR: "/c"},
            names.ENV_CHECKPOINT_STORE,
        ),
        (
            {names.ENV_CHECKPOINT_STORE: "s3://k:s@b/c", names.ENV_CHECKPOINT_DIR: "/c"},
            names.ENV_CHECKPOINT_STORE,
        ),
        ({names.ENV_CHECKPOINT_EVERY_STEPS: "0"}, names.ENV_CHECKPOINT_EVERY_STEPS),
    ],
)
def test_load_rejects_bad_environment(extra, setting):
    with pytest.raises(ConfigError) as err:
        load(_env(**extra))
    assert err.value.setting == setting


@pytest.mark.parametrize(("workers", "expected"), [(1, 32), (2, 32), (3, 33), (4, 32), (5, 35), (7, 35)])
def test_default_global_batch_is_rounded_up_to_a_multiple_of_the_workers(workers, expected):
    assert parse_trainer_config(None, num_workers=workers).globalBatchSize == expected


def test_the_crd_declares_every_trainer_setting_with_the_trainers_choices():
    """A setting missing from the CRD would be pruned by the API server: a silent fall back to a default."""
    import yaml

    crd = yaml.safe_load((Path(__file__).resolve().parents[3] / "manifests" / "crd.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    trainer = spec["properties"]["trainer"]["properties"]
    assert set(trainer) == set(TrainerConfig.__dataclass_fields__)
    assert trainer["dataset"]["enum"] == list(DATASETS)
    assert trainer["sharding"]["enum"] == list(SHARDINGS)
