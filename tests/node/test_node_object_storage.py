"""Object storage on the real node, as users deploy it: a real S3-compatible server (the Versity S3 Gateway)
on the pod bridge's gateway; the seed job's breast-cancer data as a Spark-style parquet table in a bucket,
read by 4 trainer containers with the credentials from a Secret through spec.template; the chart's bundled
MLflow (our trainer image, which has boto3) keeping artifacts in the bucket (`mlflow.artifacts.s3.*`), so the
chief's model goes through MLflow's artifact proxy into the bucket and loads back on the host through it.
The credentials never show in the TrainJob, its events or the MLflow run.

The chart installed for the tier (node_chain) is upgraded with the S3 values for this module and put back
afterwards: one operator per cluster, so a second release cannot run next to it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mwms_dev.chain import SEED_SAMPLE, check_mlflow, runs_of_job, score_model
from mwms_kit.s3_server import BUCKET, S3Server, env_from_secret, make_secret

pytestmark = [
    # The S3 server may still be building in `make test`'s background (hack/ci/run-tests.py): fixtures wait
    # on its build lock.
    pytest.mark.timeout(1500, func_only=True),
]

MLFLOW_SECRET = "mlflow-s3"
ARTIFACTS = f"{BUCKET}/mlflow"


@pytest.fixture(scope="module")
def s3(real_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The S3 server where pods reach it: the pod bridge's gateway."""
    with S3Server(tmp_path_factory.mktemp("s3"), host=real_cluster.pod_api_host) as server:
        yield server


@pytest.fixture(scope="module")
def s3_chain(node_chain: Any, node_kubectl: Any, s3: S3Server) -> Iterator[Any]:
    """node_chain with its MLflow's artifacts in the bucket; the tier's own values again afterwards."""
    namespace = node_chain.operator_namespace
    make_secret(node_kubectl, namespace, MLFLOW_SECRET, s3.access_key, s3.secret_key)
    values = [
        f"mlflow.artifacts.s3.bucket={ARTIFACTS}",
        f"mlflow.artifacts.s3.endpoint={s3.endpoint}",
        f"mlflow.artifacts.s3.existingSecret={MLFLOW_SECRET}",
    ]
    chain = dataclasses.replace(node_chain, helm_values=[*node_chain.helm_values, *values])
    try:
        chain.install_chart()
        yield chain
    finally:
        node_chain.install_chart()  # the other node tests' MLflow: artifacts on its volume again
        node_kubectl("delete", "secret", MLFLOW_SECRET, "-n", namespace, check=False)


def breast_cancer_parts(directory: Path, files: int) -> Path:
    """The seed job's data set as a Spark-style parquet table: `files` part files and _SUCCESS."""
    import numpy as np
    import pandas as pd
    from sklearn.datasets import load_breast_cancer

    bunch: Any = load_breast_cancer(as_frame=True)
    frame = bunch.frame.rename(columns={"target": "label"})
    directory.mkdir()
    for part, rows in enumerate(np.array_split(np.arange(len(frame)), files)):
        pd.DataFrame(frame.iloc[rows]).to_parquet(directory / f"part-{part:05d}.snappy.parquet", index=False)
    (directory / "_SUCCESS").write_text("")
    return directory


def seed_job_from_bucket(data_path: str, secret: str, endpoint: str) -> dict[str, Any]:
    """The seed sample, its data set replaced by the table in the bucket, credentials from Secret `secret`."""
    job = yaml.safe_load(SEED_SAMPLE.read_text())
    spec = job["spec"]
    spec["trainer"] = {**spec["trainer"], "dataset": "parquet", "dataPath": data_path}
    spec["mlflow"] = {"experiment": f"s3-{uuid.uuid4().hex[:8]}"}
    spec["template"] = {
        "spec": {"containers": [{"name": "trainer", "env": env_from_secret(secret, endpoint)}]}
    }
    return dict(job)


def test_seed_job_reads_its_data_from_the_bucket_and_the_charts_mlflow_keeps_the_model_there(
    node_kubectl, node_namespace, s3_chain, s3, operator_log, tmp_path
):
    from pyarrow import fs

    node_kubectl.restrict(node_namespace)
    local = breast_cancer_parts(tmp_path / "breast_cancer.parquet", files=4)
    data_path = s3.upload(local, f"{BUCKET}/{uuid.uuid4().hex[:8]}/breast_cancer.parquet") + "/"
    make_secret(node_kubectl, node_namespace, "s3-credentials", s3.access_key, s3.secret_key)
    job = seed_job_from_bucket(data_path, "s3-credentials", s3.endpoint)
    name = job["metadata"]["name"]
    chain = dataclasses.replace(s3_chain, job_namespace=node_namespace)
    try:
        node_kubectl.apply(job, "-n", node_namespace)
        done = chain.wait_succeeded(name)
        url = chain.mlflow_pod_url()
        result = check_mlflow(url, done)  # exactly one run, with exactly one model
        assert result["params"].get("replicas") == "4", result["params"]
        # The model's files are objects in the bucket: the server wrote them there, not to its volume.
        model_id = result["modelUri"].removeprefix("models:/")
        stored = s3.filesystem().get_file_info(fs.FileSelector(ARTIFACTS, recursive=True))
        assert [i.path for i in stored if model_id in i.path and i.path.endswith("/MLmodel")], stored
        # Loaded back on this machine through the artifact proxy (no S3 settings here), fed the same split.
        assert score_model(url, result["modelUri"], {**job["spec"]["trainer"], "dataPath": str(local)}) >= 0.9
        seen = "\n".join(
            [
                node_kubectl("get", "trainjob", name, "-n", node_namespace, "-o", "yaml").stdout,
                node_kubectl("get", "events", "-n", node_namespace, "-o", "yaml").stdout,
                json.dumps(runs_of_job(url, done["metadata"]["uid"])),  # params, tags, artifact location
                operator_log(),
            ]
        )
        assert s3.secret_key not in seen and s3.access_key not in seen
        assert result["runId"] in seen  # the run itself was searched
    except Exception:
        print(operator_log())
        raise
