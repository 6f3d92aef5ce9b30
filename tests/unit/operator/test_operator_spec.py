import dataclasses

import pytest

from mwms_contract.trainjob import CheckpointSpec, SpecError, TrainJobSpec
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig


def test_defaults_are_applied_once_here(make_trainjob, config):
    spec = parse_trainjob(make_trainjob(replicas=2), config.spec_defaults())
    assert spec == TrainJobSpec(
        replicas=2,
        image="ghcr.io/mwms-dev/mwms-trainer:0.1.0",
        tracking_uri="http://mlflow:5000",
        experiment="mnist",
        trainer={},
        template={},
        registered_model_name=None,
        port=2222,
        checkpoint=None,
        backoff_limit=3,
        active_deadline_seconds=None,
        ttl_seconds_after_finished=None,
        clean_pod_policy="Running",
        suspend=False,
        startup_timeout_seconds=300,
    )


def test_operator_config_supplies_image_and_tracking_uri(make_trainjob):
    config = OperatorConfig(trainer_image="r/t:1", tracking_uri="http://t:5000")
    spec = parse_trainjob(make_trainjob(), config.spec_defaults())
    assert (spec.image, spec.tracking_uri) == ("r/t:1", "http://t:5000")


def test_every_field_is_read(make_trainjob, config):
    body = make_trainjob(
        replicas=4,
        image="me/trainer:2",
        port=3333,
        trainer={"dataset": "synthetic", "epochs": 5, "globalBatchSize": 64, "hiddenUnits": [8, 4]},
        mlflow={
            "trackingUri": "http://m:5000",
            "experiment": "exp",
            "registeredModelName": "cancer",
            "systemMetrics": {"periodSeconds": 5},
        },
        checkpoint={"persistentVolumeClaim": {"claimName": "ckpt"}},
        template={"metadata": {"labels": {"team": "a"}}},
        runPolicy={
            "backoffLimit": 1,
            "activeDeadlineSeconds": 600,
            "ttlSecondsAfterFinished": 60,
            "cleanPodPolicy": "All",
            "suspend": True,
            "startupTimeoutSeconds": 30,
            "containerErrorGraceSeconds": 15,
        },
    )
    spec = parse_trainjob(body, config.spec_defaults())
    assert spec.replicas == 4 and spec.image == "me/trainer:2" and spec.port == 3333
    assert spec.trainer == {"dataset": "synthetic", "epochs": 5, "globalBatchSize": 64, "hiddenUnits": [8, 4]}
    assert (spec.tracking_uri, spec.experiment, spec.registered_model_name) == (
        "http://m:5000",
        "exp",
        "cancer",
    )
    assert spec.checkpoint == CheckpointSpec(volume={"persistentVolumeClaim": {"claimName": "ckpt"}})
    assert spec.template == {"metadata": {"labels": {"team": "a"}}}
    assert (spec.backoff_limit, spec.active_deadline_seconds, spec.ttl_seconds_after_finished) == (1, 600, 60)
    assert (spec.clean_pod_policy, spec.suspend, spec.startup_timeout_seconds) == ("All", True, 30)
    assert spec.container_error_grace_seconds == 15
    assert spec.system_metrics_seconds == 5


def test_system_metrics_default_on_and_can_be_turned_off(make_trainjob, config):
    assert parse_trainjob(make_trainjob(), config.spec_defaults()).system_metrics_seconds == 15
    off = make_trainjob(mlflow={"systemMetrics": {"enabled": False, "periodSeconds": 5}})
    assert parse_trainjob(off, config.spec_defaults()).system_metrics_seconds == 0


