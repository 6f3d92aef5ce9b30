"""sharding: files — each worker streams only its own files, and the fit works end to end.

Each worker runs in its own mount namespace where the files that are not its own are replaced (bind-mounted)
by a file that is not parquet: a worker that opened one would exit 2 naming it. Worker 0 trains on files 0 and
2 and, as the chief, holds out file 4; worker 1 trains on files 1 and 3 and may open nothing else.

Then the files path is as correct as the exact one: columns by name, one schema across the workers' files,
held-out files checked before the fit, a constant column scaled by 1, the rows each epoch leaves out reported.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from tf_support import HANG_SECONDS, POISON, group, models_of, runs_of, trainjob_spec, write_parts

from mwms_contract import names

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="hiding files per worker needs a mount namespace (root and util-linux's unshare)",
)

FILES = 5
TRAINER = {"dataset": "parquet", "sharding": "files", "testSize": 0.2, "epochs": 3, "globalBatchSize": 32}


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
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    assert "worker 0 reads 2 of 5 files (800 training rows; 400 held-out rows checked)" in g.log(0)
    assert "worker 1 reads 2 of 5 files (800 training rows)" in g.log(1)
    assert "1600 training rows on 2 workers, 50 steps per epoch; each epoch leaves out 0 rows" in g.log(1)
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
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    assert (
        "worker 0 reads 1 of 2 files (200 training rows, the rows i with i mod 2 = 0; 400 held-out"
        in g.log(0)
    )
    assert "worker 1 reads 1 of 2 files (200 training rows, the rows i with i mod 2 = 1)" in g.log(1)
    assert "400 training rows on 2 workers, 12 steps per epoch" in g.log(0)
    [run] = runs_of(mlflow_client, "row-sharding")
    assert len(models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)) == 1
    assert g.summary()["metrics"]["val_accuracy"] > 0.9  # held out: file 1


def rewrite(part, change):
    change(pd.read_parquet(part)).to_parquet(part)


def train(name, table, mlflow_server, tmp_path):
    trainer = {**TRAINER, "dataPath": str(table), "learningRate": 0.05}
    g = group(trainjob_spec(name, 2, trainer), mlflow_server.url, tmp_path / name).start()
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == {0: 0, 1: 0}, "\n".join(g.log(i)[-3000:] for i in (0, 1))
    return g


def test_columns_in_another_order_per_file_train_the_same_model(mlflow_server, tmp_path):
    """Worker 1's files hold the columns in another order, the held-out file in a third: each worker's own
    files agree, so only reading by name (not position) makes this the same table."""
    write_parts(tmp_path / "ordered.parquet", files=FILES)
    parts = write_parts(tmp_path / "shuffled.parquet", files=FILES)
    for part, order in (
        (1, ["label", "c", "a", "b"]),
        (3, ["label", "c", "a", "b"]),
        (4, ["c", "b", "a", "label"]),
    ):
        rewrite(parts[part], lambda f, order=order: f[order])
    ordered = train("columns-ordered", tmp_path / "ordered.parquet", mlflow_server, tmp_path).summary()[
        "metrics"
    ]
    shuffled = train("columns-shuffled", tmp_path / "shuffled.parquet", mlflow_server, tmp_path).summary()
    assert shuffled["metrics"]["val_accuracy"] == ordered["val_accuracy"] > 0.9, (shuffled, ordered)
    assert shuffled["metrics"]["loss"] == pytest.approx(ordered["loss"], rel=1e-5)
    import mlflow

    mlflow.set_tracking_uri(mlflow_server.url)
    served = mlflow.pyfunc.load_model(shuffled["modelUri"])
    assert served.unwrap_python_model().columns == ["a", "b", "c"]  # the model's order: by column name


def test_a_column_type_differing_between_workers_files_exits_2_on_every_worker(
    mlflow_server, mlflow_client, tmp_path
):
    """Worker 1's files hold b as integers: each worker's own files agree; the workers' exchange refuses."""
    parts = write_parts(tmp_path / "table.parquet", files=FILES)
    for part in (1, 3):
        rewrite(parts[part], lambda f: f.assign(b=f["b"].round().astype(np.int64)))
    trainer = {**TRAINER, "dataPath": str(tmp_path / "table.parquet")}
    g = group(trainjob_spec("type-differs", 2, trainer), mlflow_server.url, tmp_path / "job").start()
    codes = g.wait(timeout=HANG_SECONDS)
    assert codes == {0: names.EXIT_INVALID_CONFIG, 1: names.EXIT_INVALID_CONFIG}, g.log(0)[-3000:]
    for i in (0, 1):
        assert g.termination(i).startswith(
            f"invalid configuration: MWMS_TRAINER_CONFIG.dataPath: column 'b' is long in '{parts[1]}' "
            f"but double in '{parts[0]}': every file of a table must hold the same columns of the same types"
        ), g.termination(i)
        assert " epoch " not in g.log(i)


