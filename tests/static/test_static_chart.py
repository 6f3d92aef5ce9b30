"""The Helm chart: lints strictly, renders objects every supported Kubernetes accepts, refuses value typos,
and carries the CRD and RBAC of manifests/ unchanged."""

from __future__ import annotations

import copy
import re
import sys

import pytest
import yaml
from static_support import (
    CHART,
    CI_VALUES,
    KUBE_VERSIONS,
    MANIFESTS,
    MONITORING_VALUES,
    REPO,
    container_env,
    find,
    helm_template,
    load_all,
    run,
    validate_strict,
)

VALUE_SETS = {
    "default": [],
    "ci": ["--values", str(CI_VALUES)],
    # Monitoring objects and the Kubernetes pass-through values (scheduling, volumes) set.
    "monitoring": ["--values", str(MONITORING_VALUES)],
}
# What the chart's CRD adds to manifests/crd.yaml, so uninstalling never deletes the CRD (and every TrainJob).
KEEP = {"helm.sh/resource-policy": "keep", "argocd.argoproj.io/sync-options": "Prune=false,Delete=false"}
OPERATOR = "mwms-operator"  # the release name the tests use, so chart object names equal the manifests'


@pytest.fixture(scope="module")
def rendered(helm) -> dict[str, str]:
    return {name: helm_template(helm, *args) for name, args in VALUE_SETS.items()}


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_strict(helm, values):
    run([helm, "lint", "--strict", CHART, *VALUE_SETS[values]])


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS)
def test_rendered_chart_is_valid_for_kubernetes(helm, kubernetes_validate, values, version, tmp_path):
    objects = helm_template(helm, "--kube-version", f"{version}.0", *VALUE_SETS[values])
    validate_strict(kubernetes_validate, objects, version, tmp_path)


def test_validator_rejects_an_unknown_field(rendered, kubernetes_validate, tmp_path):
    """The validation above can fail: a misspelt field in the rendered Deployment is caught."""
    docs = load_all(rendered["default"])
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(AssertionError, match="imagePullPolice"):
        validate_strict(kubernetes_validate, yaml.safe_dump_all(docs), KUBE_VERSIONS[-1], tmp_path)


@pytest.mark.parametrize(
    "setting",
    [
        "operatr.trainerImage=x",  # unknown top-level key
        "mlflow.persistance.enabled=false",  # unknown nested key
        "operator.watchNamespace=default",  # singular for plural
        "operator.logLevel=verbose",  # not one of the levels
        "operator.metricsPort=http",  # wrong type
        "image.digest=latest",  # not a digest
        "serviceMonitor.interval=half-a-minute",  # not a duration
        "serviceMonitor.scrapeTimout=10s",  # misspelt new key
        "serviceMonitor.relabelings[0].action=dropp",
        "serviceMonitor.namespace=Monitoring",  # not a namespace name
        "global.imageRegistri=mirror.example",
        "crds.kep=false",
        "operator.logFormat=xml",
        "operator.leaderElection.leaseDuration=1m",  # seconds only
        "operator.leaderElection.enabled=false",  # with the default 2 replicas
        "trainer.image.digest=latest",
    ],
)
def test_value_typo_fails_template_and_lint(helm, setting):
    template = run([helm, "template", "t", CHART, "--set", setting], check=False)
    assert template.returncode != 0, f"helm template accepted --set {setting}"
    assert "schema" in template.stderr, template.stderr
    lint = run([helm, "lint", "--strict", CHART, "--set", setting], check=False)
    assert lint.returncode != 0, f"helm lint accepted --set {setting}"


def test_every_value_is_documented():
    """A helm-docs `# --` comment on every value (on a map it documents the whole map, as in helm-docs)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    documented_parents: list[tuple[int, bool]] = []  # (indent, documented) of the enclosing keys
    undocumented = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z][\w-]*):(\s.*)?$", line)
        if not match:
            continue
        indent = len(match.group(1))
        while documented_parents and documented_parents[-1][0] >= indent:
            documented_parents.pop()
        above = number - 1
        comments = []
        while above >= 0 and lines[above].strip().startswith("#"):
            comments.append(lines[above].strip())
            above -= 1
        documented = any(c.startswith("# --") for c in comments) or any(d for _, d in documented_parents)
        is_map = not (match.group(3) or "").strip()
        if is_map:
            documented_parents.append((indent, documented))
            # A map of sub-values may be documented value by value.
            continue
        if not documented:
            undocumented.append(f"values.yaml:{number + 1}: {match.group(2)}")
    assert not undocumented, "values without a `# --` description:\n" + "\n".join(undocumented)


def test_schema_is_strict_everywhere():
    """additionalProperties: false on every object of our own (not the Kubernetes pass-through ones)."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    passthrough = {"podSecurityContext", "securityContext", "affinity", "tolerations", "extraEnv"}
    loose = []

    def walk(node, path):
        if isinstance(node, dict):
            strict = node.get("additionalProperties") is False
            if node.get("type") == "object" and "properties" in node and not strict:
                loose.append(path or "/")
            for key, child in node.items():
                if key not in passthrough:
                    walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{path}/{index}")

    walk(schema, "")
    assert not loose, f"schema objects that accept unknown keys: {loose}"


