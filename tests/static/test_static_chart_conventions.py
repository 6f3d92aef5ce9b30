"""The chart's production conventions: the standard labels on every object, Kubernetes-typed pass-through
values, a generated README, and the optional alerts and dashboard naming metrics the operator exports."""

from __future__ import annotations

import json
import re
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

pytestmark = pytest.mark.static

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
    result = run([sys.executable, REPO / "hack" / script, "--check"], check=False)
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


# --- alerts and dashboard


def _exported_metrics() -> set[str]:
    """Every series name the operator's registry can expose (counters' _total, histograms' _bucket...)."""
    from prometheus_client import REGISTRY

    import mwms_operator.metrics  # noqa: F401  (registers the operator's metrics)

    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
    return {
        family.name + suffix
        for family in REGISTRY.collect()
        if family.name.startswith("mwms_")
        for suffix in suffixes.get(family.type, [""])
    }


# PromQL words that are not metric names: the functions, aggregations and keywords the rules use.
# fmt: off
PROMQL_WORDS = {
    "absent", "by", "without", "sum", "rate", "increase", "histogram_quantile", "on", "ignoring", "and", "or",
    "unless", "max", "min", "avg", "count", "bool",
}
# fmt: on


def check_expr(expr: str, exported: set[str]) -> list[str]:
    """What is wrong with one PromQL expression as far as a static look can tell."""
    problems = []
    depth = 0
    for char in re.sub(r'"[^"]*"', '""', expr):
        depth += {"(": 1, ")": -1, "{": 1, "}": -1, "[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            problems.append("a bracket closes that was never opened")
    if depth:
        problems.append("unbalanced brackets")
    bare = re.sub(r'\{[^}]*\}|\[[^\]]*\]|"[^"]*"', "", expr)  # matchers, ranges and strings out
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)  # grouping labels out
    for word in re.findall(r"[A-Za-z_:][\w:]*", bare):
        if word not in PROMQL_WORDS and word not in exported and word != "up":
            problems.append(f"unknown metric or function {word!r}")
    for name in re.findall(r"(?:^|[^\w])(mwms_\w+)", expr):
        if name not in exported:
            problems.append(f"the operator exports no {name!r}")
    for window in re.findall(r"\[([^\]]+)\]", expr):
        if not re.fullmatch(r"\d+[smhd]|\$__rate_interval", window):
            problems.append(f"bad range {window!r}")
    return problems


def test_expression_check_catches_mistakes():
    """The structural check below can fail: a misspelt metric, an unclosed bracket, a bad range."""
    exported = _exported_metrics()
    assert "mwms_trainjobs_failed_total" in exported and "mwms_reconcile_duration_seconds_bucket" in exported
    assert check_expr("sum by (namespace) (increase(mwms_trainjobs_failed_total[1h])) > 0", exported) == []
    assert check_expr("increase(mwms_trainjob_failed_total[1h])", exported)
    assert check_expr("sum(rate(mwms_trainjobs_failed_total[1h])", exported)
    assert check_expr("rate(mwms_trainjobs_failed_total[an hour])", exported)


def test_prometheus_rule_alerts_on_exported_metrics(helm):
    docs = load_all(helm_template(helm, "--values", MONITORING_VALUES))
    rule = find(docs, "PrometheusRule", "mwms-operator")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert {
        "MWMSOperatorDown",
        "MWMSTrainJobsFailing",
        "MWMSGroupRestartsClimbing",
        "MWMSTrainJobsPendingLong",
    } <= alerts.keys()
    exported = _exported_metrics()
    for name, alert in alerts.items():
        assert not check_expr(alert["expr"], exported), (name, check_expr(alert["expr"], exported))
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}
        assert alert["labels"]["team"] == "ml-platform"
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "0s")), name
    # `up` of the ServiceMonitor's scrape: its job label is the operator Service's name.
    assert 'up{job="mwms-operator", namespace="mwms-system"}' in alerts["MWMSOperatorDown"]["expr"]
    # Prometheus' own templating survives Helm's.
    assert "{{ $labels.namespace }}" in alerts["MWMSTrainJobsFailing"]["annotations"]["description"]


def test_operator_down_alert_needs_the_service_monitor(helm):
    """Without the ServiceMonitor the scrape job is unknown: no alert that would fire for ever."""
    docs = load_all(
        helm_template(helm, "--values", MONITORING_VALUES, "--set", "serviceMonitor.enabled=false")
    )
    (group,) = find(docs, "PrometheusRule", "mwms-operator")["spec"]["groups"]
    alerts = {r["alert"] for r in group["rules"]}
    assert "MWMSOperatorDown" not in alerts and "MWMSTrainJobsFailing" in alerts
    assert "MWMSOperatorNoLeader" not in alerts


def test_no_leader_alert_watches_the_leader_gauge_of_the_release(helm):
    docs = load_all(helm_template(helm, "--values", MONITORING_VALUES))
    (group,) = find(docs, "PrometheusRule", "mwms-operator")["spec"]["groups"]
    (rule,) = [r for r in group["rules"] if r["alert"] == "MWMSOperatorNoLeader"]
    assert rule["expr"] == 'sum(mwms_operator_leader{job="mwms-operator", namespace="mwms-system"}) != 1'


def test_grafana_dashboard_charts_exported_metrics(helm):
    docs = load_all(helm_template(helm, "--values", MONITORING_VALUES))
    config_map = find(docs, "ConfigMap", "mwms-operator-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "ML"}
    dashboard = json.loads(config_map["data"]["mwms-operator.json"])
    exported = _exported_metrics()
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs
    for expr in exprs:
        assert not check_expr(expr, exported), (expr, check_expr(expr, exported))
    charted = {name for expr in exprs for name in re.findall(r"mwms_\w+", expr)}
    families = {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in exported}
    assert {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in charted} == families, (
        "every metric the operator exports has a panel"
    )
