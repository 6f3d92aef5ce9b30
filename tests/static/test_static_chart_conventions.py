"""The chart's production conventions: the standard labels on every object, Kubernetes-typed pass-through
values, and a generated README (the optional alerts and dashboard: test_static_monitoring.py)."""

from __future__ import annotations

import sys

import pytest
from static_support import (
    CHART,
    CI_VALUES,
    KUBE_VERSIONS,
    MONITORING_VALUES,
    REPO,
    find,
    helm_template,
    load_all,
    run,
    validate_strict,
)

VERSION = (REPO / "VERSION").read_text().strip()
# Value sets for the label check: each turns on different objects; the release is not named as the chart.
LABEL_VALUE_SETS = {
    "default": [],
    "ci": ["--values", str(CI_VALUES)],
    "monitoring": ["--values", str(MONITORING_VALUES)],
    "no-rbac-no-crds": ["--set", "rbac.create=false,crds.enabled=false,mlflow.enabled=true"],
    "renamed": ["--set", "nameOverride=trainer-ops", "--set", "serviceAccount.name=ops"],
}
STANDARD = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
}
RELEASE = "prod"


def _render(helm, *args: str) -> list[dict]:
    return load_all(run([helm, "template", RELEASE, CHART, "--namespace", "ml", *args]).stdout)


@pytest.mark.parametrize("values", LABEL_VALUE_SETS)
def test_every_object_carries_the_standard_labels(helm, values):
    docs = _render(helm, *LABEL_VALUE_SETS[values])
    missing = {}
    for doc in docs:
        labels = doc["metadata"].get("labels") or {}
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        if STANDARD - labels.keys():
            missing[where] = sorted(STANDARD - labels.keys())
            continue
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where
        assert labels["app.kubernetes.io/part-of"] == "mwms", where
        assert labels["helm.sh/chart"] == f"mwms-operator-{VERSION}", where
        template = doc.get("spec", {}).get("template", {}).get("metadata", {}).get("labels")
        if template is not None:  # a pod template carries them too
            assert template.keys() >= STANDARD, where
    assert not missing, f"objects without the standard labels: {missing}"


@pytest.mark.parametrize("values", LABEL_VALUE_SETS)
def test_selectors_keep_only_the_stable_labels(helm, values):
    """A Deployment's selector is immutable: no label there may change with an upgrade (version, chart)."""
    for doc in _render(helm, *LABEL_VALUE_SETS[values]):
        selector = (doc.get("spec") or {}).get("selector")
        if doc["kind"] not in {"Deployment", "Service"} or not selector:
            continue
        selector = selector.get("matchLabels", selector)
        assert set(selector) == {
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/component",
        }, f"{doc['kind']}/{doc['metadata']['name']}: {selector}"


@pytest.mark.parametrize(
    "setting",
    [
        "operator.affinity.nodeAfinity.requiredDuringSchedulingIgnoredDuringExecution=x",
        "operator.securityContext.runAsUsr=1000",
        "operator.podSecurityContext.fsgroup=1000",
        "operator.resources.limit.cpu=1",
        "operator.resources.requests=2",  # wrong type
        "operator.tolerations[0].keys=dedicated",
        "operator.topologySpreadConstraints[0].maxSkw=1",
        "operator.extraVolumes[0].configmap.name=ca",
        "operator.extraVolumeMounts[0].mountpath=/ca",
        "operator.podSecurityContext.supplementalGroupsPolicy.x=y",  # a 1.31 field, wrong type
        # The old places stay as strict for the release that still reads them.
        "securityContext.runAsUsr=1000",
        "extraVolumes[0].configmap.name=ca",
        "operator.extraEnv[0].valueFrm.secretKeyRef.name=x",
        "mlflow.affinity.podAffinty.x=y",
        "mlflow.tolerations[0].effct=NoSchedule",
        "mlflow.resources.request.cpu=1",
        "mlflow.image.digest=latest",
    ],
)
def test_passthrough_typos_fail(helm, setting):
    result = run([helm, "template", "t", CHART, "--set", setting], check=False)
    assert result.returncode != 0 and "schema" in result.stderr, (setting, result.stderr)


def test_resources_claims_and_full_passthrough_values_are_accepted(helm, kubernetes_validate, tmp_path):
    """Valid Kubernetes fields pass the schema, reach the pods, and the objects are valid for the oldest and
    newest supported Kubernetes."""
    docs = load_all(
        helm_template(helm, "--values", MONITORING_VALUES, "--set", "operator.resources.claims[0].name=gpu")
    )
    operator = find(docs, "Deployment", "mwms-operator")["spec"]["template"]["spec"]
    assert operator["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert operator["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert {"name": "tracking-ca", "configMap": {"name": "tracking-ca"}} in operator["volumes"]
    assert {"name": "tracking-ca", "mountPath": "/etc/mwms/ca", "readOnly": True} in (
        operator["containers"][0]["volumeMounts"]
    )
    mlflow = find(docs, "Deployment", "mwms-operator-mlflow")["spec"]["template"]["spec"]
    assert mlflow["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert mlflow["tolerations"][0]["key"] == "dedicated"
    assert "podAntiAffinity" in mlflow["affinity"]
    assert mlflow["containers"][0]["image"] == "ghcr.io/mlflow/mlflow@sha256:" + "0" * 64
    # Without claims: a claim needs the pod's resourceClaims, which this chart does not set.
    rendered = helm_template(helm, "--values", MONITORING_VALUES)
    for version in (KUBE_VERSIONS[0], KUBE_VERSIONS[-1]):
        validate_strict(kubernetes_validate, rendered, version, tmp_path)


def test_defaults_render_no_new_fields(helm):
    """The new options are off by default: the operator pod has no spread constraints and only /tmp."""
    docs = load_all(helm_template(helm, "--set", "mlflow.enabled=true"))
    operator = find(docs, "Deployment", "mwms-operator")["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in operator
    assert [v["name"] for v in operator["volumes"]] == ["tmp"]
    mlflow = find(docs, "Deployment", "mwms-operator-mlflow")["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "affinity"} & mlflow.keys()
    assert mlflow["containers"][0]["image"] == "ghcr.io/mlflow/mlflow:v3.17.2"
    assert not [d for d in docs if d["kind"] in {"PrometheusRule", "ConfigMap", "ServiceMonitor"}]


@pytest.mark.parametrize("script", ["chart-readme.py", "k8s-values-schema.py"])
def test_generated_chart_files_are_current(script):
    """The chart README (values.yaml's `# --` comments) and the schema's Kubernetes types are regenerated."""
    result = run([sys.executable, REPO / "hack" / "generate" / script, "--check"], check=False)
    assert result.returncode == 0, result.stderr


def test_helm_show_readme_lists_every_documented_value(helm):
    readme = run([helm, "show", "readme", CHART]).stdout
    for key in (
        "operator.topologySpreadConstraints",
        "prometheusRule.enabled",
        "mlflow.image.digest",
        "crds.keep",
    ):
        assert f"| `{key}` |" in readme, key