def test_spec_is_frozen_and_does_not_share_the_body(make_trainjob, config):
    body = make_trainjob(template={"spec": {"containers": [{"name": "trainer"}]}})
    spec = parse_trainjob(body, config.spec_defaults())
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.replicas = 5  # type: ignore[misc]
    body["spec"]["template"]["spec"]["containers"][0]["name"] = "changed"
    assert spec.template["spec"]["containers"][0]["name"] == "trainer"


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        ({}, "spec.replicas", "required"),
        ({"replicas": 0}, "spec.replicas", "between 1 and 256"),
        ({"replicas": 257}, "spec.replicas", "between 1 and 256"),
        ({"replicas": "3"}, "spec.replicas", "integer"),
        ({"replicas": True}, "spec.replicas", "integer"),
        ({"replicas": 2, "port": 0}, "spec.port", "between 1 and 65535"),
        ({"replicas": 2, "image": ""}, "spec.image", "non-empty"),
        ({"replicas": 2, "trainer": []}, "spec.trainer", "object"),
        (
            {"replicas": 4, "trainer": {"globalBatchSize": 6}},
            "spec.trainer.globalBatchSize",
            "multiple of spec.replicas",
        ),
        (
            {"replicas": 2, "runPolicy": {"cleanPodPolicy": "Some"}},
            "spec.runPolicy.cleanPodPolicy",
            "Running",
        ),
        (
            {"replicas": 2, "runPolicy": {"backoffLimit": -1}},
            "spec.runPolicy.backoffLimit",
            "between 0 and 1000",
        ),
        ({"replicas": 2, "runPolicy": {"suspend": "yes"}}, "spec.runPolicy.suspend", "true or false"),
        (
            {"replicas": 2, "runPolicy": {"activeDeadlineSeconds": 0}},
            "spec.runPolicy.activeDeadlineSeconds",
            "1",
        ),
        (
            {"replicas": 2, "runPolicy": {"startupTimeoutSeconds": 0}},
            "spec.runPolicy.startupTimeoutSeconds",
            "1",
        ),
        ({"replicas": 2, "checkpoint": {}}, "spec.checkpoint", "exactly one"),
        ({"replicas": 2, "checkpoint": {"emptyDir": {}}}, "spec.checkpoint.emptyDir", "unsupported"),
        (
            {
                "replicas": 2,
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "trainer",
                                "env": [{"name": "OK", "value": "1"}, {"name": "TF_CONFIG", "value": "{}"}],
                            }
                        ]
                    }
                },
            },
            "spec.template.spec.containers[0].env[1].name",
            "TF_CONFIG is set by the operator",
        ),
        (
            {
                "replicas": 2,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "side"},
                            {"name": "trainer", "env": [{"name": "MLFLOW_TRACKING_URI", "value": "x"}]},
                        ]
                    }
                },
            },
            "spec.template.spec.containers[1].env[0].name",
            "MLFLOW_TRACKING_URI",
        ),
        ({"replicas": 2, "template": {"spec": {"containers": {}}}}, "spec.template.spec.containers", "list"),
        ({"replicas": 2, "template": {"spec": {"volumes": 5}}}, "spec.template.spec.volumes", "list"),
        ({"replicas": 2, "template": {"spec": {"volumes": [5]}}}, "spec.template.spec.volumes[0]", "object"),
        (
            {"replicas": 2, "template": {"spec": {"containers": [{"name": "trainer", "volumeMounts": 5}]}}},
            "spec.template.spec.containers[0].volumeMounts",
            "list",
        ),
        (
            {"replicas": 2, "template": {"spec": {"containers": [{"name": "trainer", "ports": ["2222"]}]}}},
            "spec.template.spec.containers[0].ports[0]",
            "object",
        ),
        (
            {
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "trainer", "env": [{"name": ["X"]}]}]}},
            },
            "spec.template.spec.containers[0].env[0].name",
            "string",
        ),
        (
            {"replicas": 2, "template": {"metadata": {"labels": {"a": 1}}}},
            "spec.template.metadata.labels.a",
            "string",
        ),
        ({"replicas": 2, "template": []}, "spec.template", "object"),
        (
            {"replicas": 2, "runPolicy": {"ttlSecondsAfterFinished": 2**62}},
            "spec.runPolicy.ttlSecondsAfterFinished",
            "between",
        ),
        (
            {"replicas": 2, "runPolicy": {"activeDeadlineSeconds": 2**62}},
            "spec.runPolicy.activeDeadlineSeconds",
            "between",
        ),
        (
            {"replicas": 2, "runPolicy": {"containerErrorGraceSeconds": -1}},
            "spec.runPolicy.containerErrorGraceSeconds",
            "between",
        ),
        (
            {"replicas": 2, "mlflow": {"systemMetrics": {"periodSeconds": 0}}},
            "spec.mlflow.systemMetrics.periodSeconds",
            "between",
        ),
        (
            {"replicas": 2, "mlflow": {"systemMetrics": {"enabled": "no"}}},
            "spec.mlflow.systemMetrics.enabled",
            "true or false",
        ),
        (
            {"replicas": 2, "runPolicy": {"startupTimeoutSeconds": 2**62}},
            "spec.runPolicy.startupTimeoutSeconds",
            "between",
        ),
        *(
            ({"replicas": 2, "checkpoint": checkpoint}, field, text)
            for checkpoint, field, text in (
                ({}, "spec.checkpoint", "exactly one of store, persistentVolumeClaim"),
                ({"everySteps": 10}, "spec.checkpoint", "exactly one of store"),
                ({"store": "run", "hostPath": {"path": "/c"}}, "spec.checkpoint", "exactly one of store"),
                ({"store": "gs://b/c"}, "spec.checkpoint.store", "s3://bucket/prefix"),
                ({"store": "s3://key:secret@b/c"}, "spec.checkpoint.store", "without credentials"),
                ({"store": "run", "everySteps": 0}, "spec.checkpoint.everySteps", "at least 1"),
                ({"store": "run", "keep": 3}, "spec.checkpoint.keep", "unsupported"),
                (
                    {"store": "run", "terminationGracePeriodSeconds": -1},
                    "spec.checkpoint.terminationGracePeriodSeconds",
                    "between",
                ),
            )
        ),
        (
            {"replicas": 2, "checkpoint": {"store": "run"}, "code": {"configMap": "c", "entrypoint": "m:f"}},
            "spec.checkpoint",
            "with spec.code give a volume",
        ),
        (
            {
                "replicas": 2,
                "checkpoint": {"store": "run", "terminationGracePeriodSeconds": 60},
                "template": {"spec": {"terminationGracePeriodSeconds": 30}},
            },
            "spec.template.spec.terminationGracePeriodSeconds",
            "set it there only",
        ),
        *(
            ({"replicas": 2, "managedBy": value}, "spec.managedBy", text)
            for value, text in (
                ("", "non-empty"),
                ("multikueue", "domain-prefixed path"),
                ("Kueue.x-k8s.io/multikueue", "domain-prefixed path"),
                ("kueue.x-k8s.io/multi kueue", "domain-prefixed path"),
                ("example.com/" + "x" * 52, "at most 63 characters"),
            )
        ),
        *(
            ({"replicas": 2, "trainer": {"dataset": "csv", "dataPath": uri}}, "spec.trainer.dataPath", text)
            for uri, text in (
                ("gs://b/data/", "gs:// is not supported"),
                ("abfs://c@acct.dfs.core.windows.net/d", "abfs:// is not supported"),
                ("hdfs://nn/data", "one of: s3://"),
                ("https://example.com/a.csv", "use a path inside the worker"),
            )
        ),
    ],
)
def test_bad_specs_name_the_field(spec, field, text, config):
    # The malformed spec is the subject: written out whole (replicas included), not from the factory.
    with pytest.raises(SpecError) as raised:
        parse_trainjob({"metadata": {"name": "j"}, "spec": spec}, config.spec_defaults())
    assert raised.value.field == field
    assert text in str(raised.value)


