"""The chart's alerts and dashboard: named by the metrics the operator exports (by Prometheus' naming guide),
every alert with a `for:`, a severity and a runbook in docs/runbooks.md, each alert's intent checked by
`promtool test rules` on recorded series (tests/static/data/alerts-test.yaml), and a dashboard whose every
panel honours $job (and $namespace where its metric is the TrainJobs') with a uid per release."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from static_support import CHART, MONITORING_VALUES, REPO, find, helm_template, load_all, missing_tool, run

from mwms_dev.builds import BuildError, built
from mwms_kit.promnames import LIBRARY_PREFIXES, PREFIX, names_read, naming_problems, series_names

pytestmark = pytest.mark.waits_for_build

RUNBOOKS = REPO / "docs" / "runbooks.md"
ALERTS_TEST = Path(__file__).parent / "data" / "alerts-test.yaml"


def _families() -> list[tuple[str, str]]:
    """(name, type) of every family the operator's registry exports, the client library's own included."""
    from prometheus_client import REGISTRY

    import mwms_operator.telemetry.metrics  # noqa: F401  (registers the operator's metrics)

    return [(f.name, f.type) for f in REGISTRY.collect() if f.name.startswith((PREFIX, *LIBRARY_PREFIXES))]


def _exported_metrics() -> set[str]:
    return series_names(_families())


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
    for name in names_read(expr) - {"up"}:
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


def test_every_metric_the_operator_exports_follows_the_naming_guide():
    problems = [
        p for name, kind in _families() if name.startswith(PREFIX) for p in naming_problems(name, kind)
    ]
    assert problems == []


def test_the_naming_check_catches_what_the_guide_forbids():
    assert naming_problems("mwms_trainjob_pods_created_seconds", "histogram")  # reads like a timestamp
    assert naming_problems("trainjobs_total", "counter")  # no prefix, _total twice
    assert naming_problems("mwms_queue_latency_milliseconds", "histogram")
    assert naming_problems("mwms_reconcile_duration", "histogram")
    assert naming_problems("mwms_jobs_total", "gauge")
    assert naming_problems("mwms_Jobs", "gauge")
    assert naming_problems("mwms_last_success_timestamp", "gauge")
    assert naming_problems("mwms_last_success_timestamp_seconds", "gauge") == []


def _rules(helm) -> dict[str, dict]:
    docs = load_all(helm_template(helm, "--values", MONITORING_VALUES))
    rule = find(docs, "PrometheusRule", "mwms-operator")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    (group,) = rule["spec"]["groups"]
    return {r["alert"]: r for r in group["rules"]}


def _runbook_sections() -> dict[str, str]:
    text = RUNBOOKS.read_text()
    parts = re.split(r"^## (\w+)\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_alert_has_a_for_a_severity_and_a_runbook_that_says_what_to_do(helm):
    alerts = _rules(helm)
    assert {"MWMSOperatorDown", "MWMSTrainJobsFailingPlatform", "MWMSTrainJobsFailingUserCode",
            "MWMSTrainJobsPendingLong", "MWMSOperatorRequestErrors"} <= alerts.keys()  # fmt: skip
    exported = _exported_metrics()
    sections = _runbook_sections()
    for name, alert in alerts.items():
        assert not check_expr(alert["expr"], exported), (name, check_expr(alert["expr"], exported))
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert alert["labels"]["team"] == "ml-platform"
        assert alert["annotations"]["summary"] and alert["annotations"]["description"]
        assert re.fullmatch(r"[1-9]\d*[smh]", alert.get("for", "")), f"{name} has no for:"
        url = alert["annotations"]["runbook_url"]
        assert url == f"https://github.com/mwms-dev/mwms-operator/blob/v0.1.0/docs/runbooks.md#{name.lower()}"
        section = sections.get(name, "")
        assert all(f"**{part}.**" in section for part in ("Means", "Check", "Fix")), f"runbook of {name}"
    assert set(sections) == set(alerts), "one runbook section per alert, none for an alert that is gone"
    # `up` of the ServiceMonitor's scrape: its job label is the operator Service's name.
    assert 'up{job="mwms-operator", namespace="mwms-system"}' in alerts["MWMSOperatorDown"]["expr"]
    # Prometheus' own templating survives Helm's.
    assert "{{ $labels.namespace }}" in alerts["MWMSTrainJobsFailingPlatform"]["annotations"]["description"]


def test_failures_are_split_by_the_contracts_reasons_into_the_platforms_and_the_users(helm):
    from mwms_operator.telemetry.metrics import PLATFORM_FAILURE_REASONS, USER_FAILURE_REASONS

    alerts = _rules(helm)

    def reasons(alert: str) -> set[str]:
        (regex,) = re.findall(r'reason=~"([^"]+)"', alerts[alert]["expr"])
        return set(regex.split("|"))

    assert reasons("MWMSTrainJobsFailingPlatform") == set(PLATFORM_FAILURE_REASONS)
    assert reasons("MWMSTrainJobsFailingUserCode") == set(USER_FAILURE_REASONS)


def test_operator_down_alert_needs_the_service_monitor(helm):
    """Without the ServiceMonitor the scrape job is unknown: no alert that would fire for ever."""
    docs = load_all(
        helm_template(helm, "--values", MONITORING_VALUES, "--set", "serviceMonitor.enabled=false")
    )
    (group,) = find(docs, "PrometheusRule", "mwms-operator")["spec"]["groups"]
    alerts = {r["alert"] for r in group["rules"]}
    assert "MWMSOperatorDown" not in alerts and "MWMSTrainJobsFailingPlatform" in alerts
    assert "MWMSOperatorNoLeader" not in alerts


def promtool() -> Path:
    """The cached build (hack/build/build-promtool.sh: a no-op once built; it may still be building in `make
    test`'s background, so this waits on its lock), else one on PATH."""
    try:
        return built("build-promtool.sh") / "promtool"
    except BuildError as e:
        on_path = shutil.which("promtool")
        if on_path is None:
            missing_tool(f"no promtool on PATH, and {e}")
        return Path(str(on_path))


@pytest.mark.timeout(3600)  # a cold promtool build may be running in the background (see promtool())
def test_each_alert_fires_for_what_it_means_and_not_for_what_it_does_not(helm, tmp_path):
    """promtool test rules: the cases in data/alerts-test.yaml, on the rules as rendered (annotations left
    out: they are checked above, and promtool would compare their every word)."""
    tool = promtool()
    groups = [{"name": "mwms-operator", "rules": list(_rules(helm).values())}]
    for rule in groups[0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts-test.yaml")
    run([tool, "check", "rules", tmp_path / "rules.yaml"])
    run([tool, "test", "rules", tmp_path / "alerts-test.yaml"])
    tested = {case["alertname"] for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"]
              for case in test["alert_rule_test"]}  # fmt: skip
    assert tested == {r["alert"] for r in groups[0]["rules"]}, "every alert has a case"


def _dashboard(helm, release: str = "mwms-operator", namespace: str = "mwms-system") -> dict:
    rendered = run(
        [helm, "template", release, CHART, "--namespace", namespace, "--values", MONITORING_VALUES]
    )
    config_map = next(d for d in load_all(rendered.stdout) if d["metadata"]["name"].endswith("-dashboard"))
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    return json.loads(config_map["data"]["mwms-operator.json"])


def test_grafana_dashboard_charts_exported_metrics(helm):
    dashboard = _dashboard(helm)
    exported = _exported_metrics()
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for expr in exprs:
        assert not check_expr(expr, exported), (expr, check_expr(expr, exported))
    charted = {name for expr in exprs for name in names_read(expr) if name.startswith(PREFIX)}
    families = {name for name, _ in _families() if name.startswith(PREFIX)}
    assert {re.sub(r"_(total|bucket|sum|count)$", "", name) for name in charted} == families, (
        "every metric the operator exports has a panel"
    )


def test_every_panel_honours_job_and_the_namespace_of_trainjob_metrics(helm):
    """$job on every selector; $namespace on every selector of a metric by TrainJob namespace (the operator's
    own panels, its CPU, memory, queues and API requests, are the whole operator's)."""
    from prometheus_client.metrics import MetricWrapperBase

    from mwms_operator.telemetry import metrics

    by_namespace = {
        m._name
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase) and "namespace" in m._labelnames
    }
    assert {"mwms_trainjobs", "mwms_trainjobs_failed"} <= by_namespace
    dashboard = _dashboard(helm)
    read: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            for name, matchers in re.findall(r"([a-z_:][\w:]*)\{([^}]*)\}", target["expr"]):
                read.add(name)
                assert 'job=~"$job"' in matchers, (panel["title"], target["expr"])
                if re.sub(r"_(total|bucket|sum|count)$", "", name) in by_namespace:
                    assert 'namespace=~"$namespace"' in matchers, (panel["title"], target["expr"])
            assert names_read(target["expr"]) <= read, f"a selector without matchers: {target['expr']}"
    for operator_metric in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                            "mwms_workqueue_depth", "mwms_api_request_duration_seconds_bucket"):  # fmt: skip
        assert operator_metric in read
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"job", "namespace"} <= variables.keys()


def test_the_dashboards_uid_and_title_are_the_releases(helm):
    """Two releases' dashboards in one Grafana must not replace each other (its uid is its key)."""
    one, other = _dashboard(helm, "ml", "team-a"), _dashboard(helm, "ml", "team-b")
    assert one["uid"] != other["uid"] and one["title"] != other["title"]
    assert len(one["uid"]) <= 40 and re.fullmatch(r"[\w-]+", one["uid"])
    assert one == _dashboard(helm, "ml", "team-a"), "the same release renders the same uid"
