"""sharding: files — each worker streams only its own files, and the fit works end to end.

Each worker runs in its own mount namespace where the files that are not its own are replaced (bind-mounted)
by a file that is not parquet: a worker that opened one would exit 2 naming it. Worker 0 trains on files 0 and
2 and, as the chief, holds out file 4; worker 1 trains on files 1 and 3 and may open nothing else.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import pytest
from tf_support import POISON, group, models_of, runs_of, trainjob_spec, write_parts

pytestmark = [
    pytest.mark.tf,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="hiding files per worker needs a mount namespace (root and util-linux's unshare)",
    ),
]

FILES = 5


def start_hiding(g, i, hidden, decoy):
    """Worker i with `hidden` replaced by `decoy` in its own mount namespace (others see the real files)."""
    env = dict(g.envs[i])
    if i > 0:
        env["PYTHONPATH"] = str(POISON)  # non-chief workers never import mlflow
    mounts = " && ".join(f"mount --bind {decoy} {f}" for f in hidden)
    script = f"{mounts} && exec {sys.executable} -m mwms_trainer"
    with open(g.dir / f"worker-{i}.log", "ab") as log:
        g.procs[i] = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--fork", "--kill-child", "sh", "-c", script],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_each_worker_reads_only_its_own_files_and_the_fit_works(mlflow_server, mlflow_client, tmp_path):
    parts = write_parts(tmp_path / "table.parquet", files=FILES)
    decoy = tmp_path / "not-yours.parquet"
    decoy.write_text("this file belongs to another worker\n")
    trainer = {
        "dataset": "parquet",
        "dataPath": str(tmp_path / "table.parquet"),
        "sharding": "files",
        "testSize": 0.2,  # 1 of 5 files held out
        "epochs": 3,
        "globalBatchSize": 32,
        "learningRate": 0.05,
    }
    g = group(trainjob_spec("file-sharding", 2, trainer), mlflow_server.url, tmp_path / "job")
    start_hiding(g, 0, [parts[1], parts[3]], decoy)
    start_hiding(g, 1, [parts[0], parts[2], parts[4]], decoy)
    codes = g.wait(timeout=400)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    assert "worker 0 reads 2 of 5 files (800 training rows)" in g.log(0)
    assert "worker 1 reads 2 of 5 files (800 training rows)" in g.log(1)
    assert "1600 training rows on 2 workers, 50 steps per epoch" in g.log(1)  # 800 rows // 16 per worker
    [run] = runs_of(mlflow_client, "file-sharding")
    assert run.info.run_id == g.summary()["runId"]
    assert (run.data.params["sharding"], run.data.params["trainFiles"]) == ("files", "4")
    assert len(models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)) == 1
    metrics = g.summary()["metrics"]
    assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["val_loss"])
    assert metrics["val_accuracy"] > 0.9, metrics  # held out: file 4, which no worker trained on


def test_fewer_training_files_than_workers_stream_every_nth_row(mlflow_server, mlflow_client, tmp_path):
    """One training file for 2 workers: both stream it, each keeps every other row (none shared)."""
    write_parts(tmp_path / "two.parquet", files=2)
    trainer = {
        "dataset": "parquet",
        "dataPath": str(tmp_path / "two.parquet"),
        "sharding": "files",
        "epochs": 3,
        "globalBatchSize": 32,
        "learningRate": 0.05,
    }
    g = group(trainjob_spec("row-sharding", 2, trainer), mlflow_server.url, tmp_path / "job").start()
    codes = g.wait(timeout=400)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    assert "worker 0 reads 1 of 2 files (200 training rows, the rows i with i mod 2 = 0)" in g.log(0)
    assert "worker 1 reads 1 of 2 files (200 training rows, the rows i with i mod 2 = 1)" in g.log(1)
    assert "400 training rows on 2 workers, 12 steps per epoch" in g.log(0)
    [run] = runs_of(mlflow_client, "row-sharding")
    assert len(models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)) == 1
    assert g.summary()["metrics"]["val_accuracy"] > 0.9  # held out: file 1