def test_chart_crd_matches_manifests(rendered):
    """Drift: the CRD the chart installs is manifests/crd.yaml plus the keep annotations and the chart's
    standard labels (a superset of the manifests' own), nothing else."""
    source = load_all((MANIFESTS / "crd.yaml").read_text())
    installed = [d for d in load_all(rendered["default"]) if d["kind"] == "CustomResourceDefinition"]
    assert [d["metadata"]["name"] for d in installed] == [d["metadata"]["name"] for d in source]
    for crd in installed:
        stripped = copy.deepcopy(crd)
        for key, value in KEEP.items():
            assert stripped["metadata"]["annotations"].pop(key) == value
        if not stripped["metadata"]["annotations"]:
            del stripped["metadata"]["annotations"]
        original = copy.deepcopy(next(d for d in source if d["metadata"]["name"] == crd["metadata"]["name"]))
        labels = stripped["metadata"].pop("labels")
        assert original["metadata"].pop("labels").items() <= labels.items()
        assert stripped == original, "templates/crds.yaml drifted: run hack/generate/sync-chart-crds.py"


def test_chart_crd_template_is_up_to_date():
    result = run([sys.executable, REPO / "hack" / "generate" / "sync-chart-crds.py", "--check"], check=False)
    assert result.returncode == 0, result.stderr


def test_crds_can_be_left_out(helm):
    kinds = {d["kind"] for d in load_all(helm_template(helm, "--set", "crds.enabled=false"))}
    assert "CustomResourceDefinition" not in kinds
    assert "Deployment" in kinds


def _rules_by_role(docs: list[dict], prefix: str = "") -> dict[str, list]:
    return {
        d["metadata"]["name"].removeprefix(prefix): d["rules"] for d in docs if d["kind"] == "ClusterRole"
    }


def test_chart_rbac_matches_manifests(rendered):
    """The chart has the rules of manifests/rbac.yaml (which the integration tests run the operator with)."""
    manifests = _rules_by_role(load_all((MANIFESTS / "rbac.yaml").read_text()))
    chart = _rules_by_role(load_all(rendered["default"]))
    # The release is named mwms-operator, so the chart's names equal the manifests'.
    assert chart == manifests


def test_operator_env_matches_manifests(rendered):
    """The chart's default operator settings are the manifests' (which point at manifests/mlflow)."""
    manifests = container_env(
        find(load_all((MANIFESTS / "deployment.yaml").read_text()), "Deployment", OPERATOR)
    )
    chart = container_env(find(load_all(rendered["default"]), "Deployment", OPERATOR))
    # Without mlflow.enabled or operator.trackingUri the chart leaves the tracking URI to the operator.
    # The chart also spells out settings the manifests leave to the operator's defaults (the same values).
    spelled_out = {
        "MWMS_LOG_FORMAT": "text",
        "MWMS_LEADER_ELECTION_LEASE_SECONDS": "15",
        "MWMS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "10",
        "MWMS_LEADER_ELECTION_RETRY_SECONDS": "2",
    }
    assert {k: chart.pop(k) for k in spelled_out} == spelled_out
    assert {k: v for k, v in manifests.items() if k != "MWMS_TRACKING_URI"} == chart


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_replicas_elect_a_leader_on_a_lease_of_their_release(helm, replicas):
    """Each release elects on its own Lease (two releases may share a namespace), which its Role names; a
    PodDisruptionBudget only when there is a replica to spare."""
    docs = load_all(
        helm_template(helm, "--set", "fullnameOverride=team-a", "--set", f"operator.replicaCount={replicas}")
    )
    deployment = find(docs, "Deployment", "team-a")
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    env = container_env(deployment)
    assert env["MWMS_LEADER_ELECTION"] == "true"
    assert env["MWMS_LEADER_ELECTION_LEASE_NAME"] == "team-a-leader"
    role = find(docs, "Role", "team-a-leader-election")
    assert role["metadata"]["namespace"] == "mwms-system"
    named = [r["resourceNames"] for r in role["rules"] if "resourceNames" in r]
    assert named == [["team-a-leader"]]
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    if replicas == 1:
        assert budgets == []
    else:
        (budget,) = budgets
        assert budget["spec"]["minAvailable"] == 1
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_chart_leader_election_matches_manifests(rendered):
    manifests = load_all((MANIFESTS / "rbac.yaml").read_text())
    chart = load_all(rendered["default"])
    name = "mwms-operator-leader-election"
    assert find(chart, "Role", name)["rules"] == find(manifests, "Role", name)["rules"]


