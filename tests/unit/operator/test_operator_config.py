import dataclasses
from pathlib import Path

import pytest

from mwms_operator.config import ConfigError, OperatorConfig

VERSION = (Path(__file__).resolve().parents[3] / "VERSION").read_text().strip()


def test_defaults_match_the_documented_settings():
    config = OperatorConfig.from_env({})
    assert config == OperatorConfig()
    # The trainer of the operator's own release, whose version is the repository's VERSION file.
    assert config.trainer_image == f"ghcr.io/mwms-dev/mwms-trainer:{VERSION}"
    assert config.tracking_uri == "http://mlflow:5000"
    assert config.cluster_domain == ""
    assert config.watch_namespaces == ()
    assert (config.metrics_port, config.health_port) == (8000, 8080)
    assert config.progress_interval_seconds == 15
    assert config.log_level == "INFO"


def test_every_setting_is_read():
    config = OperatorConfig.from_env(
        {
            "MWMS_TRAINER_IMAGE": "registry.local/trainer:dev",
            "MWMS_TRACKING_URI": "http://tracking:5000",
            "MWMS_CLUSTER_DOMAIN": "cluster.local",
            "MWMS_WATCH_NAMESPACES": " team-a, ,team-b ",
            "MWMS_METRICS_PORT": "9100",
            "MWMS_HEALTH_PORT": "9101",
            "MWMS_PROGRESS_INTERVAL_SECONDS": "2.5",
            "MWMS_RECONCILE_INTERVAL_SECONDS": "1",
            "MWMS_LOG_LEVEL": "debug",
        }
    )
    assert config == OperatorConfig(
        trainer_image="registry.local/trainer:dev",
        tracking_uri="http://tracking:5000",
        cluster_domain="cluster.local",
        watch_namespaces=("team-a", "team-b"),
        metrics_port=9100,
        health_port=9101,
        progress_interval_seconds=2.5,
        reconcile_interval_seconds=1.0,
        log_level="DEBUG",
    )


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        OperatorConfig().metrics_port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"MWMS_METRICS_PORT": "http"}, "MWMS_METRICS_PORT"),
        ({"MWMS_HEALTH_PORT": "70000"}, "MWMS_HEALTH_PORT"),
        ({"MWMS_HEALTH_PORT": "0"}, "MWMS_HEALTH_PORT"),
        ({"MWMS_PROGRESS_INTERVAL_SECONDS": "soon"}, "MWMS_PROGRESS_INTERVAL_SECONDS"),
        ({"MWMS_RECONCILE_INTERVAL_SECONDS": "0"}, "MWMS_RECONCILE_INTERVAL_SECONDS"),
        ({"MWMS_LOG_LEVEL": "LOUD"}, "MWMS_LOG_LEVEL"),
    ],
)
def test_bad_settings_name_the_variable(env, named):
    with pytest.raises(ConfigError, match=named):
        OperatorConfig.from_env(env)
