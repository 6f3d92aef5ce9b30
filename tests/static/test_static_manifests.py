"""manifests/: kustomize renders objects every supported Kubernetes accepts, RBAC is least privilege, every
pod is hardened, the operator settings are ones the operator reads, and the samples fit the CRD schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from static_support import (
    CI_VALUES,
    KUBE_VERSIONS,
    MANIFESTS,
    container_env,
    find,
    helm_template,
    load_all,
    run,
    strict_json_schema,
    validate_strict,
    venv_tool,
)

SAMPLES = sorted((MANIFESTS / "samples").glob("*.yaml"))
OPERATOR = "mwms-operator"


@pytest.fixture(scope="module")
def kustomized(kubectl) -> dict[str, str]:
    return {
        "operator": run([kubectl, "kustomize", MANIFESTS]).stdout,
        "mlflow": run([kubectl, "kustomize", MANIFESTS / "mlflow"]).stdout,
    }


@pytest.fixture(scope="module")
def every_shipped_object(kustomized, helm) -> dict[str, list[dict]]:
    """Everything a user can install: both kustomizations and the chart with default and CI values."""
    return {
        "kustomize manifests/": load_all(kustomized["operator"]),
        "kustomize manifests/mlflow/": load_all(kustomized["mlflow"]),
        "chart (default values)": load_all(helm_template(helm)),
        "chart (ci values)": load_all(helm_template(helm, "--values", CI_VALUES)),
    }


def test_kustomization_installs_crd_rbac_and_operator(kustomized):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in load_all(kustomized["operator"]))
    assert kinds == [
        ("ClusterRole", "mwms-operator"),
        ("ClusterRole", "mwms-operator-kopf"),
        ("ClusterRole", "mwms-operator-trainjobs-edit"),
        ("ClusterRole", "mwms-operator-trainjobs-view"),
        ("ClusterRoleBinding", "mwms-operator"),
        ("ClusterRoleBinding", "mwms-operator-kopf"),
        ("CustomResourceDefinition", "trainjobs.mwms.dev"),
        ("Deployment", "mwms-operator"),
        ("Namespace", "mwms-system"),
        ("PodDisruptionBudget", "mwms-operator"),
        ("Role", "mwms-operator-leader-election"),
        ("RoleBinding", "mwms-operator-leader-election"),
        ("Service", "mwms-operator"),
        ("ServiceAccount", "mwms-operator"),
    ]


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("part", ["operator", "mlflow"])
def test_kustomize_output_is_valid_for_kubernetes(kustomized, kubernetes_validate, part, version, tmp_path):
    validate_strict(kubernetes_validate, kustomized[part], version, tmp_path)


def test_rbac_is_least_privilege(every_shipped_object):
    """No wildcards, no secrets, no privilege-granting verbs, in the manifests or the chart."""
    for source, docs in every_shipped_object.items():
        for role in (d for d in docs if d["kind"] in ("ClusterRole", "Role")):
            for rule in role["rules"]:
                where = f"{source}: {role['kind']}/{role['metadata']['name']} {rule}"
                for field in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(field, []), f"wildcard in {where}"
                assert "secrets" not in rule["resources"], f"secrets in {where}"
                assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), where
                assert "nonResourceURLs" not in rule, where


def _pod_specs(docs: list[dict]):
    for doc in docs:
        if doc["kind"] == "Pod":
            yield f"Pod/{doc['metadata']['name']}", doc["spec"]
        elif doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]["spec"]


def test_every_pod_is_hardened(every_shipped_object):
    """Pod Security `restricted`, plus a read-only root filesystem, for every pod we ship."""
    checked = 0
    for source, docs in every_shipped_object.items():
        for name, spec in _pod_specs(docs):
            where = f"{source}: {name}"
            pod = spec.get("securityContext", {})
            assert pod.get("runAsNonRoot") is True, where
            assert pod.get("runAsUser", 0) > 0, where
            assert pod.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
            for container in spec["containers"] + spec.get("initContainers", []):
                context = container.get("securityContext", {})
                assert context.get("allowPrivilegeEscalation") is False, f"{where} {container['name']}"
                assert context.get("readOnlyRootFilesystem") is True, f"{where} {container['name']}"
                assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{where} {container['name']}"
                assert "resources" in container, f"{where} {container['name']} has no resources"
            checked += 1
    assert checked >= 6  # operator and MLflow in the manifests, operator (x2), MLflow, helm test in the chart


def test_operator_deployment_shape():
    deployment = find(load_all((MANIFESTS / "deployment.yaml").read_text()), "Deployment", OPERATOR)
    spec = deployment["spec"]
    # Two replicas, one leader (a Lease); an update starts the new pod before it stops an old one.
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == OPERATOR
    (container,) = pod["containers"]
    assert "command" not in container, "the image's ENTRYPOINT (python -m mwms_operator) must run"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8000, "health": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_operator_replicas_elect_a_leader_and_survive_a_drain():
    files = ("deployment.yaml", "rbac.yaml", "pdb.yaml")
    docs = [doc for name in files for doc in load_all((MANIFESTS / name).read_text())]
    deployment = find(docs, "Deployment", OPERATOR)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["MWMS_LEADER_ELECTION"]["value"] == "true"
    own_namespace = {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["MWMS_LEADER_ELECTION_NAMESPACE"]["valueFrom"] == own_namespace
    lease = env["MWMS_LEADER_ELECTION_LEASE_NAME"]["value"]
    # The Role grants the Lease in the operator's namespace only, and get/update on that one Lease only.
    role = find(docs, "Role", "mwms-operator-leader-election")
    assert role["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert {(tuple(r["verbs"]), tuple(r.get("resourceNames", ()))) for r in role["rules"]} == {
        (("create",), ()),
        (("get", "update"), (lease,)),
    }
    binding = find(docs, "RoleBinding", "mwms-operator-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    budget = find(docs, "PodDisruptionBudget", OPERATOR)
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert "pdb.yaml" in (MANIFESTS / "kustomization.yaml").read_text()


class _RecordingEnv(dict):
    """An environment that remembers which variables were asked for."""

    def __init__(self, *args):
        super().__init__(*args)
        self.asked: set[str] = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.asked.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize("source", ["manifests", "chart (ci values)"])
def test_operator_reads_every_setting_we_ship(source, every_shipped_object):
    """Each MWMS_* variable of the Deployment is one the operator reads, and its value is accepted."""
    from mwms_operator.settings import DEFAULT_TRAINER_IMAGE, OperatorConfig

    if source == "manifests":
        docs = load_all((MANIFESTS / "deployment.yaml").read_text())
    else:
        docs = every_shipped_object[source]
    shipped = container_env(find(docs, "Deployment", OPERATOR))
    # None: set from the pod (the downward API), MWMS_LEADER_ELECTION_NAMESPACE to the pod's namespace.
    env = {k: "mwms-system" if v is None else v for k, v in shipped.items() if k.startswith("MWMS_")}
    recording = _RecordingEnv(env)
    settings = OperatorConfig.from_env(recording)
    assert set(env) <= recording.asked, f"set but never read: {sorted(set(env) - recording.asked)}"
    # Unset: the trainer image of the operator's own version (test_static_version.py).
    assert settings.trainer_image == env.get("MWMS_TRAINER_IMAGE", DEFAULT_TRAINER_IMAGE)
    assert settings.tracking_uri == env["MWMS_TRACKING_URI"]
    assert settings.health_port == 8080 and settings.metrics_port == 8000


def test_mlflow_allows_its_in_cluster_names():
    """MLflow answers 403 to unknown Host headers: its service names must be on --allowed-hosts."""
    deployment = find(
        load_all((MANIFESTS / "mlflow" / "deployment.yaml").read_text()), "Deployment", "mlflow"
    )
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["mlflow", "server"]
    hosts = set(command[command.index("--allowed-hosts") + 1].split(","))
    operator = find(load_all((MANIFESTS / "deployment.yaml").read_text()), "Deployment", OPERATOR)
    tracking_host = container_env(operator)["MWMS_TRACKING_URI"].removeprefix("http://")
    assert {"mlflow:5000", tracking_host, "localhost:*"} <= hosts


# --- samples against the CRD schema ---------------------------------------------------------------


def crd_json_schema() -> dict:
    """Our CRD's schema, strict as `kubectl apply` is."""
    return strict_json_schema(next(d for d in load_all((MANIFESTS / "crd.yaml").read_text())))


