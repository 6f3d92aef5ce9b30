"""A group that cannot form ends, and says why, on the real node: the real trainer image's workers run, but
their pods resolve no names (dnsPolicy None, the only nameserver 127.0.0.1 in the pod's own network namespace,
where nothing listens: every query is refused at once, and no packet leaves the pod). Each worker's readiness
probe prints its last reason, the kubelet puts it in an `Unhealthy` event, and at startupTimeoutSeconds the
operator (a local process) fails the job naming both workers and that reason."""

from __future__ import annotations

import json

import pytest

from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition

STARTUP_TIMEOUT = 60  # the chief imports TensorFlow and opens its MLflow run before it waits for its peer


@pytest.fixture(scope="module")
def pod_mlflow(real_cluster, tmp_path_factory):
    """The chief opens its MLflow run before the rendezvous: a server the pods reach by IP (no DNS there)."""
    host = real_cluster.pod_api_host
    with MlflowServer(tmp_path_factory.mktemp("mlflow"), host=host, allowed_hosts=[host]) as server:
        yield server


def test_workers_that_run_but_cannot_resolve_each_other_fail_with_startup_timeout_naming_them_and_why(
    node_operator, node_kubectl, node_namespace, node_trainer_image, pod_mlflow
):
    job = trainjob(
        "nodns",
        2,
        image=node_trainer_image,
        mlflow={"trackingUri": pod_mlflow.url},
        runPolicy={"startupTimeoutSeconds": STARTUP_TIMEOUT, "backoffLimit": 0},
        container={"imagePullPolicy": "IfNotPresent"},
        template={
            "spec": {
                "dnsPolicy": "None",
                "dnsConfig": {
                    "nameservers": ["127.0.0.1"],
                    "options": [{"name": "attempts", "value": "1"}, {"name": "timeout", "value": "1"}],
                },
            }
        },
    )
    node_kubectl.apply(job, "-n", node_namespace)
    # A wait deadline, not a timing assert: the clock starts once a worker runs.
    done = node_kubectl(
        "wait", "--for=condition=Failed", "trainjob/nodns", "-n", node_namespace,
        f"--timeout={STARTUP_TIMEOUT + 240}s", timeout=STARTUP_TIMEOUT + 260, check=False,
    )  # fmt: skip
    job = node_kubectl.json("get", "trainjob", "nodns", "-n", node_namespace)
    operator_log = node_operator.log.read_text()[-3000:]
    assert done.returncode == 0, json.dumps(job.get("status"), indent=1) + operator_log
    failed = condition(job, "Failed")
    assert failed.reason == "StartupTimeout", failed
    message = failed.message
    assert f"not every worker joined the group within {STARTUP_TIMEOUT}s" in message, message
    for me, peer in ((0, 1), (1, 0)):
        said = (
            f"worker {me} (nodns-worker-{me}): Unhealthy: Readiness probe failed: waiting for peers: "
            f"worker {peer} (nodns-worker-{peer}.nodns.{node_namespace}.svc"
        )
        assert said in message, message
    assert message.count("name does not resolve") == 2, message
    assert job["status"]["restarts"] == 0
