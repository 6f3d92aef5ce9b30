"""The local control plane behaves as a real one: schema validation, garbage collection, scheduling, and
a stop that leaves no process behind. (Running pods on the real node: tests/node/test_real_node.py.)"""

from __future__ import annotations

from pathlib import Path

from mwms_contract.names import TRAINER_IMAGE

CRD_NAME = "widgets.controlplane-test.mwms.dev"
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": CRD_NAME},
    "spec": {
        "group": "controlplane-test.mwms.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["replicas"],
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 1},
                                    "colour": {"type": "string"},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}
# Matches no node, so these pods are never scheduled and never run: only the API objects matter.
NOWHERE = {"mwms.dev/controlplane-test": "nowhere"}


def widget(name: str, namespace: str, replicas: object) -> dict:
    return {
        "apiVersion": "controlplane-test.mwms.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "colour": "blue"},
    }


def pod(name: str, namespace: str, **spec_extra: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"test": name.rsplit("-", 1)[0]}},
        "spec": {
            "containers": [
                {"name": "main", "image": f"{TRAINER_IMAGE}:0.1.0", "command": ["python", "-c", "pass"]}
            ],
            **spec_extra,
        },
    }


def test_crd_schema_rejects_a_wrong_typed_field_naming_it(kubectl, namespace):
    kubectl.apply(WIDGET_CRD)
    kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")

    kubectl.apply(widget("good", namespace, 2))
    assert kubectl.json("get", "widget", "good", "-n", namespace)["spec"]["replicas"] == 2

    # --validate=false: kubectl checks nothing itself, so the rejection is the API server's.
    result = kubectl.apply(widget("bad", namespace, "two"), "--validate=false", check=False)
    assert result.returncode != 0
    assert "spec.replicas" in result.stderr
    assert "integer" in result.stderr
    missing = kubectl("get", "widget", "bad", "-n", namespace, check=False)
    assert "NotFound" in missing.stderr


def test_deleting_the_owner_deletes_its_pods(kubectl, namespace, wait_for):
    kubectl.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}}
    )
    uid = kubectl.json("get", "configmap", "owner", "-n", namespace)["metadata"]["uid"]
    owner_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    owned = [pod(f"owned-{i}", namespace, nodeSelector=NOWHERE) for i in range(2)]
    for item in owned:
        item["metadata"]["ownerReferences"] = [owner_ref]
    kubectl.apply([*owned, pod("bystander-0", namespace, nodeSelector=NOWHERE)])
    assert len(kubectl.json("get", "pods", "-n", namespace, "-l", "test=owned")["items"]) == 2

    kubectl("delete", "configmap", "owner", "-n", namespace)

    wait_for(
        lambda: not kubectl.json("get", "pods", "-n", namespace, "-l", "test=owned")["items"],
        timeout=60,
        what="the garbage collector to delete the owned pods",
    )
    assert kubectl.json("get", "pod", "bystander-0", "-n", namespace)["metadata"]["name"] == "bystander-0"


def test_pod_needing_more_cpu_than_the_node_has_stays_pending(kubectl, namespace, wait_for):
    allocatable = kubectl.json("get", "node", "node-1")["status"]["allocatable"]["cpu"]
    greedy = pod("greedy-0", namespace)
    greedy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    assert not allocatable.endswith("m") and int(allocatable) < 1000
    kubectl.apply(greedy)

    def unschedulable():
        status = kubectl.json("get", "pod", "greedy-0", "-n", namespace)["status"]
        scheduled = next((c for c in status.get("conditions", []) if c["type"] == "PodScheduled"), None)
        return scheduled if scheduled and scheduled["status"] == "False" else None

    condition = wait_for(unschedulable, timeout=60, what="the scheduler to give up on greedy-0")
    assert condition["reason"] == "Unschedulable"
    assert "Insufficient cpu" in condition["message"]

    def failed_scheduling_events():
        events = kubectl.json(
            "get", "events", "-n", namespace,
            "--field-selector", "involvedObject.name=greedy-0,reason=FailedScheduling",
        )  # fmt: skip
        return events["items"]

    events = wait_for(failed_scheduling_events, timeout=30, what="a FailedScheduling event")
    assert "Insufficient cpu" in events[0]["message"]
    current = kubectl.json("get", "pod", "greedy-0", "-n", namespace)
    assert current["status"]["phase"] == "Pending"
    assert not current["spec"].get("nodeName")


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/pid/stat), or None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def test_stop_leaves_no_process_and_no_bridge_behind(
    cluster_platform, spare_subnet_index, tmp_path, make_kubectl, wait_for
):
    from mwms_dev.cluster import LocalCluster
    from mwms_dev.network import bridge_exists

    # The control plane alone: this cluster runs beside the tier's, which holds the machine's one real node.
    local = LocalCluster(name="leakcheck", state_dir=tmp_path / "state", subnet_index=spare_subnet_index)
    try:
        local.start()
        kubectl = make_kubectl(local.kubeconfig)
        wait_for(
            lambda: kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            timeout=30,
            what="the default serviceaccount",
        )
        started = {pid: _start_time(pid) for pid in local.pids()}
        # etcd, the API server and the two controllers at least.
        assert len([t for t in started.values() if t]) >= 4, started
    finally:
        local.stop()
    local.stop()  # idempotent

    survivors = {pid for pid, t in started.items() if t is not None and _start_time(pid) == t}
    assert not survivors, f"still running after stop(): {survivors}"
    assert not bridge_exists(local.net)
    netns_dir = Path("/run/netns")
    sandboxes = [p.name for p in netns_dir.iterdir()] if netns_dir.is_dir() else []
    assert not [name for name in sandboxes if name.startswith(f"{local.net.bridge}-")]
