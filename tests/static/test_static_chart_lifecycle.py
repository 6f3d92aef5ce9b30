"""The chart's lifecycle: the pass-through schema takes every field of the supported Kubernetes versions,
uninstalling (Helm or the documented kustomize steps) leaves nothing of ours but the CRD and the TrainJobs,
the README says how to upgrade and uninstall, and the release gate wants a dated CHANGELOG entry."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from static_support import CHART, KUBE_VERSIONS, MANIFESTS, REPO, find, helm_template, load_all, run

from mwms_kit.install_doc import kustomize_uninstall_script

OPERATOR = "mwms-operator"
HOOK = "mwms-operator-lease-cleanup"


# --- the pass-through schema


def _api_definitions(version: str) -> dict[str, dict]:
    import kubernetes_validate

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return json.loads((root / f"v{version}.0-local-strict" / "_definitions.json").read_text())["$defs"]


def test_schema_takes_every_field_of_each_supported_kubernetes():
    """Typed from the newest API we build: each older supported version's fields are all there too, so
    no value valid on a 1.30-1.37 cluster is refused (and the types stay strict: typos fail elsewhere)."""
    schema = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    ours = {name: set(d.get("properties", {})) for name, d in schema.items() if name.startswith("io.k8s.")}
    assert "io.k8s.api.core.v1.PodSecurityContext" in ours
    missing = {}
    for version in KUBE_VERSIONS:
        api = _api_definitions(version)
        for name, fields in ours.items():
            lacking = set(api.get(name, {}).get("properties", {})) - fields
            if lacking:
                missing[f"{version} {name}"] = sorted(lacking)
    assert not missing, f"fields a supported Kubernetes takes that the chart's schema refuses: {missing}"
    for name, definition in schema.items():
        if name.startswith("io.k8s.") and definition.get("properties"):
            assert definition.get("additionalProperties") is False, name


@pytest.mark.parametrize(
    "setting",
    [
        "operator.podSecurityContext.supplementalGroupsPolicy=Strict",  # Kubernetes 1.31
        "operator.extraVolumes[0].name=model,operator.extraVolumes[0].image.reference=registry.example/m:1",
    ],
)
def test_pod_fields_newer_than_1_30_pass(helm, setting):
    helm_template(helm, "--set", setting)


# --- uninstalling


def test_helm_uninstall_deletes_the_lease_once_the_operator_is_gone(helm):
    """A post-delete hook Job, with its own ServiceAccount and a Role on the one Lease the operator elects
    on, waits for the operator's pods to be gone and deletes the Lease."""
    docs = load_all(helm_template(helm, "--set", "fullnameOverride=team-a"))
    lease = {e["name"]: e.get("value") for e in find(docs, "Deployment", "team-a")["spec"]["template"]["spec"]
             ["containers"][0]["env"]}["MWMS_LEADER_ELECTION_LEASE_NAME"]  # fmt: skip
    hook = "team-a-lease-cleanup"
    objects = {d["kind"]: d for d in docs if d["metadata"]["name"] == hook}
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    for doc in objects.values():
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    # The rights exist before the Job runs (lower weight) and reach that one Lease only.
    assert int(objects["Role"]["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        objects["Job"]["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    rules = objects["Role"]["rules"]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
            "verbs": ["delete"]} in rules  # fmt: skip
    assert all(set(rule["verbs"]) <= {"list", "delete"} for rule in rules)
    assert objects["RoleBinding"]["subjects"][0]["name"] == hook
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == hook
    script = pod["containers"][0]["command"][2]
    compile(script, "lease-cleanup", "exec")
    assert f'lease = "{lease}"' in script
    selector = find(docs, "Deployment", "team-a")["spec"]["selector"]["matchLabels"]
    assert f'selector = "{",".join(f"{k}={v}" for k, v in sorted(selector.items()))}"' in script


@pytest.mark.parametrize(
    "setting", ["operator.leaderElection.enabled=false,operator.replicaCount=1", "rbac.create=false"]
)
def test_no_lease_hook_without_a_lease_or_rbac(helm, setting):
    docs = load_all(helm_template(helm, "--set", setting))
    assert not [d for d in docs if d["metadata"]["name"] == HOOK]


# The kubectl resource names the docs use, by kind.
KINDS = {
    "deployment": "Deployment",
    "service": "Service",
    "serviceaccount": "ServiceAccount",
    "poddisruptionbudget": "PodDisruptionBudget",
    "role": "Role",
    "rolebinding": "RoleBinding",
    "clusterrole": "ClusterRole",
    "clusterrolebinding": "ClusterRoleBinding",
    "lease": "Lease",
    "namespace": "Namespace",
    "crd": "CustomResourceDefinition",
}


def _deleted(script: str) -> set[tuple[str, str | None, str]]:
    """(kind, namespace, name) of each object the `kubectl delete` commands of script delete."""
    deleted = set()
    for line in script.splitlines():
        for command in re.split(r"\|\||&&|;", line.split("#", 1)[0]):
            words = shlex.split(command)
            if words[:1] != ["kubectl"] or "delete" not in words:
                continue
            namespace = words[words.index("-n") + 1] if "-n" in words else None
            args = [w for i, w in enumerate(words[words.index("delete") + 1 :]) if not w.startswith("-")]
            args = [a for a in args if a != namespace]
            if "/" in args[0]:
                for arg in args:
                    kind, name = arg.split("/")
                    deleted.add((KINDS[kind], namespace, name))
            else:
                deleted |= {(KINDS[args[0]], namespace, name) for name in args[1:]}
    return deleted


def test_documented_kustomize_uninstall_leaves_only_the_crd_and_the_trainjobs(kubectl):
    """Every object `kubectl apply -k manifests/` makes, and the Lease the operator makes, is deleted by the
    documented steps; the CRD is not (deleting it would delete every TrainJob)."""
    made = load_all(run([kubectl, "kustomize", MANIFESTS]).stdout)
    deployment = find(made, "Deployment", OPERATOR)
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    namespace = deployment["metadata"]["namespace"]
    expected = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in made}
    expected.add(("Lease", namespace, env["MWMS_LEADER_ELECTION_LEASE_NAME"]))
    crds = {o for o in expected if o[0] == "CustomResourceDefinition"}
    assert crds
    script = kustomize_uninstall_script()
    deleted = _deleted(script)
    assert not crds & deleted, "the documented uninstall deletes the CRD, and with it every TrainJob"
    assert expected - crds <= deleted, f"left behind: {sorted(expected - crds - deleted)}"
    assert deleted <= expected, f"deletes what manifests/ never made: {sorted(deleted - expected)}"
    # The Lease only once no operator pod is left to make it again.
    order = [line for line in script.splitlines() if line.startswith("kubectl")]
    assert "--cascade=foreground" in order[0] and "deployment/" in order[0] and "lease/" in order[1]