def test_bundled_mlflow_is_the_default_tracking_uri(rendered):
    docs = load_all(rendered["ci"])
    env = container_env(find(docs, "Deployment", OPERATOR))
    assert env["MWMS_TRACKING_URI"] == "http://mwms-operator-mlflow.mwms-system.svc:5000"
    assert env["MWMS_WATCH_NAMESPACES"] == "default,mwms-e2e"
    mlflow = find(docs, "Deployment", "mwms-operator-mlflow")
    command = mlflow["spec"]["template"]["spec"]["containers"][0]["command"]
    hosts = set(command[command.index("--allowed-hosts") + 1].split(","))
    assert {
        "mwms-operator-mlflow:5000",
        "mwms-operator-mlflow.mwms-system.svc:5000",
        "mwms-operator-mlflow.mwms-system.svc.cluster.local:5000",
    } <= hosts


def test_bundled_mlflow_keeps_artifacts_in_s3_through_its_proxy_and_alone_holds_the_credentials(helm):
    """mlflow.artifacts.s3: the server's artifact destination is the bucket, its endpoint and Secret are the
    server's own environment, and its database stays on the volume; MLflow's plain image (no boto3) is
    refused with a message saying which to use."""
    s3 = ["--set", "mlflow.artifacts.s3.bucket=models/mlflow", "--set", "mlflow.image.tag=v3.17.2-full"]
    s3 += ["--set", "mlflow.artifacts.s3.endpoint=http://minio.storage:9000"]
    s3 += ["--set", "mlflow.artifacts.s3.existingSecret=mlflow-s3"]
    docs = load_all(helm_template(helm, "--values", str(CI_VALUES), *s3))
    [container] = find(docs, "Deployment", "mwms-operator-mlflow")["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--artifacts-destination") + 1] == "s3://models/mlflow"
    assert "--serve-artifacts" in command and "sqlite:////mlflow/mlflow.db" in command
    assert container_env(find(docs, "Deployment", "mwms-operator-mlflow"))["MLFLOW_S3_ENDPOINT_URL"] == (
        "http://minio.storage:9000"
    )
    assert container["envFrom"] == [{"secretRef": {"name": "mlflow-s3"}}]
    operator = container_env(find(docs, "Deployment", OPERATOR))
    assert not [name for name in operator if name.startswith(("AWS_", "MLFLOW_S3"))]
    plain = run(
        [
            helm,
            "template",
            OPERATOR,
            CHART,
            "--values",
            str(CI_VALUES),
            "--set",
            "mlflow.artifacts.s3.bucket=models",
        ],
        check=False,
    )
    assert plain.returncode != 0 and "v3.17.2-full" in plain.stderr and "mwms-trainer" in plain.stderr
    # The trainer image has boto3 (requirements/trainer.lock.txt): accepted as it is.
    trainer = ["--set", "mlflow.artifacts.s3.bucket=models", "--set", "mlflow.image.tag=0.1.0"]
    trainer += ["--set", "mlflow.image.repository=ghcr.io/mwms-dev/mwms-trainer"]
    docs = load_all(helm_template(helm, "--values", str(CI_VALUES), *trainer))
    [container] = find(docs, "Deployment", "mwms-operator-mlflow")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/mwms-dev/mwms-trainer:0.1.0"


