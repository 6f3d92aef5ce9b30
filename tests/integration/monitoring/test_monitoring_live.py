"""What an SRE sees of a live operator: every metric name it exports follows Prometheus' naming guide and the
chart's alerts and dashboard read only names it exports; its JSON log lines name the job they are about; and
refusals retried 50 times against the real API server leave one Event with a count, not 50. The operator is
the same `python -m mwms_operator`, with the CRD and RBAC of manifests/, as tests/integration/operator runs it
(tests/kit/mwms_kit/operator_harness.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from mwms_kit import operator_harness as harness
from mwms_kit.promnames import LIBRARY_PREFIXES, names_read, naming_problems, series_names
from mwms_kit.trainjobs import trainjob

REPO = Path(__file__).resolve().parents[3]

CHART = REPO / "charts" / "mwms-operator"
MONITORING_VALUES = CHART / "ci" / "monitoring-values.yaml"


def unrunnable_trainjob(name: str) -> dict[str, Any]:
    """A TrainJob whose workers never need to run here (there is no node): only their creation matters."""
    return trainjob(name, replicas=2, container={"image": "registry.invalid/never-pulled:1"})


def scrape(port: int) -> list[tuple[str, str]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [(family.name, family.type) for family in text_string_to_metric_families(text)]


def sample(port: int, metric: str, **labels: str) -> float:
    """The sum of the matching samples; 0 while the operator does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return 0.0
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items())
    )


def chart_exprs() -> list[str]:
    """Every PromQL expression of the chart's PrometheusRule and dashboard, rendered with monitoring on."""
    helm = Path(sys.executable).parent / "helm"
    if not helm.exists():
        pytest.fail("helm is missing next to the test Python: run `make tools` (hack/build/tools.sh)")
    rendered = subprocess.run(
        [str(helm), "template", "mwms-operator", str(CHART), "--values", str(MONITORING_VALUES)],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    exprs = []
    for doc in yaml.safe_load_all(rendered):
        if doc and doc["kind"] == "PrometheusRule":
            exprs += [rule["expr"] for group in doc["spec"]["groups"] for rule in group["rules"]]
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard"):
            dashboard = json.loads(doc["data"]["mwms-operator.json"])
            exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    return exprs


def test_a_live_operator_exports_names_by_the_guide_that_the_alerts_and_dashboard_read(
    cluster, kubectl, crd, quota_of_no_pods, tmp_path, wait_for
):
    namespace = quota_of_no_pods
    harness.apply_operator_rbac(kubectl)
    kubeconfig = harness.service_account_kubeconfig(kubectl, cluster, tmp_path / "operator.kubeconfig")
    operator = harness.OperatorProcess(kubeconfig, tmp_path / "operator.log", {"MWMS_LOG_FORMAT": "json"})
    operator.start()
    try:
        kubectl.apply(unrunnable_trainjob("scraped"), "-n", namespace)
        # A reconcile ran, the API server answered (a refused create among them), an event was posted.
        wait_for(
            lambda: (
                sample(operator.metrics_port, "mwms_api_requests_total", verb="create", code="403") > 0
                and sample(operator.metrics_port, "mwms_workqueue_adds_total", name="reconcile") > 0
            ),
            timeout=60,
            what="the operator's first reconcile in its metrics",
        )
        families = scrape(operator.metrics_port)
    finally:
        operator.stop()
    ours = [(name, kind) for name, kind in families if not name.startswith(LIBRARY_PREFIXES)]
    problems = [p for name, kind in ours for p in naming_problems(name, kind)]
    assert problems == [], "every name by Prometheus' naming guide, under one mwms_ prefix"
    assert {"mwms_build_info", "mwms_workqueue_depth", "mwms_api_request_duration_seconds"} <= {
        n for n, _ in ours
    }
    exported = series_names(families) | {"up"}
    unknown = {name for expr in chart_exprs() for name in names_read(expr)} - exported
    assert unknown == set(), "the alerts and the dashboard read only what the operator exports"
    # JSON lines, and the one about the refusal names its job.
    lines = [json.loads(line) for line in operator.log().splitlines() if line.startswith("{")]
    refused = [x for x in lines if "creation refused" in x["message"]]
    assert refused and all((x["namespace"], x["name"]) == (namespace, "scraped") for x in refused)


def test_fifty_refusals_leave_one_event_with_their_count(
    cluster, kubectl, crd, quota_of_no_pods, monkeypatch
):
    """The reconciler's own refusal path with the real API client, 50 times (its backoff clock moved on
    between tries, so none is skipped): the API server refuses each create, and the event is counted."""
    import kopf

    from mwms_contract.conditions import CREATE_PODS_REFUSED
    from mwms_operator.kube import client as k8s
    from mwms_operator.observe.state import job_key
    from mwms_operator.reconciler import Reconciler
    from mwms_operator.settings import OperatorConfig

    namespace = quota_of_no_pods
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubectl.apply(unrunnable_trainjob("refused"), "-n", namespace)
    body = kubectl.json("get", "trainjob", "refused", "-n", namespace)
    reconciler = Reconciler(k8s.Kube.connect(kopf.OperatorSettings()), OperatorConfig())
    reconciler.bind({}, {})
    now = [0.0]
    reconciler.state.clock = lambda: now[0]
    reconciler.job_event("ADDED", body)
    key = job_key(body)
    assert key is not None

    async def fifty_tries() -> None:
        for _ in range(50):
            now[0] += 3600.0  # past any backoff: every reconcile tries again
            await reconciler.reconcile(key)

    asyncio.run(fifty_tries())
    assert reconciler.state.creation_refused(key).tries == 50  # type: ignore[union-attr]
    selector = f"involvedObject.uid={key.uid}"
    events: list[dict[str, Any]] = kubectl.json(
        "get", "events", "-n", namespace, "--field-selector", selector
    )["items"]
    refused = [e for e in events if e["reason"] == CREATE_PODS_REFUSED]
    assert 1 <= len(refused) <= 2, [e["message"] for e in refused]
    assert sum(e.get("count") or 1 for e in refused) == 50
    assert len([e for e in events if e["type"] == "Warning"]) <= 2