def test_helm_uninstall_keeps_only_the_crd(helm):
    """What `helm uninstall` leaves: the objects with resource policy keep, which is the CRD alone."""
    kept = [d for d in load_all(helm_template(helm, "--set", "mlflow.enabled=true"))
            if (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy") == "keep"]  # fmt: skip
    assert [(d["kind"], d["metadata"]["name"]) for d in kept] == [
        ("CustomResourceDefinition", "trainjobs.mwms.dev")
    ]


def test_chart_readme_has_upgrading_and_uninstall(helm):
    readme = run([helm, "show", "readme", CHART]).stdout
    assert "\n## Upgrading\n" in readme and "\n## Uninstall\n" in readme
    uninstall = readme.split("\n## Uninstall\n", 1)[1].split("\n## ", 1)[0]
    assert "helm uninstall" in uninstall and "Lease" in uninstall and "crds.keep" in uninstall


# --- the release gate


def _release_gate() -> str:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())
    (step,) = [s for s in workflow["jobs"]["version"]["steps"] if s.get("id") == "version"]
    return step["run"]


@pytest.mark.parametrize(
    ("heading", "passes"),
    [
        ("## [1.2.3] - 2026-12-05", True),
        ("## [1.2.3] - Unreleased", False),
        ("## [1.2.3]", False),
        ("## [1.2.30] - 2026-12-05", False),
        ("## [1x2x3] - 2026-12-05", False),
    ],
)
def test_release_gate_wants_a_dated_changelog_entry(tmp_path, heading, passes):
    (tmp_path / "VERSION").write_text("1.2.3\n")
    (tmp_path / "CHANGELOG.md").write_text(f"# Changelog\n\n{heading}\n\n- a change\n")
    # The step runs hack/ci/release.sh from the checkout's root: here, a scratch checkout.
    (tmp_path / "hack" / "ci").mkdir(parents=True)
    shutil.copy(REPO / "hack" / "ci" / "release.sh", tmp_path / "hack" / "ci" / "release.sh")
    output = tmp_path / "output"
    env = {**os.environ, "GITHUB_REF_NAME": "v1.2.3", "GITHUB_OUTPUT": str(output), "GITHUB_ACTIONS": "true"}
    env.pop("REHEARSAL", None)
    result = subprocess.run(
        ["bash", "-e", "-c", _release_gate()], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (result.returncode == 0) is passes, result.stdout + result.stderr
    if passes:
        assert output.read_text() == "version=1.2.3\n"
    else:
        assert "::error::" in result.stdout and "dated entry" in result.stdout
