"""Kueue admits a TrainJob's workers as one pod group: real Kueue v0.17.0 (built from its Go module) beside
the local control plane, its webhooks registered by URL, the plain-pod integration on. Two 2-worker jobs in
a queue with quota for 2 workers run one after the other, never half each (which would deadlock MWMS).
Without the pod group (the queue label alone) Kueue admits one worker of each job: tried, this test then fails
with "admitted at once: {'first': 1, 'second': 1}".

Each job's worker 1 outlives its chief, so cleanPodPolicy deletes it while it runs: Kueue ends the group (and
frees its quota and its pods' finalizers) only once every pod is Succeeded or Failed, so a deleted pod must
reach a terminal phase (the kubelet's rule, which the node agent once missed: the later job was then never
admitted and the pods kept Kueue's finalizer)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Kueue may still be building in `make test`'s background (hack/ci/run-tests.py): the module's fixtures wait
# on its build lock, so the timeout counts the tests themselves only.
pytestmark = [
    pytest.mark.kueue,
    pytest.mark.waits_for_build,
    pytest.mark.timeout(func_only=True),
]

SUFFIX = uuid.uuid4().hex[:6]
QUEUE = "mwms-queue"
GATE = "kueue.x-k8s.io/admission"


@pytest.fixture(scope="module")
def kueue(cluster: Any, kubectl: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from mwms_dev.kueue import Kueue

    binary = os.environ.get("MWMS_KUBECTL") or str(Path(sys.executable).parent / "kubectl")
    running = Kueue(cluster.kubeconfig, binary, tmp_path_factory.mktemp("kueue")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def queued_namespace(kubectl: Any, namespace: str, kueue: Any, wait_for: Any) -> Iterator[str]:
    """The test namespace, served by Kueue's pod webhook, with a LocalQueue whose ClusterQueue holds 200m
    CPU: two workers of 100m each."""
    kubectl("label", "namespace", namespace, "mwms.dev/kueue=enabled")
    flavor, cluster_queue = f"flavor-{SUFFIX}", f"cq-{namespace}"
    kubectl.apply(
        [
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [
                                {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "200m"}]}
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            },
        ]
    )

    def queue_active() -> bool:
        status = kubectl.json("get", "localqueue", QUEUE, "-n", namespace).get("status", {})
        return any(c["type"] == "Active" and c["status"] == "True" for c in status.get("conditions", []))

    wait_for(queue_active, timeout=60, what="the LocalQueue to be active")
    yield namespace
    # Kueue holds a finalizer on the pods it manages and lets them go once their group has ended: the pods of
    # deleted jobs must go without help. (If not, the finalizers are taken off after the failure, so no pod
    # is left behind for the rest of the suite.)
    kubectl("delete", "trainjobs", "--all", "-n", namespace, "--timeout=60s", check=False)
    try:
        wait_for(
            lambda: not kubectl.json("get", "pods", "-n", namespace)["items"],
            timeout=90,
            what="the Kueue-managed pods to be gone",
        )
    finally:
        unfinalize = '{"metadata":{"finalizers":null}}'
        for pod in kubectl.json("get", "pods", "-n", namespace)["items"]:
            name = pod["metadata"]["name"]
            kubectl("patch", "pod", name, "-n", namespace, "--type=merge", "-p", unfinalize, check=False)
    kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
    kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def queued_job(make_standin: Any, name: str) -> dict[str, Any]:
    return make_standin(
        name,
        2,
        labels={"kueue.x-k8s.io/queue-name": QUEUE},
        env={"STANDIN_SLEEP_SECONDS": "6", "STANDIN_LINGER_SECONDS": "300"},
        container={"resources": {"requests": {"cpu": "100m"}}},
    )


def test_two_jobs_with_quota_for_one_run_one_after_the_other(
    operator, kubectl, make_standin, queued_namespace
):
    namespace = queued_namespace
    kubectl.apply([queued_job(make_standin, "first"), queued_job(make_standin, "second")], "-n", namespace)
    admitted_together: list[str] = []
    ran: dict[str, float] = {}  # job -> when its pods were first seen admitted
    finished: dict[str, float] = {}
    deadline = time.monotonic() + 240
    while len(finished) < 2 and time.monotonic() < deadline:
        pods = kubectl.json("get", "pods", "-n", namespace)["items"]
        admitted: dict[str, int] = {}
        gated: dict[str, int] = {}
        for pod in pods:
            job = pod["metadata"]["labels"]["mwms.dev/job-name"]
            assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == f"{job}-0"
            gates = {g["name"] for g in pod["spec"].get("schedulingGates") or []}
            active = pod["status"].get("phase") in ("Pending", "Running") and not pod["metadata"].get(
                "deletionTimestamp"
            )
            if GATE in gates:
                gated[job] = gated.get(job, 0) + 1
            elif active:
                admitted[job] = admitted.get(job, 0) + 1
                ran.setdefault(job, time.monotonic())
        if len(admitted) > 1:
            admitted_together.append(f"admitted at once: {admitted}, gated: {gated}")
        for job in ("first", "second"):
            status = kubectl.json("get", "trainjob", job, "-n", namespace).get("status", {})
            if status.get("phase") == "Succeeded":
                finished.setdefault(job, time.monotonic())
            assert status.get("phase") != "Failed", status
        time.sleep(0.3)
    assert not admitted_together, "both jobs held workers at once:\n" + "\n".join(admitted_together[:10])
    assert set(finished) == {"first", "second"}, f"finished: {finished}, admitted: {ran}"
    # One after the other: the later job was admitted only after the earlier one finished.
    earlier, later = sorted(ran, key=ran.__getitem__)
    assert ran[later] >= finished[earlier] - 1.0, (ran, finished)
    # Kueue admitted each job as one Workload of 2 pods.
    workloads = kubectl.json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]
    assert sorted(sum(ps["count"] for ps in w["spec"]["podSets"]) for w in workloads) == [2, 2]
