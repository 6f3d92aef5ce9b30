"""dataPath in a bucket: real TensorFlow workers read csv/parquet tables from a real S3-compatible server (the
Versity S3 Gateway, mwms_kit/s3_server.py), and a real `mlflow server` stores the chief's model there.

- sharding files: each worker has its own recording proxy in front of the server, so the test sees which
  objects each one opened: only its own (and, for the chief, the held-out one).
- exact: a csv directory, every worker reading all of it; the credentials never show in a log, the
  termination message or the run's params.
- a wrong key, a missing bucket, an empty prefix: exit 2 at once, naming the URI and not the key.
- throttling and 5xx answers are retried with backoff.
- the model goes through MLflow's artifact proxy into the bucket (workers hold no S3 credentials) and loads
  back with mlflow.pyfunc.load_model("models:/...").
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pandas as pd
import pytest
from tf_support import (
    HANG_SECONDS,
    TEST_SECONDS,
    StallingProxy,
    group,
    models_of,
    runs_of,
    trainjob_spec,
    write_parts,
)

from mwms_contract import names
from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.s3_server import BUCKET, S3Server, mlflow_s3_python

# The S3 server and the MLflow-S3 environment may still be building in `make test`'s background: the
# module's fixtures wait on their build locks, so the timeout counts the tests themselves only.
pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(TEST_SECONDS, func_only=True)]

TRAINER = {"epochs": 3, "globalBatchSize": 32, "learningRate": 0.05}


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


def upload_table(s3: S3Server, local: Path) -> str:
    """The table under a fresh prefix of the tests' bucket; its s3:// URI (a prefix, no trailing slash)."""
    return s3.upload(local, f"{BUCKET}/{uuid.uuid4().hex[:8]}/{local.name}")


def csv_parts(tmp_path: Path, files: int) -> Path:
    """write_parts' table as csv files (Spark's csv layout: part files and _SUCCESS)."""
    parquet = write_parts(tmp_path / "parts.parquet", files=files)
    table = tmp_path / "table.csv"
    table.mkdir()
    for part in parquet:
        pd.read_parquet(part).to_csv(table / part.name.replace(".snappy.parquet", ".csv"), index=False)
    (table / "_SUCCESS").write_text("")
    return table


def secrets_of(s3: S3Server) -> tuple[str, str]:
    return s3.access_key, s3.secret_key


def objects_read(proxy: StallingProxy, suffix: str) -> set[str]:
    """Names of the objects a worker fetched or asked about through its proxy (listings aside)."""
    paths = [unquote(urlsplit(path).path) for method, path in proxy.requests if method in ("GET", "HEAD")]
    return {path.rsplit("/", 1)[-1] for path in paths if path.endswith(suffix)}


def test_parquet_in_a_bucket_with_files_sharding_each_worker_opens_only_its_own_objects(
    s3, mlflow_server, mlflow_client, tmp_path
):
    write_parts(tmp_path / "table.parquet", files=5)
    uri = upload_table(s3, tmp_path / "table.parquet")
    name = f"s3-files-{uuid.uuid4().hex[:6]}"
    trainer = {**TRAINER, "dataset": "parquet", "dataPath": uri, "sharding": "files", "testSize": 0.2}
    g = group(trainjob_spec(name, 2, trainer), mlflow_server.url, tmp_path / "job", **s3.env)
    proxies = [StallingProxy(s3.endpoint, lambda *_: False, keep_host=True) for _ in range(2)]
    try:
        for env, proxy in zip(g.envs, proxies, strict=True):
            env["AWS_ENDPOINT_URL"] = proxy.url
        codes = g.start().wait(timeout=600)
    finally:
        for proxy in proxies:
            proxy.close()
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    assert "worker 0 reads 2 of 5 files (800 training rows; 400 held-out rows checked)" in g.log(0)
    assert "worker 1 reads 2 of 5 files (800 training rows)" in g.log(1)
    part = "part-{:05d}.snappy.parquet".format
    assert objects_read(proxies[0], ".snappy.parquet") == {part(0), part(2), part(4)}  # 4: held out
    assert objects_read(proxies[1], ".snappy.parquet") == {part(1), part(3)}
    [run] = runs_of(mlflow_client, name)
    assert run.data.params["dataPath"] == uri
    assert len(models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)) == 1
    assert g.summary()["metrics"]["val_accuracy"] > 0.9