def test_two_releases_in_one_namespace_have_their_own_mlflow(helm):
    """The bundled MLflow's Deployment, Service and PVC carry the release's name (or mlflow.name), so a second
    release in the namespace neither collides with nor shares the first one's server."""
    names = {}
    for release in ("team-a", "team-b"):
        docs = load_all(
            run([helm, "template", release, CHART, "-n", "ml", "--set", "mlflow.enabled=true"]).stdout
        )
        owned = {
            (d["kind"], d["metadata"]["name"])
            for d in docs
            if d["kind"] in {"Deployment", "Service", "PersistentVolumeClaim"}
        }
        assert {
            (kind, f"{release}-mlflow") for kind in ("Deployment", "Service", "PersistentVolumeClaim")
        } <= owned
        operator = next(
            d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] != f"{release}-mlflow"
        )
        names[release] = container_env(operator)["MWMS_TRACKING_URI"]
    assert names == {r: f"http://{r}-mlflow.ml.svc:5000" for r in ("team-a", "team-b")}
    named = load_all(helm_template(helm, "--set", "mlflow.enabled=true", "--set", "mlflow.name=tracking"))
    assert find(named, "Service", "tracking") and find(named, "PersistentVolumeClaim", "tracking")


def test_service_monitor_scrapes_the_operators_metrics_port_only_when_enabled(helm, rendered):
    assert not [d for d in load_all(rendered["default"]) if d["kind"] == "ServiceMonitor"]
    docs = load_all(
        helm_template(
            helm,
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "serviceMonitor.interval=15s",
            "--set",
            "serviceMonitor.labels.release=prometheus",
        )
    )
    monitor = find(docs, "ServiceMonitor", OPERATOR)
    service = find(docs, "Service", OPERATOR)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items(), "the ServiceMonitor selects the Service"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["mwms-system"]}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    metrics = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
    deployment = find(docs, "Deployment", OPERATOR)
    container_ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert metrics["targetPort"] in {p["name"] for p in container_ports}
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    # The operator's series carry the TrainJob's `namespace`; without honorLabels Prometheus renames it to
    # `exported_namespace` and the per-namespace alerts and dashboard group by the operator's namespace.
    assert endpoint["honorLabels"] is True


def test_helm_test_probes_the_operator(helm):
    docs = load_all(run([helm, "template", "mwms-operator", CHART, "-n", "mwms-system"]).stdout)
    tests = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert len(tests) == 1
    command = tests[0]["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"]
    script = command[2]
    compile(script, "helm-test-probe", "exec")  # the rendered probe is valid Python
    assert 'base = "http://mwms-operator.mwms-system.svc"' in script
    assert '":8080/healthz"' in script and '":8000/metrics"' in script


def test_no_lookup_in_templates():
    """GitOps tools (Argo CD, Flux) render offline: `lookup` would silently return nothing there."""
    templates = [p for p in (CHART / "templates").rglob("*") if p.is_file()]
    offenders = [p.name for p in templates if re.search(r"\blookup\b", p.read_text())]
    assert not offenders


def test_notes_render(helm):
    for args in VALUE_SETS.values():
        notes = run([helm, "install", "mwms-operator", CHART, "--dry-run=client", "-n", "mwms-system", *args])
        # The job's end, Succeeded or Failed, of our TrainJob (not Kubeflow Trainer's, the same kind).
        assert "kubectl wait --for=jsonpath='{.status.completionTime}' trainjobs.mwms.dev/" in notes.stdout


def _gitops_values() -> dict[str, dict]:
    gitops = MANIFESTS / "gitops"
    (app,) = load_all((gitops / "argocd-application.yaml").read_text())
    release = find(load_all((gitops / "flux-helmrelease.yaml").read_text()), "HelmRelease", OPERATOR)
    chart_path = str(CHART.relative_to(REPO))
    assert app["spec"]["source"]["path"] == release["spec"]["chart"]["spec"]["chart"] == chart_path
    return {"argocd": app["spec"]["source"]["helm"]["valuesObject"], "flux": release["spec"]["values"]}


