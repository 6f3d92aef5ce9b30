"""Native gang scheduling at a burst beyond capacity, on KWOK's fake nodes beside a control plane with the
GenericWorkload gate on (LocalCluster(gang=True)) and the operator: 3 nodes of 3 CPUs hold 2 groups of 4
one-CPU workers, and 1 CPU no group can use. With spec.scheduling.gang Auto no group ever has a part of its
workers bound, the waiting jobs say how many workers fit, and once room appears the next groups bind whole.
The same burst with gang Off binds a partial group (the control that shows the burst can)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition

# func_only: the fixture may wait on a cold KWOK build in `make test`'s background (hack/build/build-kwok.sh's
# lock), bounded by mwms_dev.kwok.build's own timeout.
pytestmark = [pytest.mark.waits_for_build, pytest.mark.timeout(600, func_only=True)]

NODES, NODE_CPUS, REPLICAS, JOBS = 3, 3, 4, 5  # room for 9 workers: 2 whole groups of 4, and 1 CPU spare
CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd.yaml"


@pytest.fixture(scope="module")
def gang_cluster(
    tmp_path_factory: pytest.TempPathFactory, cluster_platform: None, subnet_index: int, make_kubectl: Any
) -> Iterator[Any]:
    from mwms_dev.cluster import LocalCluster
    from mwms_dev.kwok import Kwok, build, fake_nodes
    from mwms_kit.operator_harness import OperatorProcess, apply_operator_rbac, service_account_kubeconfig

    build()  # before the control plane starts: a cold build in the background may take minutes
    state = tmp_path_factory.mktemp("gang")
    # The scale tier's index (+5): the integration tier's cluster runs beside this lane on the index itself.
    with LocalCluster("gang", state / "cluster", subnet_index=subnet_index + 5, gang=True) as cluster:
        kubectl = make_kubectl(cluster.kubeconfig)
        kubectl("apply", "-f", str(CRD))
        kubectl("wait", "--for=condition=Established", "crd/trainjobs.mwms.dev", "--timeout=60s")
        apply_operator_rbac(kubectl)  # the operator with its own rights: podgroups among them
        account = service_account_kubeconfig(kubectl, cluster, state / "operator.kubeconfig")
        # The simulated workers log to no tracking server: no MLflow look at each job's end.
        quiet = {"MWMS_TRACKING_URI": "file:///nonexistent/mlruns"}
        operator = OperatorProcess(account, state / "operator.log", quiet)
        with Kwok(cluster.kubeconfig, state / "kwok") as kwok:
            kwok.add_nodes(fake_nodes(NODES, cpu=str(NODE_CPUS), memory="64Gi"))
            operator.start()
            try:
                yield kubectl, operator
            finally:
                operator.stop()


def burst(gang: str) -> list[dict[str, Any]]:
    """JOBS jobs of REPLICAS one-CPU workers that run until deleted (KWOK's Stages: bench/scale/stages)."""
    template = {
        "metadata": {"annotations": {"kwok.mwms.dev/exit-code": "0"}},  # no run-for: runs until deleted
        "spec": {"containers": [{"name": "trainer", "resources": {"requests": {"cpu": "1"}}}]},
    }
    return [
        trainjob(
            f"job-{i}",
            REPLICAS,
            template=template,
            scheduling={"gang": gang},
            runPolicy={"containerErrorGraceSeconds": 1800},
        )  # fmt: skip
        for i in range(JOBS)
    ]


def bound_workers(kubectl: Any, namespace: str) -> dict[str, int]:
    """Each job's workers bound to a node, of the pods not being deleted."""
    bound = {f"job-{i}": 0 for i in range(JOBS)}
    for pod in kubectl.json("get", "pods", "-n", namespace)["items"]:
        if pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            bound[pod["metadata"]["labels"]["mwms.dev/job-name"]] += 1
    return bound


def waiting_messages(kubectl: Any, namespace: str) -> dict[str, str]:
    """The Running condition's message of each job that is not Running."""
    said = {}
    for job in kubectl.json("get", "trainjobs", "-n", namespace)["items"]:
        running = condition(job, "Running")
        if running is not None and running.status == "False":
            said[job["metadata"]["name"]] = running.message
    return said


def settled(kubectl: Any, namespace: str, jobs: int, running: int) -> dict[str, int] | None:
    """Once `running` of the `jobs` left have their groups running and the scheduler has said of each other
    one that it has room for 1 of its workers, the workers bound by job; None before. Nothing moves then: no
    worker ends."""
    waiting = waiting_messages(kubectl, namespace)
    told = [m for m in waiting.values() if "finds room for 1 of them" in m]
    if len(waiting) != jobs - running or len(told) != len(waiting):
        return None
    bound = bound_workers(kubectl, namespace)
    return bound if sum(bound.values()) == running * REPLICAS else None


def test_a_burst_beyond_capacity_binds_no_partial_group_and_the_next_groups_bind_whole(
    gang_cluster, wait_for
):
    kubectl, operator = gang_cluster
    with kubectl.fresh_namespace("gang") as namespace:
        kubectl.apply(burst("Auto"), "-n", namespace)
        first = wait_for(lambda: settled(kubectl, namespace, JOBS, 2), timeout=240, interval=1,
                         what="2 groups bound, 3 told they wait")  # fmt: skip
        assert sorted(first.values()) == [0, 0, 0, REPLICAS, REPLICAS], first
        groups = kubectl.json("get", "podgroups.scheduling.k8s.io", "-n", namespace)["items"]
        assert sorted(g["metadata"]["name"] for g in groups) == [f"job-{i}-0" for i in range(JOBS)]
        assert {g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups} == {REPLICAS}
        message = next(iter(waiting_messages(kubectl, namespace).values()))
        assert "places the 4 workers all at once or none" in message, message
        assert "Insufficient cpu" in message, message

        running = [job for job, count in first.items() if count]
        kubectl("delete", "trainjob", *running, "-n", namespace)  # their pods go: room for 2 more groups
        second = wait_for(lambda: settled(kubectl, namespace, JOBS - 2, 2), timeout=240, interval=1,
                          what="the next 2 groups bound whole")  # fmt: skip
        assert sorted(second.values()) == [0, 0, 0, REPLICAS, REPLICAS], second
        assert not set(running) & {job for job, count in second.items() if count}
        kubectl("delete", "trainjobs", "--all", "-n", namespace, "--wait=true", "--timeout=120s")
    assert operator.process is not None and operator.process.poll() is None, operator.log()[-3000:]


def test_without_gang_the_same_burst_binds_a_partial_group(gang_cluster, wait_for):
    kubectl, _ = gang_cluster
    with kubectl.fresh_namespace("nogang") as namespace:
        kubectl.apply(burst("Off"), "-n", namespace)

        def partial() -> dict[str, int] | None:
            bound = bound_workers(kubectl, namespace)
            return bound if sum(bound.values()) == NODES * NODE_CPUS else None  # every CPU taken

        bound = wait_for(partial, timeout=240, interval=1, what="every CPU taken by a worker")
        assert any(0 < count < REPLICAS for count in bound.values()), json.dumps(bound)
        assert kubectl.json("get", "podgroups.scheduling.k8s.io", "-n", namespace)["items"] == []
        kubectl("delete", "trainjobs", "--all", "-n", namespace, "--wait=true", "--timeout=120s")
