"""Native gang scheduling's objects on the real control plane. The tier's cluster serves the PodGroup API
(every test cluster runs with the GenericWorkload gate on): each group gets a PodGroup of its size, owned
by the TrainJob, which its workers name; a restarted group gets a new one and the old one goes; deleting
the job deletes them; spec.scheduling.gang Off makes none. A control plane of this module's own, with the
gate off (`gangless`), serves no PodGroup API: Required fails the job saying why, Auto runs it without one.
The scheduler holding a gang that does not fit: tests/node/test_node_gang.py, tests/scale/test_scale_gang.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_contract.conditions import GANG_SCHEDULING_UNAVAILABLE
from mwms_kit.operator_harness import OperatorProcess, apply_operator_rbac, service_account_kubeconfig
from mwms_kit.trainjobs import trainjob
from mwms_kit.waits import condition, get_job, pods_of, wait_condition

PODGROUPS = "podgroups.scheduling.k8s.io"
CRD = Path(__file__).resolve().parents[3] / "manifests" / "crd.yaml"


def pod_groups(kubectl: Any, namespace: str) -> dict[str, dict[str, Any]]:
    return {g["metadata"]["name"]: g for g in kubectl.json("get", PODGROUPS, "-n", namespace)["items"]}


def named_groups(pods: list[dict[str, Any]]) -> list[str | None]:
    """The PodGroup each pod names (None: none), in the pods' order."""
    return [(p["spec"].get("schedulingGroup") or {}).get("podGroupName") for p in pods]


def test_a_group_gets_a_pod_group_of_its_size_owned_by_the_job_which_its_workers_name(
    operator, make_standin, kubectl, namespace
):
    job = make_standin("gang", 3, scheduling={"gang": "Required"}, runPolicy={"cleanPodPolicy": "None"})
    kubectl.apply(job, "-n", namespace)
    done = wait_condition(kubectl, namespace, "gang", "Succeeded")

    groups = pod_groups(kubectl, namespace)
    assert list(groups) == ["gang-0"], groups
    group = groups["gang-0"]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("TrainJob", "gang", done["metadata"]["uid"])
    scheduled = {c["type"]: c["status"] for c in group["status"]["conditions"]}
    assert scheduled.get("PodGroupInitiallyScheduled") == "True", group["status"]
    assert named_groups(pods_of(kubectl, namespace, "gang")) == ["gang-0"] * 3


def test_a_restarted_group_gets_a_new_pod_group_and_the_old_one_goes(
    operator, make_standin, kubectl, namespace, wait_for
):
    # Worker 1 exits 75 in the first group only: one counted restart, then the second group succeeds.
    env = {"STANDIN_FAIL_INDEX": "1", "STANDIN_EXIT_CODE": "75", "STANDIN_FAIL_IN_RESTARTS": "0"}
    kubectl.apply(make_standin("gang", 2, env=env, runPolicy={"cleanPodPolicy": "None"}), "-n", namespace)
    done = wait_condition(kubectl, namespace, "gang", "Succeeded")
    assert done["status"]["restarts"] == 1, done["status"]

    groups = wait_for(lambda: (g := pod_groups(kubectl, namespace)) and "gang-0" not in g and g,
                      timeout=60, what="the first group's PodGroup to go")  # fmt: skip
    assert list(groups) == ["gang-1"]
    assert groups["gang-1"]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert named_groups(pods_of(kubectl, namespace, "gang")) == ["gang-1"] * 2


def test_deleting_the_job_deletes_its_pod_group(operator, make_standin, kubectl, namespace, wait_for):
    kubectl.apply(make_standin("gang", 2, env={"STANDIN_SLEEP_SECONDS": "600"}), "-n", namespace)
    wait_condition(kubectl, namespace, "gang", "Running")
    assert list(pod_groups(kubectl, namespace)) == ["gang-0"]

    kubectl("delete", "trainjob", "gang", "-n", namespace)
    wait_for(lambda: not pod_groups(kubectl, namespace), timeout=120, what="the PodGroup to go with its job")


def test_gang_off_creates_no_pod_group(operator, make_standin, kubectl, namespace):
    job = make_standin("nogang", 2, scheduling={"gang": "Off"}, runPolicy={"cleanPodPolicy": "None"})
    kubectl.apply(job, "-n", namespace)
    wait_condition(kubectl, namespace, "nogang", "Succeeded")
    assert pod_groups(kubectl, namespace) == {}
    assert named_groups(pods_of(kubectl, namespace, "nogang")) == [None, None]


@pytest.fixture(scope="module")
def gangless(
    control_plane_cluster: Callable[..., Any],
    spare_subnet_index: int,
    make_kubectl: Any,
    wait_for: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """A control plane with the GenericWorkload gate off (no node: no worker has to run), the CRD, and the
    operator with its own rights; its kubectl."""
    state = tmp_path_factory.mktemp("gangless")
    with control_plane_cluster("gangless", state / "cluster", spare_subnet_index, gang=False) as cluster:
        kubectl = make_kubectl(cluster.kubeconfig)
        assert kubectl("get", PODGROUPS, "-A", check=False).returncode != 0, "the PodGroup API is served"
        kubectl("apply", "-f", str(CRD))
        wait_for(lambda: kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
                 timeout=60, what="the TrainJob resource to be served")  # fmt: skip
        apply_operator_rbac(kubectl)
        account = service_account_kubeconfig(kubectl, cluster, state / "operator.kubeconfig")
        # No worker runs here: no tracking server to look at.
        operator = OperatorProcess(
            account, state / "operator.log", {"MWMS_TRACKING_URI": "file:///nonexistent/mlruns"}
        )
        operator.start()
        try:
            yield kubectl
        finally:
            operator.stop()


def test_required_where_the_api_is_not_served_fails_the_job_saying_why_and_creates_no_worker(gangless):
    kubectl = gangless
    with kubectl.fresh_namespace("required") as namespace:
        kubectl.apply(trainjob("required", 2, scheduling={"gang": "Required"}), "-n", namespace)
        job = wait_condition(kubectl, namespace, "required", "Failed")
        failed = condition(job, "Failed")
        assert failed is not None and failed.reason == GANG_SCHEDULING_UNAVAILABLE, job["status"]
        assert "spec.scheduling.gang is Required" in failed.message, failed.message
        assert "does not serve the PodGroup API" in failed.message, failed.message
        assert pods_of(kubectl, namespace, "required") == []


def test_auto_where_the_api_is_not_served_creates_the_workers_without_a_pod_group(gangless, wait_for):
    kubectl = gangless
    with kubectl.fresh_namespace("auto") as namespace:
        kubectl.apply(trainjob("auto", 2), "-n", namespace)
        pods = wait_for(lambda: len(p := pods_of(kubectl, namespace, "auto")) == 2 and p, timeout=60,
                        what="the job's 2 workers")  # fmt: skip
        assert named_groups(pods) == [None, None]
        assert condition(get_job(kubectl, namespace, "auto"), "Failed") is None
