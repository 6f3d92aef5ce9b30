"""dataPath in a bucket on the real control plane: the operator's TrainJob, real TensorFlow workers on the
real node, a real S3-compatible server (the Versity S3 Gateway) on the pod bridge's gateway, the credentials
from a Secret through spec.template. They never show in the TrainJob, its events or the operator's log; a
wrong one fails the job at once as WorkerFailed naming the URI, and another scheme is refused as
InvalidSpec."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mwms_kit.s3_server import BUCKET, S3Server, env_from_secret, make_secret
from mwms_kit.tables import write_parts
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition, get_job, wait_condition

# The S3 server may still be building in `make test`'s background: the module's fixtures wait on its build
# lock, so the timeout counts the tests themselves only.
pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(func_only=True)]


@pytest.fixture(scope="module")
def operator_env(mlflow_uri: str) -> dict[str, str]:
    return {"MWMS_TRACKING_URI": mlflow_uri}


@pytest.fixture(scope="module")
def s3(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The S3 server where pods reach it: the pod bridge's gateway."""
    with S3Server(tmp_path_factory.mktemp("s3"), host=cluster.pod_api_host) as server:
        yield server


@pytest.fixture(scope="module")
def table(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 4-file Spark-style parquet table in the bucket."""
    local = tmp_path_factory.mktemp("table") / "table.parquet"
    write_parts(local, files=4)
    return s3.upload(local, f"{BUCKET}/{uuid.uuid4().hex[:8]}/table.parquet") + "/"


def s3_trainjob(name: str, data_path: str, s3: S3Server, secret: str) -> dict[str, Any]:
    """A 2-worker TrainJob reading `data_path`, its S3 credentials from Secret `secret`."""
    return trainjob(
        name,
        2,
        trainer={
            "dataset": "parquet",
            "dataPath": data_path,
            "sharding": "files",
            "epochs": 2,
            "globalBatchSize": 32,
            "testSize": 0.25,
        },
        mlflow={"experiment": f"{name}-{uuid.uuid4().hex[:6]}"},
        env=env_from_secret(secret, s3.endpoint),
    )


def seen_by_users(kubectl: Any, operator: Any, namespace: str, name: str) -> str:
    return "\n".join(
        [
            operator.log(),
            kubectl("get", "trainjob", name, "-n", namespace, "-o", "yaml").stdout,
            kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout,
        ]
    )


def test_workers_read_the_bucket_with_credentials_from_a_secret(operator, kubectl, namespace, s3, table):
    make_secret(kubectl, namespace, "s3-credentials", s3.access_key, s3.secret_key)
    kubectl.apply(s3_trainjob("from-bucket", table, s3, "s3-credentials"), "-n", namespace)
    wait_condition(kubectl, namespace, "from-bucket", "Succeeded", timeout=900)
    status = kubectl.json("get", "trainjob", "from-bucket", "-n", namespace)["status"]
    assert status["mlflow"]["modelUri"].startswith("models:/")
    seen = seen_by_users(kubectl, operator, namespace, "from-bucket")
    assert s3.access_key not in seen and s3.secret_key not in seen


def test_a_wrong_secret_key_fails_the_job_at_once_naming_the_uri_not_the_key(
    operator, kubectl, namespace, s3, table, wait_for
):
    wrong = f"wrong-{uuid.uuid4().hex}"
    make_secret(kubectl, namespace, "s3-wrong", s3.access_key, wrong)
    kubectl.apply(s3_trainjob("wrong-key", table, s3, "s3-wrong"), "-n", namespace)

    def failed() -> dict[str, Any] | None:
        job = get_job(kubectl, namespace, "wrong-key")
        return job["status"] if job.get("status", {}).get("phase") == "Failed" else None

    status = wait_for(failed, timeout=600, interval=1, what="the TrainJob to fail")
    failure = condition({"status": status}, "Failed")
    assert failure.reason == "WorkerFailed"
    assert table in failure.message and "credentials" in failure.message
    assert status.get("restarts", 0) == 0  # permanent: no restart of the group
    seen = seen_by_users(kubectl, operator, namespace, "wrong-key")
    assert wrong not in seen and s3.secret_key not in seen


def test_another_scheme_is_refused_before_any_pod(operator, kubectl, namespace, s3):
    job = s3_trainjob("gcs", "gs://bucket/table/", s3, "unused")
    refused = kubectl.apply(job, "-n", namespace, check=False)
    assert refused.returncode != 0
    assert "only s3:// URIs are supported" in refused.stderr