def test_checkpoint_stores_and_their_settings_are_read(make_trainjob, config):
    checkpoint = {"store": "s3://bucket/ckpt", "everySteps": 100, "terminationGracePeriodSeconds": 120}
    spec = parse_trainjob(make_trainjob(checkpoint=checkpoint), config.spec_defaults())
    assert spec.checkpoint == CheckpointSpec(
        store="s3://bucket/ckpt", every_steps=100, termination_grace_period_seconds=120
    )
    spec = parse_trainjob(make_trainjob(checkpoint={"store": "run"}), config.spec_defaults())
    assert spec.checkpoint == CheckpointSpec(store="run")
    volume = {"hostPath": {"path": "/c"}, "everySteps": 5}  # a volume saves within epochs too
    spec = parse_trainjob(make_trainjob(checkpoint=volume), config.spec_defaults())
    assert spec.checkpoint == CheckpointSpec(volume={"hostPath": {"path": "/c"}}, every_steps=5)


def test_reserved_names_are_allowed_in_other_containers(make_trainjob, config):
    body = make_trainjob(
        template={"spec": {"containers": [{"name": "sidecar", "env": [{"name": "TF_CONFIG"}]}]}}
    )
    assert parse_trainjob(body, config.spec_defaults()).template["spec"]["containers"][0]["name"] == "sidecar"


def test_missing_spec_names_replicas(config):
    with pytest.raises(SpecError, match="spec.replicas"):
        parse_trainjob({}, config.spec_defaults())
