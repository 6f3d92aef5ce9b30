"""SIGTERM ends a worker that is its container's PID 1 promptly, with exit 143, wherever it is.

Each worker runs as PID 1 of its own PID namespace and is signalled from outside it, as a container runtime
does when a pod is deleted. "Promptly" here is by its own doing, before the kubelet's default grace period
(30 s) would end in a SIGKILL: exit 143 and its termination message, or PID 1's own SIGKILL of a child that
ignores the signal (2 s after it). How fast that is, is measured, not asserted: the times go to the test
output (-s) and to `python -m mwms_bench trainer-sigterm`'s records; a cold CI run at load ~11 once took more
than 5 s.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Callable

import pytest
from tf_support import HANG_SECONDS, Group, StallingProxy, group, trainjob_spec

from mwms_contract import names
from mwms_kit.pid_namespace import AVAILABLE, WHY_NOT, pid1_of

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)
GRACE_PERIOD_SECONDS = 30  # a pod's default terminationGracePeriodSeconds
SIGTERM_EXIT = 128 + signal.SIGTERM


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def sigterm_and_wait(g: Group, killed: bool = False) -> float:
    """SIGTERM to worker 0's PID 1 from outside its namespace; its exit code must be 143 within the grace
    period.

    killed: the trainer itself ignores SIGTERM there, so PID 1 ends it with SIGKILL (said in the log).
    """
    sent = time.monotonic()
    os.kill(pid1_of(g.procs[0]), signal.SIGTERM)
    code = g.procs[0].wait(timeout=GRACE_PERIOD_SECONDS)
    seconds = time.monotonic() - sent
    print(f"SIGTERM to exit: {seconds:.3f} s")
    assert code == SIGTERM_EXIT, g.log(0)[-3000:]
    assert g.termination(0) == "retryable: stopped by SIGTERM"
    assert ("sent SIGKILL" in g.log(0)) == killed
    return seconds


def test_sigterm_while_waiting_for_a_peer(mlflow_server, tmp_path):
    g = group(
        trainjob_spec("sigterm-waiting", 2, {"epochs": 1}, startup_timeout=600), mlflow_server.url, tmp_path
    )
    try:
        g.start(indices=[0], as_pid1=True)  # worker 1 never comes
        _wait_for(lambda: "waiting for 1 peer(s)" in g.log(0), HANG_SECONDS, "the rendezvous")
        sigterm_and_wait(g)
    finally:
        g.kill()


def test_sigterm_inside_the_strategy_constructor(mlflow_server, tmp_path):
    """The peer answered the rendezvous but never registers: the worker is blocked in C++, holding the GIL."""
    spec = trainjob_spec("sigterm-registering", 2, {"epochs": 1}, startup_timeout=600)
    g = group(spec, mlflow_server.url, tmp_path)
    peer = json.loads(g.envs[1][names.ENV_TF_CONFIG])["cluster"]["worker"][1]
    with socket.socket() as fake_peer:
        fake_peer.bind(("127.0.0.1", int(peer.rsplit(":", 1)[1])))
        fake_peer.listen(8)
        try:
            g.start(indices=[0], as_pid1=True)
            registering = "registering with MultiWorkerMirroredStrategy()"
            _wait_for(lambda: registering in g.log(0), HANG_SECONDS, "registration")
            time.sleep(1)  # inside the constructor by now, where TensorFlow's own handler takes SIGTERM
            sigterm_and_wait(g, killed=True)
        finally:
            g.kill()


def test_sigterm_mid_fit(mlflow_server, tmp_path):
    trainer = {"dataset": "synthetic", "syntheticSamples": 50000, "epochs": 200, "hiddenUnits": [64]}
    g = group(trainjob_spec("sigterm-fit", 1, trainer), mlflow_server.url, tmp_path)
    try:
        g.start(as_pid1=True)
        _wait_for(lambda: "epoch 2/200" in g.log(0), HANG_SECONDS, "the second epoch")
        sigterm_and_wait(g)
    finally:
        g.kill()


def test_sigterm_during_the_model_upload(mlflow_server, tmp_path):
    proxy = StallingProxy(mlflow_server.url, lambda method, path: method == "PUT" and "artifacts" in path)
    g = group(trainjob_spec("sigterm-upload", 1, {"epochs": 1}), proxy.url, tmp_path)
    try:
        g.start(as_pid1=True)
        _wait_for(proxy.stalled.is_set, HANG_SECONDS, "the model upload")
        sigterm_and_wait(g)
    finally:
        g.kill()
        proxy.close()
