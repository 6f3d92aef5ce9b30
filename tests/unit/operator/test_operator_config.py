import dataclasses
from pathlib import Path

import pytest

from mwms_operator.kube.leader import Timing
from mwms_operator.settings import ConfigError, OperatorConfig

VERSION = (Path(__file__).resolve().parents[3] / "VERSION").read_text().strip()
ELECTION = {"MWMS_LEADER_ELECTION": "true", "MWMS_LEADER_ELECTION_NAMESPACE": "mwms-system"}


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
    assert config.api_threads == 32
    assert not config.leader_election  # a process started by hand is the only operator


def test_leader_election_settings_are_read():
    config = OperatorConfig.from_env({**ELECTION, "MWMS_LEADER_ELECTION_LEASE_SECONDS": "30"})
    assert (config.leader_election, config.leader_election_namespace) == (True, "mwms-system")
    assert config.leader_election_timing == Timing(lease_duration=30, renew_deadline=10, retry_period=2)


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
            "MWMS_API_THREADS": "64",
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
        api_threads=64,
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
        ({"MWMS_API_THREADS": "0"}, "MWMS_API_THREADS"),
        ({"MWMS_API_THREADS": "many"}, "MWMS_API_THREADS"),
        ({"MWMS_ALLOWED_TRACKING_URIS": "mlflow.example:5000"}, "MWMS_ALLOWED_TRACKING_URIS"),
        ({"MWMS_ALLOWED_TRACKING_URIS": "file:///mlruns"}, "MWMS_ALLOWED_TRACKING_URIS"),
        ({"MWMS_ALLOWED_TRACKING_URIS": "http://host:port"}, "MWMS_ALLOWED_TRACKING_URIS"),
        ({"MWMS_ALLOWED_TRACKING_URIS": "http://mlflow:5000/base?x=1"}, "MWMS_ALLOWED_TRACKING_URIS"),
        ({"MWMS_TRACKING_URI": "http://mlflow:5000/?token=x"}, "MWMS_TRACKING_URI"),
        ({"MWMS_TRACKING_USERNAME": "ada"}, "MWMS_TRACKING_PASSWORD"),
        ({"MWMS_TRACKING_PASSWORD": "pw"}, "MWMS_TRACKING_USERNAME"),
        (
            {"MWMS_TRACKING_TOKEN": "t", "MWMS_TRACKING_USERNAME": "u", "MWMS_TRACKING_PASSWORD": "p"},
            "not both",
        ),
        ({"MWMS_LEADER_ELECTION": "yes"}, "MWMS_LEADER_ELECTION="),
        ({"MWMS_LEADER_ELECTION": "true"}, "MWMS_LEADER_ELECTION_NAMESPACE"),
        (
            {**ELECTION, "MWMS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "15"},
            "MWMS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS < MWMS_LEADER_ELECTION_LEASE_SECONDS",
        ),
        ({**ELECTION, "MWMS_LEADER_ELECTION_RETRY_SECONDS": "soon"}, "MWMS_LEADER_ELECTION_RETRY_SECONDS"),
    ],
)
def test_bad_settings_name_the_variable(env, named):
    with pytest.raises(ConfigError, match=named):
        OperatorConfig.from_env(env)


def test_allowed_tracking_servers_are_the_operators_own_and_the_listed_ones():
    config = OperatorConfig.from_env(
        {
            "MWMS_TRACKING_URI": "http://mlflow.mwms-system.svc:5000",
            "MWMS_ALLOWED_TRACKING_URIS": " https://MLflow.Team-A.example , http://10.0.0.7:8080/prefix ",
        }
    )
    assert config.allowed_tracking_uris == ("https://MLflow.Team-A.example", "http://10.0.0.7:8080/prefix")
    access = config.tracking_access()
    allowed = [
        "http://mlflow.mwms-system.svc:5000",
        "http://mlflow.mwms-system.svc:5000/",
        "https://mlflow.team-a.example",
        "https://mlflow.team-a.example:443",  # the default port, spelt out
        "http://10.0.0.7:8080/prefix/",
    ]
    refused = [
        "http://mlflow.mwms-system.svc:5001",  # another port
        "https://mlflow.mwms-system.svc:5000",  # another scheme
        "http://mlflow.mwms-system.svc:5000/some/path",  # another path: the base is pinned
        "http://mlflow.mwms-system.svc:5000/?x=1",  # a query the operator would send
        "https://mlflow.team-a.example:443/x",
        "http://10.0.0.7:8080",  # the allowed entry is /prefix only
        "http://10.0.0.7:8080/prefix/../admin",
        "http://mlflow.team-a.example",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.7:8080@169.254.169.254/",  # userinfo that looks like an allowed host
        "http://kubernetes.default.svc",
        "file:///etc/passwd",
        "databricks",
        "http://mlflow.mwms-system.svc:notaport",
    ]
    assert [uri for uri in allowed if not access.allows(uri)] == []
    assert [uri for uri in refused if access.allows(uri)] == []


def test_a_star_allows_every_http_server_and_nothing_else():
    access = OperatorConfig.from_env({"MWMS_ALLOWED_TRACKING_URIS": "*"}).tracking_access()
    assert access.allows("http://anything.example:1234")
    assert access.server("http://anything.example:1234/base/") == "http://anything.example:1234/base"
    assert not access.allows("http://anything.example:1234/base?x=1")  # a query is never sent
    assert not access.allows("file:///etc/passwd")


def test_by_default_only_the_operators_tracking_server_is_allowed():
    access = OperatorConfig.from_env({}).tracking_access()
    assert access.allows("http://mlflow:5000")
    assert not access.allows("http://mlflow.other-namespace.svc:5000")


def test_credentials_go_to_the_operators_own_server_only():
    config = OperatorConfig.from_env(
        {
            "MWMS_TRACKING_URI": "https://mlflow.example",
            "MWMS_ALLOWED_TRACKING_URIS": "https://other.example",
            "MWMS_TRACKING_TOKEN": " s3cr3t-token\n",
        }
    )
    access = config.tracking_access()
    assert access.headers("https://mlflow.example/") == {"Authorization": "Bearer s3cr3t-token"}
    assert access.headers("https://other.example") == {}
    assert access.headers("https://mlflow.example/elsewhere") == {}  # the same host at another path


def test_username_and_password_become_basic_auth():
    config = OperatorConfig.from_env(
        {
            "MWMS_TRACKING_URI": "http://mlflow:5000",
            "MWMS_TRACKING_USERNAME": "ada",
            "MWMS_TRACKING_PASSWORD": "pa:ss",
        }
    )
    # base64("ada:pa:ss"), as MLflow's client (requests' HTTPBasicAuth) sends it
    assert config.tracking_access().headers("http://mlflow:5000") == {"Authorization": "Basic YWRhOnBhOnNz"}


def test_credentials_never_show_in_the_logged_settings():
    """main() logs the whole config at startup."""
    config = OperatorConfig.from_env(
        {"MWMS_TRACKING_USERNAME": "ada-the-user", "MWMS_TRACKING_PASSWORD": "pw-1234567"}
    )
    shown = f"{config} {config!r} {config.tracking_access()!r}"
    assert "ada-the-user" not in shown and "pw-1234567" not in shown
    assert "username/password" in shown