def test_a_nan_in_a_held_out_file_exits_2_before_any_epoch(mlflow_server, mlflow_client, tmp_path):
    parts = write_parts(tmp_path / "table.parquet", files=FILES)
    rewrite(parts[4], lambda f: f.assign(b=f["b"].where(f.index != 9)))
    trainer = {**TRAINER, "dataPath": str(tmp_path / "table.parquet")}
    g = group(trainjob_spec("held-out-nan", 2, trainer), mlflow_server.url, tmp_path / "job").start()
    try:
        # worker 1 waits for its chief at registration until killed
        code = g.procs[0].wait(timeout=HANG_SECONDS)
    finally:
        g.kill()
    assert code == names.EXIT_INVALID_CONFIG, g.log(0)[-3000:]
    assert g.termination(0).startswith(
        f"invalid configuration: MWMS_TRAINER_CONFIG.dataPath: '{parts[4]}': 1 of 400 rows hold values "
        "that are not finite numbers"
    ), g.termination(0)
    assert "in column(s) 'b';" in g.termination(0)
    assert " epoch " not in g.log(0) and runs_of(mlflow_client, "held-out-nan") == []


def test_a_constant_column_in_uneven_files_takes_a_moved_constant_and_the_rows_left_out_are_said(
    mlflow_server, mlflow_client, tmp_path
):
    """A float constant in files of uneven sizes: its combined variance is ~1e-25, which must scale by 1."""
    parts = write_parts(tmp_path / "table.parquet", files=FILES)
    for part, rows in zip(parts, (400, 250, 370, 310, 400), strict=True):
        rewrite(part, lambda f, rows=rows: f[:rows].assign(year=2024.3))
    g = train("constant-column", tmp_path / "table.parquet", mlflow_server, tmp_path)
    # worker 0: files 0 and 2 (770 rows), worker 1: files 1 and 3 (560 = 35 steps of 16): 210 left out
    said = "1330 training rows on 2 workers, 35 steps per epoch; each epoch leaves out 210 rows"
    assert f"{said} (per worker: 210, 0)" in g.log(1)
    [run] = runs_of(mlflow_client, "constant-column")
    params = run.data.params
    assert (params["trainRows"], params["stepsPerEpoch"], params["rowsLeftOutPerEpoch"]) == (
        "1330",
        "35",
        "210",
    )
    assert params["testRows"] == "400"
    import mlflow

    mlflow.set_tracking_uri(mlflow_server.url)
    served = mlflow.pyfunc.load_model(g.summary()["modelUri"])
    held_out = pd.read_parquet(parts[4])

    def accuracy(frame):
        return float(np.mean((np.asarray(served.predict(frame)).reshape(-1) > 0.5) == (frame["label"] > 0.5)))

    scaler = served.unwrap_python_model().keras_model.get_layer("scaler")
    assert (
        list(np.asarray(scaler.variance).reshape(-1))[3] == 1.0
    )  # features a, b, c, year: year's scale is 1
    assert accuracy(held_out) > 0.9
    # 1 away moves the logit by year's (untrained) weight, not 1e7 times it: no prediction saturates
    assert accuracy(held_out.assign(year=2025.3)) > 0.85
