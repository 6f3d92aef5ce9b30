"""The API server itself rejects malformed TrainJobs (schema, CEL), naming the field, before any operator
sees them."""

from __future__ import annotations

import json

import pytest

from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import patch_spec

# The trainer container may not set what the operator sets (TF_CONFIG, MWMS_*, MLFLOW_...).
RESERVED_ENV_TEMPLATE = {
    "spec": {"containers": [{"name": "trainer", "env": [{"name": "TF_CONFIG", "value": "{}"}]}]}
}

MALFORMED = [
    (trainjob("bad", None), "spec.replicas: Required value"),
    (trainjob("bad", 0), "spec.replicas"),
    (trainjob("bad", 257), "spec.replicas"),
    (trainjob("bad", "two"), "spec.replicas"),
    (trainjob("bad", 2, port=70000), "spec.port"),
    (trainjob("bad", 4, trainer={"globalBatchSize": 6}), "spec.trainer.globalBatchSize"),
    (trainjob("bad", 2, trainer={"dataset": "mnist"}), "spec.trainer.dataset"),
    (trainjob("bad", 2, trainer={"dataset": "csv"}), "spec.trainer.dataPath"),
    (trainjob("bad", 2, trainer={"testSize": 1.5}), "spec.trainer.testSize"),
    (trainjob("bad", 2, trainer={"learningRate": 0}), "spec.trainer.learningRate"),
    (trainjob("bad", 2, trainer={"hiddenUnits": [0]}), "spec.trainer.hiddenUnits[0]"),
    (trainjob("bad", 2, trainer={"sharding": "rows"}), "spec.trainer.sharding"),
    (trainjob("bad", 2, trainer={"sharding": "files"}), "spec.trainer.sharding files needs"),
    (trainjob("bad", 2, trainer={"epochz": 3}), 'unknown field "spec.trainer.epochz"'),
    (trainjob("bad", 2, runPolicy={"cleanPodPolicy": "Sometimes"}), "spec.runPolicy.cleanPodPolicy"),
    (trainjob("bad", 2, runPolicy={"backoffLimit": -1}), "spec.runPolicy.backoffLimit"),
    (trainjob("bad", 2, runPolicy={"activeDeadlineSeconds": 0}), "spec.runPolicy.activeDeadlineSeconds"),
    (trainjob("bad", 2, scheduling={"gang": "Sometimes"}), "spec.scheduling.gang"),
    (trainjob("bad", 2, scheduling={"gang": False}), "spec.scheduling.gang"),  # YAML 1.1's unquoted Off
    (trainjob("bad", 2, checkpoint={}), "spec.checkpoint"),
    (
        trainjob("bad", 2, checkpoint={"persistentVolumeClaim": {}}),
        "spec.checkpoint.persistentVolumeClaim.claimName",
    ),
    (trainjob("bad", 2, checkpoint={"store": "run", "nfs": {"server": "s", "path": "/"}}), "spec.checkpoint"),
    (trainjob("bad", 2, checkpoint={"store": "gs://b/c"}), "spec.checkpoint.store"),
    (trainjob("bad", 2, checkpoint={"store": "s3://key:secret@b/c"}), "spec.checkpoint.store"),
    (trainjob("bad", 2, checkpoint={"store": "run", "everySteps": 0}), "spec.checkpoint.everySteps"),
    (
        trainjob("bad", 2, checkpoint={"store": "run"}, code={"configMap": "c", "entrypoint": "m:f"}),
        "spec.checkpoint: store, everySteps and terminationGracePeriodSeconds work with the built-in fit",
    ),
    (trainjob("bad", 2, mlflow={"experiment": ""}), "spec.mlflow.experiment"),
    (trainjob("x" * 53, 2), "metadata.name"),
    (trainjob("9lives", 2), "metadata.name"),
    (trainjob("bad", 2, template=RESERVED_ENV_TEMPLATE), "spec.template.spec.containers[0].env"),
]


@pytest.mark.parametrize(("manifest", "named"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_trainjobs_are_rejected_naming_the_field(crd, kubectl, namespace, manifest, named):
    result = kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0, f"accepted: {manifest}"
    assert named in result.stderr, result.stderr


IMMUTABLE = [
    ({"replicas": 3}, "spec.replicas is immutable"),
    ({"image": "other:1"}, "spec.image is immutable"),
    ({"port": 3333}, "spec.port is immutable"),
    ({"trainer": {"epochs": 3}}, "spec.trainer is immutable"),
    ({"mlflow": {"experiment": "other"}}, "spec.mlflow is immutable"),
    ({"checkpoint": {"hostPath": {"path": "/tmp"}}}, "spec.checkpoint is immutable"),
    ({"checkpoint": {"store": "run", "everySteps": 10}}, "spec.checkpoint is immutable"),
]


def test_training_settings_are_immutable_and_suspend_is_not(crd, kubectl, namespace):
    kubectl.apply(
        trainjob("fixed", 2, trainer={"epochs": 2}, runPolicy={"suspend": True}),
        "-n",
        namespace,
    )
    for change, message in IMMUTABLE:
        result = patch_spec(kubectl, namespace, "fixed", change, check=False)
        assert result.returncode != 0 and message in result.stderr, (change, result.stderr)
    patch_spec(kubectl, namespace, "fixed", {"runPolicy": {"suspend": False, "backoffLimit": 5}})
    kubectl("delete", "trainjob", "fixed", "-n", namespace, "--wait=false")


def test_a_template_edit_that_sets_reserved_env_is_refused_naming_the_field(crd, kubectl, namespace):
    kubectl.apply(trainjob("edited", 2, runPolicy={"suspend": True}), "-n", namespace)
    result = patch_spec(kubectl, namespace, "edited", {"template": RESERVED_ENV_TEMPLATE}, check=False)
    assert result.returncode != 0, "accepted"
    assert "spec.template.spec.containers[0].env" in result.stderr and "TF_CONFIG" in result.stderr
    kubectl("delete", "trainjob", "edited", "-n", namespace, "--wait=false")


def test_defaults_are_applied_by_the_api_server(crd, kubectl, namespace):
    kubectl.apply(trainjob("defaults", 2, runPolicy={"suspend": True}), "-n", namespace)
    spec = kubectl.json("get", "trainjob", "defaults", "-n", namespace)["spec"]
    assert spec["port"] == 2222
    assert spec["runPolicy"] == {
        "backoffLimit": 3,
        "cleanPodPolicy": "Running",
        "suspend": True,
        "startupTimeoutSeconds": 300,
        "containerErrorGraceSeconds": 120,
    }
    assert "trainer" not in spec  # the trainer owns those defaults
    kubectl("delete", "trainjob", "defaults", "-n", namespace, "--wait=false")
