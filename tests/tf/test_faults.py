"""Failures the operator acts on: a peer lost mid-fit, a peer that never starts, MLflow unreachable."""

from __future__ import annotations

import json
import signal
import socket
import time
import uuid

import pytest
from tf_support import HANG_SECONDS, group, models_of, runs_of, trainjob_spec

from mwms_contract import names
from mwms_kit.auth_proxy import AuthProxy
from mwms_kit.pid_namespace import AVAILABLE as PID_NAMESPACES
from mwms_kit.pid_namespace import WHY_NOT
from mwms_trainer.local import free_ports

RETRYABLE = names.EXIT_RETRYABLE


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_worker_killed_mid_fit_then_group_resumes_from_checkpoint(mlflow_server, mlflow_client, tmp_path):
    name, uid, epochs = "killed-worker", str(uuid.uuid4()), 24
    spec = trainjob_spec(name, 3, {"epochs": epochs, "globalBatchSize": 30}, checkpoint=True)
    first = group(spec, mlflow_server.url, tmp_path / "first", uid=uid).start()
    try:
        _wait_for(lambda: f"epoch 4/{epochs}" in first.log(0), HANG_SECONDS, "the chief's 4th epoch")
        first.procs[2].kill()
        # The survivors must end by themselves (a worker that hangs here would hold a hand-started group
        # for ever). An all-reduce with the dead peer fails at once (2.8 s from kill to exit, idle); one that
        # misses it relies on MultiWorkerMirroredStrategy's health check: every 30 s, three tries of 10 s,
        # so up to about 60 s, and more on a loaded machine (a CI run at load ~11 passed 30 s). A bound,
        # not a timing.
        for i in (0, 1):
            assert first.procs[i].wait(timeout=HANG_SECONDS) == RETRYABLE, first.log(i)[-3000:]
    finally:
        first.kill()
    assert first.termination(0).startswith("retryable: lost a peer")
    assert first.termination(1).startswith("retryable: lost a peer")

    # The whole group again (new addresses, restart 1), the same checkpoint volume and job uid.
    second = group(spec, mlflow_server.url, tmp_path / "first", uid=uid, restart_count=1)
    for env, old in zip(second.envs, first.envs, strict=True):
        assert env[names.ENV_CHECKPOINT_DIR] == old[names.ENV_CHECKPOINT_DIR]
    second.start()
    codes = second.wait(timeout=HANG_SECONDS)
    assert codes == {0: 0, 1: 0, 2: 0}, second.log(0)[-3000:]
    assert "resumes from the checkpoint at epoch" in second.log(0)

    runs = runs_of(mlflow_client, name)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == second.summary()["runId"]
    assert run.data.tags["mwms.dev/restart-count"] == "1"
    resumed = int(run.data.tags["mwms.dev/resumed-from-epoch"])
    assert 1 <= resumed < epochs
    steps = sorted(m.step for m in mlflow_client.get_metric_history(run.info.run_id, "loss"))
    assert set(steps) == set(range(epochs))  # every epoch once; the resumed group did not start over
    assert len(models_of(run.info.experiment_id, run.info.run_id, mlflow_server.url)) == 1


def logs_loss_of_epoch(index: int):
    """A `hold` for the AuthProxy: the chief's call that logs the loss of epoch `index` (0-based)."""

    def picks(method: str, path: str, body: bytes) -> bool:
        if not path.endswith("/runs/log-batch"):
            return False
        metrics = json.loads(body or b"{}").get("metrics", [])
        return any(m.get("key") == "loss" and int(m.get("step", -1)) == index for m in metrics)

    return picks


def test_a_group_ended_while_an_epoch_is_logged_runs_that_epoch_again(mlflow_server, mlflow_client, tmp_path):
    """The chief logs an epoch's metrics before the group saves the epoch's checkpoint: a group that ends
    between the two runs that epoch again, never resumes after it with its metrics lost. Here the call that
    logs epoch 3's loss is never answered, and the worker is killed in it."""
    name, uid, epochs = "killed-while-logging", str(uuid.uuid4()), 5
    spec = trainjob_spec(name, 1, {"epochs": epochs}, checkpoint=True)
    proxy = AuthProxy(mlflow_server.url, [None])
    proxy.hold = logs_loss_of_epoch(2)
    first = group(spec, proxy.uri, tmp_path / "job", uid=uid).start()
    try:
        _wait_for(
            lambda: proxy.holding.is_set() or first.procs[0].poll() is not None, HANG_SECONDS, "epoch 3's log"
        )
        assert proxy.holding.is_set(), first.log(0)[-3000:]
        first.procs[0].kill()
        first.procs[0].wait(timeout=60)
    finally:
        first.kill()
        proxy.close()

    second = group(spec, mlflow_server.url, tmp_path / "job", uid=uid, restart_count=1).start()
    assert second.wait(timeout=HANG_SECONDS) == {0: 0}, second.log(0)[-3000:]
    run = runs_of(mlflow_client, name)[0]
    assert run.data.tags["mwms.dev/resumed-from-epoch"] == "2", run.data.tags  # epoch 3 again
    steps = sorted(m.step for m in mlflow_client.get_metric_history(run.info.run_id, "loss"))
    assert steps == list(range(epochs)), steps  # each epoch's loss once


