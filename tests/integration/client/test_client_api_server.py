"""The `mwms` command against a real API server (no operator, no node): every placement flag gives a TrainJob
the API server accepts and keeps as built (no field pruned); kubectl's habits (global flags before the verb,
-l, -o jsonpath, -w); and our TrainJobs beside Kubeflow Trainer v2's, each seen by its own full name."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest
import yaml

from mwms_kit.submit import run_mwms

FLAGS = [
    *("--cpu", "250m", "--memory", "64Mi", "--gpu", "1", "--env", "A=1", "--env", "B=two"),
    *("--label", "team=a", "--queue", "gpus", "--node-selector", "pool=p", "--toleration", "k=v:NoSchedule"),
    *("--toleration", "spot:NoExecute", "--deadline", "2h", "--backoff-limit", "1"),
]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hello')\n")
    return path


@pytest.fixture
def mwms(cluster: Any, namespace: str):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = run_mwms(cluster.kubeconfig, namespace, *args, timeout=120)
        assert not check or done.returncode == 0, f"mwms {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    return run


def test_every_flag_gives_a_trainjob_the_api_server_keeps_as_built(
    mwms, kubectl, namespace, script, tmp_path
):
    template = tmp_path / "pod.yaml"
    template.write_text(yaml.safe_dump({"spec": {"serviceAccountName": "trainer", "priorityClassName": "x"}}))
    flags = [*FLAGS, "--template", str(template), "--name", "placed"]
    built = yaml.safe_load(mwms("submit", str(script), *flags, "--dry-run", "-o", "yaml").stdout)
    mwms("submit", str(script), *flags)
    stored = kubectl.json("get", "trainjobs.mwms.dev", "placed", "-n", namespace)
    assert (
        stored["metadata"]["labels"]
        == built["metadata"]["labels"]
        == {
            "team": "a",
            "kueue.x-k8s.io/queue-name": "gpus",
        }
    )
    assert stored["spec"]["template"] == built["spec"]["template"]
    assert stored["spec"]["image"] == built["spec"]["image"]
    pod = stored["spec"]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["nodeSelector"]) == ("trainer", {"pool": "p"})
    assert pod["containers"][0]["resources"]["limits"] == {
        "cpu": "250m",
        "memory": "64Mi",
        "nvidia.com/gpu": "1",
    }
    run_policy = stored["spec"]["runPolicy"]  # the CRD's defaults are added; ours are kept
    assert (run_policy["activeDeadlineSeconds"], run_policy["backoffLimit"]) == (7200, 1)


def test_the_api_server_refuses_what_the_crd_refuses_and_nothing_is_left(mwms, kubectl, namespace, script):
    done = mwms("submit", str(script), "--name", "late", "--deadline", "4000d", check=False)
    assert done.returncode == 2 and "activeDeadlineSeconds" in done.stderr
    assert kubectl("get", "configmaps", "-n", namespace, "-o", "name").stdout.count("late-code") == 0


def test_global_flags_before_the_verb_selectors_and_jsonpath(mwms, cluster, namespace, script):
    mwms("submit", str(script), "--name", "one", "--label", "team=a")
    mwms("submit", str(script), "--name", "two", "--label", "team=b")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}

    def listed(*args: str) -> str:
        argv = [sys.executable, "-m", "mwms.cli", "-n", namespace, *args]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    names = "jsonpath={.items[*].metadata.name}"
    assert listed("-o", names, "list") == "one two\n"
    assert listed("list", "-l", "team=b", "-o", names) == "two\n"
    columns = "custom-columns=NAME:.metadata.name,TEAM:.metadata.labels.team"
    assert listed("get", "one", "-o", columns).split() == ["NAME", "TEAM", "one", "a"]


def test_list_watch_prints_a_job_created_after_it_started(mwms, cluster, namespace, script):
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    argv = [sys.executable, "-m", "mwms.cli", "list", "-w", "-o", "name", "-n", namespace]
    watching = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watching.stdout], daemon=True).start()
    try:
        assert lines.get(timeout=60) == "\n"  # the empty list first: nothing yet, then the watch
        mwms("submit", str(script), "--name", "later")
        assert lines.get(timeout=60) == "trainjob.mwms.dev/later\n"
    finally:
        watching.terminate()
        watching.wait(timeout=30)


def test_our_trainjobs_and_kubeflows_live_side_by_side(mwms, kubectl, namespace, script):
    mwms("submit", str(script), "--name", "ours")
    theirs = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "theirs", "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    kubectl.apply(theirs)
    assert mwms("list", "-o", "name").stdout.split() == ["trainjob.mwms.dev/ours"]
    assert kubectl("get", "trainjobs.mwms.dev", "-n", namespace, "-o", "name").stdout.split() == [
        "trainjob.mwms.dev/ours"
    ]
    assert kubectl("get", "tj", "-n", namespace, "-o", "name").stdout.split() == ["trainjob.mwms.dev/ours"]
    assert kubectl("get", "trainjobs.trainer.kubeflow.org", "-n", namespace, "-o", "name").stdout.split() == [
        "trainjob.trainer.kubeflow.org/theirs"
    ]
    mwms("delete", "ours")  # ours only: theirs stays
    assert (
        kubectl("get", "trainjobs.trainer.kubeflow.org", "theirs", "-n", namespace, check=False).returncode
        == 0
    )