def check_trainjob(doc: dict, tmp_path: Path) -> tuple[int, str]:
    schema = tmp_path / "trainjob.schema.json"
    schema.write_text(json.dumps(crd_json_schema()))
    instance = tmp_path / f"{doc['metadata']['name']}.json"
    instance.write_text(json.dumps(doc))
    result = run([venv_tool("check-jsonschema"), "--schemafile", schema, instance], check=False)
    return result.returncode, result.stdout + result.stderr


def _trainjobs(path: Path) -> list[dict]:
    return [d for d in load_all(path.read_text()) if d.get("kind") == "TrainJob"]


def test_samples_exist():
    names = {p.name for p in SAMPLES}
    assert {"seed-breast-cancer.yaml", "minimal.yaml"} <= names
    (seed,) = _trainjobs(MANIFESTS / "samples" / "seed-breast-cancer.yaml")
    assert seed["spec"]["replicas"] == 4 and seed["spec"]["trainer"]["dataset"] == "breast_cancer"
    (minimal,) = _trainjobs(MANIFESTS / "samples" / "minimal.yaml")
    assert minimal["spec"] == {"replicas": 2}


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_sample_matches_crd_schema(sample, tmp_path):
    jobs = _trainjobs(sample)
    assert jobs, f"{sample.name} holds no TrainJob"
    for job in jobs:
        assert job["apiVersion"] == "mwms.dev/v1alpha1"
        code, output = check_trainjob(job, tmp_path)
        assert code == 0, f"{sample.name}: {output}"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.update(replicas=0), "replicas"),
        (lambda s: s.update(replicas=257), "replicas"),
        (lambda s: s.update(replica=2), "replica"),  # unknown field: kubectl apply refuses it
        (lambda s: s["trainer"].update(dataset="mnist"), "dataset"),
        (lambda s: s["trainer"].update(learningRate=0), "learningRate"),
        (lambda s: s.setdefault("runPolicy", {}).update(cleanPodPolicy="Sometimes"), "cleanPodPolicy"),
        (lambda s: s.pop("replicas"), "replicas"),
    ],
)
def test_schema_check_rejects_a_broken_sample(change, field, tmp_path):
    """The sample check can fail, and names the field."""
    (job,) = _trainjobs(MANIFESTS / "samples" / "seed-breast-cancer.yaml")
    change(job["spec"])
    code, output = check_trainjob(job, tmp_path)
    assert code != 0, f"a TrainJob with a bad {field} passed the schema"
    assert field in output, output