def test_peer_that_never_starts_exits_75_at_the_startup_deadline(mlflow_server, tmp_path):
    spec = trainjob_spec("never-starts", 3, {"epochs": 1, "globalBatchSize": 30}, startup_timeout=15)
    g = group(spec, mlflow_server.url, tmp_path).start(indices=[0, 1])  # worker 2 never comes
    # TensorFlow's import alone took ~2 min at CI's load; the deadline counts from each worker's start.
    for i in (0, 1):
        _wait_for(
            lambda i=i: "waiting for 2 peer(s)" in g.log(i) or g.procs[i].poll() is not None,
            600,
            f"worker {i}'s wait",
        )
    codes = g.wait(timeout=120)  # not an hour: the default registration timeout
    assert codes == {0: RETRYABLE, 1: RETRYABLE}, g.log(0)[-3000:]
    for i in (0, 1):
        message = g.termination(i)
        assert message.startswith("retryable: startup deadline passed waiting for peers"), message
        assert "worker 2 (127.0.0.1:" in message


def test_in_a_pod_a_peer_later_than_the_startup_timeout_is_waited_for(mlflow_server, mlflow_client, tmp_path):
    """A peer whose image still pulls may come after startupTimeoutSeconds: in a pod (the operator sets
    MWMS_PEER_WAIT_SECONDS=0 and ends a group that is really stuck) the waiting worker does not give up."""
    spec = trainjob_spec("late-peer", 2, {"epochs": 1, "globalBatchSize": 30}, startup_timeout=5)
    g = group(spec, mlflow_server.url, tmp_path, **{names.ENV_PEER_WAIT: "0"}).start(indices=[0])
    try:
        _wait_for(lambda: "waiting for 1 peer(s)" in g.log(0), 600, "the chief to wait for its peer")
        time.sleep(8)  # past the startup timeout; without MWMS_PEER_WAIT_SECONDS=0 the chief exits 75 here
        assert g.procs[0].poll() is None, g.log(0)[-3000:]
        g.start(indices=[1])
        assert g.wait(timeout=HANG_SECONDS) == {0: 0, 1: 0}, g.log(0)[-3000:]
    finally:
        g.kill()
    assert len(runs_of(mlflow_client, "late-peer")) == 1


def test_mlflow_unreachable_exits_75_with_a_clear_message(tmp_path):
    port = free_ports(1)[0]  # nothing listens there
    spec = trainjob_spec("no-mlflow", 1, {"epochs": 1})
    g = group(spec, f"http://127.0.0.1:{port}", tmp_path).start()
    assert g.wait(timeout=HANG_SECONDS) == {0: RETRYABLE}, g.log(0)[-3000:]
    assert g.termination(0).startswith(f"retryable: MLflow at http://127.0.0.1:{port} is unavailable")


@pytest.mark.parametrize(
    "as_pid1",
    [False, pytest.param(True, marks=pytest.mark.skipif(not PID_NAMESPACES, reason=WHY_NOT))],
    ids=["process", "pid1"],
)
def test_peer_lost_after_the_rendezvous_ends_by_sigalrm_at_the_deadline(mlflow_server, tmp_path, as_pid1):
    """The backstop: a peer that answered the rendezvous but never registers (here a bare socket).

    As PID 1 too, where the kernel drops a SIGALRM that has no handler: the trainer's child gets it.
    """
    spec = trainjob_spec("lost-in-registration", 2, {"epochs": 1}, startup_timeout=15)
    g = group(spec, mlflow_server.url, tmp_path)
    peer = json.loads(g.envs[1][names.ENV_TF_CONFIG])["cluster"]["worker"][1]
    with socket.socket() as fake_peer:
        fake_peer.bind(("127.0.0.1", int(peer.rsplit(":", 1)[1])))
        fake_peer.listen(8)
        codes = g.start(indices=[0], as_pid1=as_pid1).wait(timeout=600)
    # Ended by the kernel (SIGALRM's default action): Kubernetes reports 128+14, which the operator retries.
    assert codes == {0: 128 + signal.SIGALRM if as_pid1 else -signal.SIGALRM}, g.log(0)[-3000:]
    assert g.termination(0).startswith("retryable: startup deadline passed in MultiWorkerMirroredStrategy()")
