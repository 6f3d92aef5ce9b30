"""Uninstalling leaves nothing of ours but the CRD and the TrainJobs, on the real node.

Helm: `helm uninstall` leaves none of the chart's objects behind (mwms_dev.chain.Chain.uninstall lists what
is left by the release's instance label): deployments, pods, services, service accounts, config maps, roles
and their bindings in its namespace, ClusterRoles and their bindings; and the leader-election Lease, which the
operator made and Helm does not know, is gone too (the chart's post-delete hook). The tier's shared
`node_chain` must outlive this test, so it installs a release of its own (the same values, operator image and
bundled MLflow), in namespaced mode on its own `restricted` namespace (a second cluster-wide operator would
also act on the other tests' jobs) and without the CRD, which `node_chain`'s release owns.

kustomize: docs/install.md's "keep TrainJobs" commands, read from the doc (mwms_kit/install_doc.py) and run as
a shell script after `kubectl apply -k` of manifests/, with a TrainJob in the operator's namespace (so the
doc's last line keeps the namespace, and what is left in it can be listed). Every kind the API server serves
is listed there afterwards. The install is manifests/ through an overlay that sets MWMS_WATCH_NAMESPACES to
an empty namespace of the test, as the doc's overlay sets other env: its operator must not act on the other
tests' jobs. It reapplies the CRD that `node_chain`'s release installed (the same file), which is left."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mwms_dev.devmode import tools_bin
from mwms_kit.install_doc import kustomize_uninstall_script
from mwms_kit.trainjobs import trainjob

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[2]


def leader_lease(kubectl, namespace: str, selector: str) -> str:
    """The Lease name the operator Deployment selected by `selector` elects its leader on."""
    (deployment,) = kubectl.json("get", "deployments", "-n", namespace, "-l", selector)["items"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (name,) = [e["value"] for e in container["env"] if e["name"] == "MWMS_LEADER_ELECTION_LEASE_NAME"]
    return name


def lease_holder(kubectl, namespace: str, name: str) -> str:
    found = kubectl(
        "get", "lease", name, "-n", namespace, "-o", "jsonpath={.spec.holderIdentity}", check=False
    )
    return found.stdout if found.returncode == 0 else ""


def test_helm_uninstall_leaves_no_operator_objects_and_no_lease(
    node_kubectl, node_namespace, node_chain, wait_for
):
    node_kubectl.restrict(node_namespace)
    chain = replace(
        node_chain,
        release="mwms-uninstall",
        operator_namespace=node_namespace,
        helm_values=[
            *node_chain.helm_values,
            f"operator.watchNamespaces={{{node_namespace}}}",
            "crds.enabled=false",
        ],
    )
    chain.install_chart()
    selector = f"app.kubernetes.io/instance={chain.release},app.kubernetes.io/component=operator"
    lease = leader_lease(node_kubectl, node_namespace, selector)
    wait_for(
        lambda: lease_holder(node_kubectl, node_namespace, lease), timeout=120, what=f"lease/{lease} held"
    )
    chain.uninstall()
    # `helm uninstall` returns once its hooks have run: the Lease is gone when the user gets the prompt back.
    left = node_kubectl("get", "lease", lease, "-n", node_namespace, check=False)
    assert left.returncode != 0 and "NotFound" in left.stderr, f"lease/{lease} is left:\n{left.stdout}"


# -- kustomize, uninstalled as docs/install.md says ----------------------------------------------------------
OURS = "app.kubernetes.io/part-of=mwms,!app.kubernetes.io/instance"  # manifests/'s objects, not a release's


def kinds(kubectl, namespaced: bool) -> str:
    listed = kubectl("api-resources", f"--namespaced={str(namespaced).lower()}", "--verbs=list", "-o", "name")
    return ",".join(listed.stdout.split())


def ours_left(kubectl, namespace: str) -> list[str]:
    """Everything in `namespace` but what Kubernetes puts in every namespace, Events, TrainJobs and what
    they own; and the cluster-wide objects of manifests/ (the CRD and that namespace aside)."""
    found = kubectl.json("get", kinds(kubectl, True), "-n", namespace)["items"]
    found += kubectl.json("get", kinds(kubectl, False), "-l", OURS)["items"]
    allowed = {
        ("ConfigMap", "kube-root-ca.crt"),
        ("ServiceAccount", "default"),
        ("Namespace", namespace),
        ("CustomResourceDefinition", "trainjobs.mwms.dev"),
    }
    left = []
    for item in found:
        kind, meta = item["kind"], item["metadata"]
        owners = {o["kind"] for o in meta.get("ownerReferences", [])}
        if kind in ("Event", "TrainJob") or "TrainJob" in owners or (kind, meta["name"]) in allowed:
            continue
        left.append(f"{kind}/{meta['name']}")
    return sorted(left)


def overlay(directory: Path, watch_namespace: str) -> Path:
    """manifests/ with the operator watching `watch_namespace` only (an env patch, as docs/install.md's)."""
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "mwms-operator", "namespace": "mwms-system"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "operator", "env": [{"name": "MWMS_WATCH_NAMESPACES", "value": watch_namespace}]}
        ]}}},
    }  # fmt: skip
    kustomization = {
        "resources": [os.path.relpath(REPO / "manifests", directory)],  # kustomize refuses an absolute root
        "patches": [{"patch": yaml.safe_dump(patch)}],
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def test_documented_kustomize_uninstall_keeps_only_the_crd_and_the_trainjobs(
    real_cluster, node_kubectl, node_namespace, node_chain, tmp_path, wait_for
):
    built = yaml.safe_load_all(node_kubectl("kustomize", str(REPO / "manifests")).stdout)
    (namespace,) = [d["metadata"]["name"] for d in built if d and d["kind"] == "Namespace"]
    node_kubectl("apply", "-k", str(overlay(tmp_path, node_namespace)))
    try:
        node_kubectl(
            "rollout", "status", "deployment/mwms-operator", "-n", namespace, "--timeout=300s", timeout=320
        )
        lease = leader_lease(node_kubectl, namespace, "app.kubernetes.io/name=mwms-operator")
        wait_for(
            lambda: lease_holder(node_kubectl, namespace, lease), timeout=120, what=f"lease/{lease} held"
        )
        kept = trainjob("kept", 1, namespace=namespace, runPolicy={"suspend": True})
        node_kubectl.apply(kept)
        uid = node_kubectl.json("get", "trainjob", "kept", "-n", namespace)["metadata"]["uid"]
        # The listing sees what the install made, so an empty one after the uninstall means something.
        before = set(ours_left(node_kubectl, namespace))
        made = {"Deployment/mwms-operator", "PodDisruptionBudget/mwms-operator", f"Lease/{lease}"}
        made |= {"Role/mwms-operator-leader-election", "ClusterRole/mwms-operator-kopf"}
        assert made <= before, sorted(made - before)

        env = {**os.environ, "KUBECONFIG": str(real_cluster.kubeconfig)}
        env["PATH"] = f"{tools_bin()}{os.pathsep}{env['PATH']}"
        script = kustomize_uninstall_script()
        done = subprocess.run(
            ["bash", "-e", "-c", script],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"{script}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        # Garbage collection (the Service's EndpointSlices) runs after the deletes return.
        try:
            wait_for(
                lambda: not ours_left(node_kubectl, namespace), timeout=120, interval=2, what="no leftovers"
            )
        except AssertionError as error:
            raise AssertionError(
                f"left after docs/install.md's uninstall: {ours_left(node_kubectl, namespace)}"
            ) from error
        still = node_kubectl.json("get", "trainjob", "kept", "-n", namespace)
        assert still["metadata"]["uid"] == uid, "the TrainJob was deleted and made again"
        node_kubectl("get", "crd", "trainjobs.mwms.dev")
    finally:  # what a failed uninstall left, and the namespace that holds the kept TrainJob
        node_kubectl("delete", "clusterroles,clusterrolebindings", "-l", OURS, check=False)
        node_kubectl(
            "delete", "namespace", namespace, "--wait=true", "--timeout=180s", timeout=200, check=False
        )
