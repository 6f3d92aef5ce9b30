"""`mwms logs -f` and `mwms wait` against the real API server (and the operator, for phases): each ends, and
says what it waited for or why it ended, where before it waited for ever."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from mwms_kit.submit import run_mwms

pytestmark = pytest.mark.integration


@pytest.fixture
def mwms(cluster: Any, namespace: str) -> Callable[..., Any]:
    return lambda *args, timeout=300: run_mwms(cluster.kubeconfig, namespace, *args, timeout=timeout)


def trainjob(name: str, **spec: Any) -> dict[str, Any]:
    """A TrainJob that never gets a pod: suspended, should an operator run (`operator` is module-scoped)."""
    return {
        "apiVersion": "mwms.dev/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "runPolicy": {"suspend": True}, **spec},
    }


def test_logs_follow_of_a_job_whose_chief_never_comes_ends_after_its_bound(crd, kubectl, namespace, mwms):
    kubectl.apply(trainjob("nopods"), "-n", namespace)
    done = mwms("logs", "nopods", "-f", "--pod-running-timeout", "3s")
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(
        "mwms logs: waiting for pod nopods-worker-0 to be created (trainjob/nopods is "
    )
    assert "the chief pod nopods-worker-0 did not start within 3s" in lines[-1]


def test_logs_follow_ends_when_the_job_is_deleted_while_it_waits(cluster, crd, kubectl, namespace, wait_for):
    kubectl.apply(trainjob("deleted"), "-n", namespace)
    following = subprocess.Popen(
        [sys.executable, "-m", "mwms.cli", "logs", "--namespace", namespace, "deleted", "-f"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(following.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        wait_for(lambda: said, timeout=60, what="mwms logs -f to say what it waits for")
        assert said[0].startswith("mwms logs: waiting for pod deleted-worker-0 to be created")
        kubectl("delete", "trainjob", "deleted", "-n", namespace, "--wait=true")
        assert following.wait(timeout=60) == 1
    finally:
        if following.poll() is None:
            following.kill()
            following.wait()
    reader.join(timeout=10)
    assert said[-1] == "mwms logs: trainjob/deleted was deleted before its chief's log began\n"


def test_wait_returns_on_a_suspended_job_with_exit_3_and_takes_a_set_of_phases(
    operator, kubectl, namespace, mwms, make_standin
):
    kubectl.apply(trainjob("held"), "-n", namespace)
    waited = mwms("wait", "held", "--timeout", "2m")
    assert (waited.returncode, waited.stdout) == (3, "trainjob/held Suspended\n"), waited.stderr
    assert "trainjob/held is Suspended" in waited.stderr

    kubectl.apply(make_standin("runs", 1, env={"STANDIN_SLEEP_SECONDS": "3600"}), "-n", namespace)
    running = mwms("wait", "runs", "--for", "Running,Succeeded", "--timeout", "4m")
    assert (running.returncode, running.stdout) == (0, "trainjob/runs Running\n"), running.stderr
    kubectl("delete", "trainjob", "runs", "held", "-n", namespace, "--wait=false")