@pytest.mark.parametrize("tool", ["argocd", "flux"])
def test_gitops_examples_render(helm, kubernetes_validate, tool, tmp_path):
    """The Argo CD and Flux examples' values pass the strict schema and render valid objects."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(_gitops_values()[tool]))
    validate_strict(kubernetes_validate, helm_template(helm, "--values", values), KUBE_VERSIONS[-1], tmp_path)


def test_watch_namespaces_give_roles_in_those_namespaces_instead_of_cluster_roles(helm):
    """Namespaced mode: the operator's rights on TrainJobs, pods, Services and events are a Role in each
    watched namespace; kopf keeps only list/watch of CRDs and namespaces cluster-wide."""
    docs = load_all(helm_template(helm, "--set", "operator.watchNamespaces={team-a,team-b}"))
    default = load_all(helm_template(helm))
    cluster_roles = _rules_by_role(docs)
    assert set(cluster_roles) == {
        "mwms-operator-kopf",
        "mwms-operator-trainjobs-edit",
        "mwms-operator-trainjobs-view",
    }
    assert {r for rule in cluster_roles["mwms-operator-kopf"] for r in rule["resources"]} == {
        "customresourcedefinitions",
        "namespaces",
    }
    assert all(set(rule["verbs"]) == {"list", "watch"} for rule in cluster_roles["mwms-operator-kopf"])
    # (Besides the leader-election Role in the operator's own namespace: see test_replicas_elect_a_leader...)
    roles = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["name"] == OPERATOR
    }
    bindings = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "RoleBinding" and d["metadata"]["name"] == OPERATOR
    }
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    cluster_wide = _rules_by_role(default)
    events = {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "list"]}
    for namespace, role in roles.items():
        # The same rules as the cluster-wide ClusterRole, plus events (kopf's ClusterRole has them otherwise).
        assert role["rules"] == [*cluster_wide["mwms-operator"], events], namespace
        binding = bindings[namespace]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "mwms-operator",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "mwms-operator", "namespace": "mwms-system"}
        ]
    assert not [
        d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == "mwms-operator"
    ]


def test_trainjob_rights_aggregate_into_admin_edit_and_view(helm, rendered):
    roles = {d["metadata"]["name"]: d for d in load_all(rendered["default"]) if d["kind"] == "ClusterRole"}
    edit, view = roles["mwms-operator-trainjobs-edit"], roles["mwms-operator-trainjobs-view"]
    assert {k: v for k, v in edit["metadata"]["labels"].items() if k.startswith("rbac.")} == {
        "rbac.authorization.k8s.io/aggregate-to-admin": "true",
        "rbac.authorization.k8s.io/aggregate-to-edit": "true",
    }
    assert {k: v for k, v in view["metadata"]["labels"].items() if k.startswith("rbac.")} == {
        "rbac.authorization.k8s.io/aggregate-to-view": "true"
    }
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in view["rules"])
    off = load_all(helm_template(helm, "--set", "rbac.aggregateToDefaultRoles=false"))
    assert not [d for d in off if d["metadata"]["name"].startswith("mwms-operator-trainjobs-")]


def test_tracking_allowlist_and_credentials_reach_the_operator_env(helm, rendered):
    assert (
        container_env(find(load_all(rendered["default"]), "Deployment", OPERATOR))[
            "MWMS_ALLOWED_TRACKING_URIS"
        ]
        == ""
    )
    docs = load_all(
        helm_template(
            helm,
            "--set",
            "operator.allowedTrackingUris={https://mlflow.team-a.example,http://10.0.0.7:5000}",
            "--set",
            "operator.trackingCredentials.secretName=mlflow-operator",
            "--set",
            "operator.trackingCredentials.tokenKey=api-token",
        )  # fmt: skip
    )
    container = find(docs, "Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["MWMS_ALLOWED_TRACKING_URIS"]["value"] == "https://mlflow.team-a.example,http://10.0.0.7:5000"
    refs = {
        name: env[name]["valueFrom"]["secretKeyRef"]
        for name in ("MWMS_TRACKING_TOKEN", "MWMS_TRACKING_USERNAME", "MWMS_TRACKING_PASSWORD")
    }
    assert refs == {
        "MWMS_TRACKING_TOKEN": {"name": "mlflow-operator", "key": "api-token", "optional": True},
        "MWMS_TRACKING_USERNAME": {"name": "mlflow-operator", "key": "username", "optional": True},
        "MWMS_TRACKING_PASSWORD": {"name": "mlflow-operator", "key": "password", "optional": True},
    }
    assert "MWMS_TRACKING_TOKEN" not in container_env(
        find(load_all(rendered["default"]), "Deployment", OPERATOR)
    )


@pytest.mark.parametrize(
    "setting",
    [
        "operator.allowedTrackingUris={mlflow.example:5000}",  # no scheme
        "operator.allowedTrackingUris={file:///mlruns}",
        "operator.trackingCredentials.secret=x",  # unknown key
        "operator.trackingCredentials.secretName=Not_A_Name",
        "rbac.aggregate=true",
    ],
)
def test_tenancy_value_typos_fail(helm, setting):
    template = run([helm, "template", "t", CHART, "--set", setting], check=False)
    assert template.returncode != 0 and "schema" in template.stderr, (setting, template.stderr)