def test_csv_in_a_bucket_exact_and_no_credential_is_written_anywhere(
    s3, mlflow_server, mlflow_client, tmp_path
):
    uri = upload_table(s3, csv_parts(tmp_path, files=3)) + "/"
    name = f"s3-exact-{uuid.uuid4().hex[:6]}"
    trainer = {**TRAINER, "dataset": "csv", "dataPath": uri}
    g = group(trainjob_spec(name, 2, trainer), mlflow_server.url, tmp_path / "job", **s3.env).start()
    codes = g.wait(timeout=600)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    [run] = runs_of(mlflow_client, name)
    assert run.data.params["trainRows"] == "840"  # 1200 rows, testSize 0.3: every row of the 3 objects
    metrics = g.summary()["metrics"]
    assert math.isfinite(metrics["loss"]) and metrics["val_accuracy"] > 0.9
    written = [
        g.log(0),
        g.log(1),
        g.termination(0),
        g.termination(1),
        repr(run.data.params),
        repr(run.data.tags),
    ]
    for secret in secrets_of(s3):
        assert not [text for text in written if secret in text]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong secret", "Check the bucket and prefix, and the workers' credentials"),
        ("missing bucket", "Check the bucket and prefix"),
        ("empty prefix", "holds no *.parquet objects"),
    ],
)
def test_a_wrong_key_a_missing_bucket_or_an_empty_prefix_exits_2_at_once_naming_the_uri(
    case, expected, s3, mlflow_server, tmp_path
):
    table = f"{uuid.uuid4().hex[:8]}/table.parquet/"
    env = dict(s3.env)
    if case == "wrong secret":
        write_parts(tmp_path / "table.parquet", files=2)
        table = upload_table(s3, tmp_path / "table.parquet").removeprefix(f"s3://{BUCKET}/") + "/"
        env["AWS_SECRET_ACCESS_KEY"] = "not-" + s3.secret_key
    elif case == "empty prefix":
        s3.filesystem().create_dir(f"{BUCKET}/{table}")
    bucket = "no-such-bucket" if case == "missing bucket" else BUCKET
    uri = f"s3://{bucket}/{table}"
    trainer = {**TRAINER, "dataset": "parquet", "dataPath": uri, "sharding": "files"}
    g = group(trainjob_spec(f"s3-bad-{case[:5]}", 1, trainer), mlflow_server.url, tmp_path / "job", **env)
    codes = g.start().wait(timeout=HANG_SECONDS)
    message = g.termination(0)
    assert codes == {0: names.EXIT_INVALID_CONFIG}, g.log(0)[-3000:]
    assert uri in message and expected in message, message
    assert "epoch" not in g.log(0)
    for secret in (*secrets_of(s3), env["AWS_SECRET_ACCESS_KEY"]):
        assert secret not in message and secret not in g.log(0)


def test_throttling_and_5xx_answers_are_retried_with_backoff(s3, tmp_path, monkeypatch):
    """The first answers are 503 (AWS's SlowDown status): the listing still succeeds."""
    from mwms_trainer import objectstore
    from mwms_trainer.input import readers

    write_parts(tmp_path / "table.parquet", files=2)
    uri = upload_table(s3, tmp_path / "table.parquet")
    refused: list[str] = []

    def unavailable(method: str, path: str) -> bool:
        refused.append(path)
        return len(refused) <= 2

    proxy = StallingProxy(s3.endpoint, lambda *_: False, unavailable=unavailable, keep_host=True)
    try:
        for key, value in {**s3.env, "AWS_ENDPOINT_URL": proxy.url}.items():
            monkeypatch.setenv(key, value)
        objectstore.filesystem.cache_clear()
        files = readers.table_files(uri, "parquet")
    finally:
        objectstore.filesystem.cache_clear()
        proxy.close()
    assert [f.name for f in files] == ["part-00000.snappy.parquet", "part-00001.snappy.parquet"]
    assert len(proxy.requests) >= 3  # two refused, then answered


@pytest.fixture(scope="module")
def mlflow_in_s3(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` whose artifacts go to the bucket: only the server holds S3 credentials."""
    env = {**s3.env, "MLFLOW_S3_ENDPOINT_URL": s3.endpoint}
    server = MlflowServer(
        tmp_path_factory.mktemp("mlflow-s3"),
        artifacts_destination=f"s3://{BUCKET}/mlflow",
        env=env,
        python=mlflow_s3_python(),
    ).start()
    try:
        yield server
    finally:
        server.stop()


def test_the_chiefs_model_goes_through_mlflows_artifact_proxy_into_the_bucket_and_loads_back(
    s3, mlflow_in_s3, tmp_path
):
    import mlflow
    import numpy as np

    name = f"s3-model-{uuid.uuid4().hex[:6]}"
    g = group(
        trainjob_spec(name, 2, {"epochs": 2, "globalBatchSize": 32}), mlflow_in_s3.url, tmp_path / "job"
    )
    for env in g.envs:  # the workers hold no S3 settings at all (none from this machine either)
        for key in [k for k in env if k.startswith(("AWS_", "MLFLOW_S3_"))]:
            del env[key]
    codes = g.start().wait(timeout=600)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    model_uri = g.summary()["modelUri"]
    model_id = model_uri.removeprefix("models:/")
    stored = s3.filesystem().get_file_info(_selector(f"{BUCKET}/mlflow"))
    assert [info.path for info in stored if model_id in info.path and info.path.endswith("MLmodel")]
    mlflow.set_tracking_uri(mlflow_in_s3.url)
    model = mlflow.pyfunc.load_model(model_uri)
    from sklearn.datasets import load_breast_cancer

    rows = load_breast_cancer().data
    predictions = np.asarray(model.predict(rows)).reshape(-1)
    assert len(predictions) == len(rows) and np.isfinite(predictions).all()


def _selector(path: str) -> Any:
    from pyarrow import fs

    return fs.FileSelector(path, recursive=True)
