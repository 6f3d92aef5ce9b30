"""Checkpoints without a shared volume, and the save on SIGTERM: the group's state kept in the job's MLflow
run (a real `mlflow server`, its artifact proxy) or at an s3:// prefix (a real S3 server). A group sent
SIGTERM mid-epoch (as a preemption or a drain sends it to every pod) saves at its next step and exits 75; the
next group, each worker with an empty local folder (as a new pod has), resumes at the step after it, every
worker with the chief's state, and ends with the undisturbed fit's weights. The checkpoint is removed from the
store once the model is logged.
"""

from __future__ import annotations

import re
import shutil
import signal
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from tf_support import HANG_SECONDS, TEST_SECONDS, group, trainjob_spec

from mwms_contract import names, termination
from mwms_kit.s3_server import BUCKET, S3Server

pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(TEST_SECONDS, func_only=True)]

EPOCHS = 3
EVERY_STEPS = 20
# 2,800 training rows in batches of 32: 87 steps an epoch; saved after steps 20, 40, 60, 80 and 87.
TRAINER = {"dataset": "synthetic", "syntheticSamples": 4000, "epochs": EPOCHS, "hiddenUnits": [16]}
SAVED = re.compile(r"checkpoint saved at epoch (\d+) step (\d+)")
STOPPED_AT = re.compile(r"saved its checkpoint at epoch (\d+) step (\d+)")
RESUMED_AT = re.compile(r"worker \d resumes at epoch (\d+) step (\d+)")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with S3Server(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="module")
def undisturbed(mlflow_server, tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """The weights of the fit no signal stopped (the same for either store: the store only keeps state)."""
    spec = trainjob_spec(
        "store-undisturbed", 2, TRAINER, checkpoint={"store": "run", "everySteps": EVERY_STEPS}
    )
    fit = group(spec, mlflow_server.url, tmp_path_factory.mktemp("undisturbed")).start()
    assert fit.wait(timeout=HANG_SECONDS) == {0: 0, 1: 0}, fit.log(0)[-3000:]
    return _weights(mlflow_server, fit.summary())


def _weights(server, summary):
    import mlflow

    mlflow.set_tracking_uri(server.url)
    return mlflow.pyfunc.load_model(summary["modelUri"]).unwrap_python_model().keras_model.get_weights()


def _stored(store: str, request, run_id: str, uid: str) -> list[str]:
    """The files of the job's checkpoint in its store."""
    if store == "run":
        import mlflow

        client = mlflow.MlflowClient(request.getfixturevalue("mlflow_server").url)
        return [a.path for a in client.list_artifacts(run_id, names.CHECKPOINT_ARTIFACT_DIR)]
    from pyarrow import fs

    s3 = request.getfixturevalue("s3")
    selector = fs.FileSelector(f"{BUCKET}/checkpoints/{uid}", allow_not_found=True)
    return [i.path for i in s3.filesystem().get_file_info(selector)]


@pytest.mark.parametrize("store", ["run", "s3"])
def test_a_group_stopped_by_sigterm_mid_epoch_resumes_from_the_store_with_the_undisturbed_weights(
    store, request, undisturbed, mlflow_server, mlflow_client, tmp_path
):
    env = request.getfixturevalue("s3").env if store == "s3" else {}
    checkpoint = {
        "store": "run" if store == "run" else f"s3://{BUCKET}/checkpoints",
        "everySteps": EVERY_STEPS,
    }
    spec = trainjob_spec(f"store-stopped-{store}", 2, TRAINER, checkpoint=checkpoint)
    uid = str(uuid.uuid4())
    job_dir = tmp_path / "stopped"
    first = group(spec, mlflow_server.url, job_dir, uid=uid, **env).start()
    try:
        deadline = time.monotonic() + HANG_SECONDS
        # SIGTERM to both once epoch 2 has begun: its first save within the epoch is published.
        while not any(e == "2" for e, _ in SAVED.findall(first.log(0))):
            assert time.monotonic() < deadline and first.procs[0].poll() is None, first.log(0)[-3000:]
            time.sleep(0.1)
        for proc in first.procs.values():
            proc.send_signal(signal.SIGTERM)
        codes = {i: p.wait(timeout=120) for i, p in first.procs.items()}
    finally:
        first.kill()
    assert codes == {0: 75, 1: 75}, first.log(0)[-3000:]
    assert f"epoch {EPOCHS}/{EPOCHS}" not in first.log(0)
    message = first.termination(0)
    assert termination.SAVED_ON_STOP in message, message
    stopped_at = STOPPED_AT.search(message)
    assert stopped_at is not None, message
    saved_epoch, saved_step = map(int, stopped_at.groups())
    assert saved_epoch == 2 and EVERY_STEPS < saved_step < 87, message  # mid-epoch, not a periodic save
    experiment = mlflow_client.get_experiment_by_name(spec.experiment)
    run_id = mlflow_client.search_runs([experiment.experiment_id])[0].info.run_id
    assert _stored(store, request, run_id, uid), "nothing in the store after a save"
    for worker in range(2):  # new pods: nothing of the first group's on their disks
        shutil.rmtree(job_dir / f"worker-{worker}-checkpoint")

    second = group(spec, mlflow_server.url, job_dir, uid=uid, restart_count=1, **env).start()
    assert second.wait(timeout=HANG_SECONDS) == {0: 0, 1: 0}, second.log(0)[-3000:]
    for worker in range(2):
        resumed_at = RESUMED_AT.search(second.log(worker))
        assert resumed_at is not None, second.log(worker)[-3000:]
        assert tuple(map(int, resumed_at.groups())) == (saved_epoch, saved_step + 1), resumed_at.group(0)
    tags = mlflow_client.get_run(run_id).data.tags
    assert int(tags[names.MLFLOW_TAG_RESUMED_FROM_STEP]) == saved_step  # 0-based: the step after the save
    resumed = _weights(mlflow_server, second.summary())
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(undisturbed, resumed, strict=True))
    print(f"largest weight difference to the undisturbed fit: {worst}")
    assert worst <= 1e-5, f"the resumed fit differs from the undisturbed one by {worst}"
    assert _stored(store, request, run_id, uid) == [], "the checkpoint was kept after the model was logged"
