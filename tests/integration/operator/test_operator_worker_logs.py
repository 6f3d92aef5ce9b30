"""Logs that outlive pods, and why a job is where it is, on the real node: stand-in workers run under the
trainer's own supervisor (`python -m mwms_trainer.pid1`, which keeps each worker's log and uploads it to the
job's MLflow run when the worker exits) with this checkout's trainer and contract packages (a ConfigMap on
their PYTHONPATH, so the test needs no rebuilt image). A group is killed; once the job's pods are gone,
`mwms logs --group 0` reads the killed group's logs from MLflow. `mwms describe` and `mwms events` show the
restart, the run and the workers; `Client.events()` returns the same Events."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mwms import Client
from mwms_kit.submit import run_mwms
from mwms_kit.waits import postmortem_kept

REPO = Path(__file__).resolve().parents[3]
SOURCES = "/mwms/src"


@pytest.fixture(scope="module")
def operator_env(mlflow_uri: str) -> dict[str, str]:
    return {"MWMS_TRACKING_URI": mlflow_uri}


@pytest.fixture
def mwms(cluster: Any, namespace: str) -> Callable[..., Any]:
    return lambda *args: run_mwms(cluster.kubeconfig, namespace, *args, timeout=120)


def source_configmap(kubectl: Any, namespace: str) -> list[dict[str, str]]:
    """This checkout's mwms_contract and mwms_trainer packages as a ConfigMap; the volume's items put each
    file at its package path."""
    files = {
        f"{package}/{path.name}": path
        for package, root in (("mwms_contract", "contract"), ("mwms_trainer", "trainer"))
        for path in sorted((REPO / root / package).glob("*.py"))
    }
    keys = {path: f"file-{i}" for i, path in enumerate(files)}  # a key has no "/"
    data = {keys[path]: source.read_text() for path, source in files.items()}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mwms-src"}, "data": data}
    kubectl.apply(body, "-n", namespace, "--server-side")  # no last-applied copy: it would pass 256 KiB
    return [{"key": key, "path": path} for path, key in keys.items()]


def test_a_killed_groups_logs_are_read_from_mlflow_after_the_pods_are_gone(
    operator, make_standin, standin, kubectl, namespace, mlflow_uri, mwms, cluster, wait_for
):
    items = source_configmap(kubectl, namespace)
    job = make_standin(
        "kept",
        2,
        env={
            "STANDIN_MLFLOW": "first",
            "STANDIN_SLEEP_SECONDS": "600",
            "STANDIN_SLEEP_IN_RESTART": "0",  # group 0 sleeps until it is killed; group 1 finishes
            "PYTHONPATH": SOURCES,
        },
        mlflow={"trackingUri": mlflow_uri, "experiment": f"kept-{namespace}"},
        runPolicy={"cleanPodPolicy": "All", "backoffLimit": 3},
        trainer={"epochs": 1},
        container={
            "command": ["python", "-m", "mwms_trainer.pid1", *standin["command"]],
            "volumeMounts": [{"name": "src", "mountPath": SOURCES, "readOnly": True}],
        },
        template={"spec": {"volumes": [{"name": "src", "configMap": {"name": "mwms-src", "items": items}}]}},
    )
    kubectl.apply(job, "-n", namespace)

    def status() -> dict[str, Any]:
        return kubectl.json("get", "trainjob", "kept", "-n", namespace).get("status") or {}

    wait_for(
        lambda: (status().get("mlflow") or {}).get("runId"), timeout=180, what="the chief's run in status"
    )
    live = mwms("logs", "kept", "--worker", "1")  # group 0, from its pod
    assert live.returncode == 0, live.stderr
    assert "standin: worker 1 of 2, restart 0" in live.stdout

    # `mwms logs -f` of each worker to its container's end (the upload's line is the last): it says why,
    # should MLflow lack a log.
    follow = [sys.executable, "-m", "mwms.cli", "logs", "--namespace", namespace, "kept", "-f", "--worker"]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    tails = [
        subprocess.Popen(
            [*follow, str(i)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for i in range(2)
    ]
    kubectl("delete", "pod", "kept-worker-1", "-n", namespace, "--wait=false")  # a lost worker: a new group
    wait_for(lambda: status().get("phase") == "Succeeded", timeout=240, what="group 1 succeeded")
    wait_for(
        lambda: not kubectl.json("get", "pods", "-n", namespace, "-l", "mwms.dev/job-name=kept")["items"],
        timeout=120,
        what="cleanPodPolicy All deleted every pod",
    )
    assert status()["restarts"] == 1

    ended = "\n".join(tail.communicate(timeout=60)[0][-2000:] for tail in tails)
    killed = mwms("logs", "kept", "--group", "0", "--all")
    assert killed.returncode == 0, killed.stderr + ended
    assert "this worker's log is in MLflow at runs:/" in ended
    assert "[worker-0] standin: worker 0 of 2, restart 0" in killed.stdout
    assert "[worker-1] standin: worker 1 of 2, restart 0" in killed.stdout
    assert "standin: worker 0 reached all 2 workers by name" in killed.stdout
    previous = mwms("logs", "kept", "--previous", "--worker", "1", "--tail", "1")
    assert previous.returncode == 0, previous.stderr
    assert len(previous.stdout.splitlines()) == 1
    last = mwms("logs", "kept")  # the current group's chief, its pod gone: from MLflow too
    assert last.returncode == 0, last.stderr
    assert "standin: worker 0 of 2, restart 1" in last.stdout
    assert "standin: exit 0" in last.stdout
    missing = mwms("logs", "kept", "--group", "2")
    assert missing.returncode == 1
    assert "has groups 0 to 1, not 2" in missing.stderr

    wait_for(
        lambda: postmortem_kept(kubectl.json("get", "trainjob", "kept", "-n", namespace), 1),
        timeout=60,
        what="PostmortemKept of the last group",
    )
    described = mwms("describe", "kept")
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert "Phase:        Succeeded" in text and "Restarts:     1" in text
    assert status()["mlflow"]["runId"] in text
    # The pods are gone: each worker as the last group's post-mortem in the run kept it, marked *; and each
    # worker's peaks from the system metrics it logged there from its container.
    workers = text.split("Workers:")[1].split("Events:")[0]
    assert re.search(r"\n\s+1\*\s+kept-worker-1\s+1\s+Succeeded", workers), workers
    assert "Kept: the workers marked * from the post-mortem of group 1" in workers
    assert "Peaks (each worker's system metrics in the run):" in workers
    events = mwms("events", "kept", "-o", "json")
    assert events.returncode == 0, events.stderr
    reasons = {(e["object"], e["reason"]) for e in json.loads(events.stdout)}
    assert any(obj == "trainjob/kept" for obj, _ in reasons), reasons
    assert any(obj == "pod/kept-worker-1" for obj, _ in reasons), reasons  # the kubelet's, of its pods
    assert ("pod/kept-worker-0", "Killing") in reasons  # the killed group's chief
    sdk = Client(namespace=namespace, kubeconfig=cluster.kubeconfig).events("kept")
    assert {(e.object, e.reason) for e in sdk} == reasons


def test_describe_names_why_a_worker_waits(operator, make_standin, kubectl, namespace, mwms, wait_for):
    """A pod that cannot be scheduled: describe shows the worker's reason and the scheduler's Event."""
    job = make_standin("unplaceable", 1, template={"spec": {"nodeSelector": {"mwms.dev/no-such": "node"}}})
    kubectl.apply(job, "-n", namespace)
    wait_for(
        lambda: "Unschedulable" in mwms("describe", "unplaceable").stdout, timeout=120, what="Unschedulable"
    )
    text = mwms("describe", "unplaceable").stdout
    workers = text.split("Workers:")[1].split("Events:")[0]
    assert "unplaceable-worker-0" in workers and "Unschedulable" in workers
    assert "FailedScheduling" in mwms("events", "unplaceable").stdout
