"""A fit killed mid-way and resumed from its checkpoint ends with the undisturbed fit's weights (not just the
same rows seen: the same batches in the same order, epoch by epoch), whether the data is loaded whole or
streamed from the worker's own files (sharding: files)."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from tf_support import HANG_SECONDS, group, trainjob_spec, write_parts

EPOCHS = 10
MODEL = {"epochs": EPOCHS, "hiddenUnits": [16]}


def _trainer(data, tmp_path):
    if data == "in-memory":
        return {**MODEL, "dataset": "synthetic", "syntheticSamples": 20000}
    table = tmp_path / "table.parquet"
    write_parts(table, files=5, rows=4000)  # 4 files streamed, 1 held out
    return {**MODEL, "dataset": "parquet", "dataPath": str(table), "sharding": "files", "testSize": 0.2}


def _weights(server, summary):
    import mlflow

    mlflow.set_tracking_uri(server.url)
    model = mlflow.pyfunc.load_model(summary["modelUri"]).unwrap_python_model().keras_model
    return model.get_weights()


@pytest.mark.parametrize("data", ["in-memory", "files"])
def test_resumed_fit_ends_with_the_undisturbed_weights(data, mlflow_server, tmp_path):
    trainer = _trainer(data, tmp_path)
    spec = trainjob_spec(f"resume-undisturbed-{data}", 1, trainer, checkpoint=True)
    undisturbed = group(spec, mlflow_server.url, tmp_path / "undisturbed").start()
    assert undisturbed.wait(timeout=HANG_SECONDS) == {0: 0}, undisturbed.log(0)[-3000:]
    expected = _weights(mlflow_server, undisturbed.summary())

    spec = trainjob_spec(f"resume-killed-{data}", 1, trainer, checkpoint=True)
    uid = str(uuid.uuid4())
    first = group(spec, mlflow_server.url, tmp_path / "killed", uid=uid).start()
    try:
        deadline = time.monotonic() + HANG_SECONDS
        while f"epoch 3/{EPOCHS}" not in first.log(0):
            assert time.monotonic() < deadline and first.procs[0].poll() is None, first.log(0)[-3000:]
            time.sleep(0.1)
    finally:
        first.kill()
    assert f"epoch {EPOCHS}/{EPOCHS}" not in first.log(0)
    second = group(spec, mlflow_server.url, tmp_path / "killed", uid=uid, restart_count=1).start()
    assert second.wait(timeout=HANG_SECONDS) == {0: 0}, second.log(0)[-3000:]
    assert "resumes from the checkpoint at epoch" in second.log(0)
    resumed = _weights(mlflow_server, second.summary())
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(expected, resumed, strict=True))
    assert worst <= 1e-5, f"the resumed fit differs from the undisturbed one by {worst}"
