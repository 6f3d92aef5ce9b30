"""The chart's values in one shape: the operator pod under `operator`, `global` for every image, the new
values rendered where they belong, and the old keys still read for one release with a warning."""

from __future__ import annotations

import json

import pytest
from static_support import CHART, find, helm_template, load_all, run

OPERATOR = "mwms-operator"
VERSION = (CHART.parent.parent / "VERSION").read_text().strip()


def _docs(helm, *args: str) -> list[dict]:
    return load_all(helm_template(helm, *args))


def _pod(docs: list[dict], name: str = OPERATOR) -> dict:
    return find(docs, "Deployment", name)["spec"]["template"]["spec"]


def _env(docs: list[dict]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in _pod(docs)["containers"][0]["env"]}


def _notes(helm, *args: str) -> str:
    result = run([helm, "install", OPERATOR, CHART, "--dry-run=client", "-n", "mwms-system", *args])
    return result.stdout.split("NOTES:", 1)[1]


AFFINITY = (
    "nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]"
)
SPREAD = ["maxSkew=1", "topologyKey=zone", "whenUnsatisfiable=ScheduleAnyway"]
# (old --set, the same with the new key, a check on the operator pod spec)
MOVED = {
    "replicaCount": ("replicaCount=3", "operator.replicaCount=3", None),
    "image": (
        "image.tag=dev",
        "operator.image.tag=dev",
        lambda p: p["containers"][0]["image"].endswith(":dev"),
    ),
    "resources": (
        "resources.limits.cpu=2",
        "operator.resources.limits.cpu=2",
        # A map merges over the new default, as Helm merged it into the old one: the requests stay.
        lambda p: (
            p["containers"][0]["resources"]["limits"]["cpu"] == 2
            and p["containers"][0]["resources"]["requests"]["memory"] == "128Mi"
        ),
    ),
    "nodeSelector": (
        "nodeSelector.disk=ssd",
        "operator.nodeSelector.disk=ssd",
        lambda p: p["nodeSelector"] == {"disk": "ssd"},
    ),
    "tolerations": (
        "tolerations[0].key=dedicated",
        "operator.tolerations[0].key=dedicated",
        lambda p: p["tolerations"] == [{"key": "dedicated"}],
    ),
    "affinity": (
        f"affinity.{AFFINITY}.key=disk,affinity.{AFFINITY}.operator=Exists",
        f"operator.affinity.{AFFINITY}.key=disk,operator.affinity.{AFFINITY}.operator=Exists",
        lambda p: "requiredDuringSchedulingIgnoredDuringExecution" in p["affinity"]["nodeAffinity"],
    ),
    "topologySpreadConstraints": (
        ",".join(f"topologySpreadConstraints[0].{setting}" for setting in SPREAD),
        ",".join(f"operator.topologySpreadConstraints[0].{setting}" for setting in SPREAD),
        lambda p: p["topologySpreadConstraints"][0]["topologyKey"] == "zone",
    ),
    "podAnnotations": (
        "podAnnotations.a=b",
        "operator.podAnnotations.a=b",
        None,
    ),
    "podLabels": ("podLabels.team=ml", "operator.podLabels.team=ml", None),
    "podSecurityContext": (
        "podSecurityContext.fsGroup=2000",
        "operator.podSecurityContext.fsGroup=2000",
        lambda p: p["securityContext"]["fsGroup"] == 2000 and p["securityContext"]["runAsNonRoot"] is True,
    ),
    "extraVolumeMounts": (
        "extraVolumeMounts[0].name=ca,extraVolumeMounts[0].mountPath=/ca",
        "operator.extraVolumeMounts[0].name=ca,operator.extraVolumeMounts[0].mountPath=/ca",
        lambda p: {"name": "ca", "mountPath": "/ca"} in p["containers"][0]["volumeMounts"],
    ),
    "priorityClassName": (
        "priorityClassName=ops",
        "operator.priorityClassName=ops",
        lambda p: p["priorityClassName"] == "ops",
    ),
    "extraVolumes": (
        "extraVolumes[0].name=ca,extraVolumes[0].emptyDir.medium=Memory",
        "operator.extraVolumes[0].name=ca,operator.extraVolumes[0].emptyDir.medium=Memory",
        lambda p: {"name": "ca", "emptyDir": {"medium": "Memory"}} in p["volumes"],
    ),
    "securityContext": (
        "securityContext.runAsUser=1001",
        "operator.securityContext.runAsUser=1001",
        lambda p: p["containers"][0]["securityContext"]["runAsUser"] == 1001,
    ),
    "imagePullSecrets": (
        "imagePullSecrets[0].name=regcred",
        "global.imagePullSecrets[0].name=regcred",
        lambda p: p["imagePullSecrets"] == [{"name": "regcred"}],
    ),
}


@pytest.mark.parametrize("key", MOVED)
def test_old_key_still_works_as_the_new_one_and_is_warned_about(helm, key):
    old, new, check = MOVED[key]
    old_docs, new_docs = _docs(helm, "--set", old), _docs(helm, "--set", new)
    deployment = find(new_docs, "Deployment", OPERATOR)["spec"]
    assert find(old_docs, "Deployment", OPERATOR)["spec"] == deployment
    assert deployment != find(_docs(helm), "Deployment", OPERATOR)["spec"], "the value changed nothing"
    if key == "replicaCount":
        assert deployment["replicas"] == 3
    if check:
        assert check(deployment["template"]["spec"]), deployment["template"]["spec"]
    warning = _notes(helm, "--set", old)
    assert "WARNING: these values moved" in warning and f"\n  {key} -> " in warning, warning
    assert "WARNING" not in _notes(helm, "--set", new)


def test_old_trainer_image_string_still_works_and_is_warned_about(helm):
    assert _env(_docs(helm, "--set", "operator.trainerImage=registry.local/trainer:dev"))[
        "MWMS_TRAINER_IMAGE"
    ] == ("registry.local/trainer:dev")
    assert "operator.trainerImage -> trainer.image" in _notes(
        helm, "--set", "operator.trainerImage=registry.local/trainer:dev"
    )


def test_default_values_give_no_warning_and_every_image_at_its_registry(helm):
    assert "WARNING" not in _notes(helm)
    docs = _docs(helm, "--set", "mlflow.enabled=true")
    assert "MWMS_TRAINER_IMAGE" not in _env(docs)  # the operator's default: the trainer of its version
    assert _pod(docs)["containers"][0]["image"] == f"ghcr.io/mwms-dev/mwms-operator:{VERSION}"


def test_global_image_registry_rewrites_every_image(helm):
    docs = _docs(
        helm,
        "--set",
        "global.imageRegistry=registry.example:5000",
        "--set",
        "mlflow.enabled=true",
        "--set",
        "operator.image.digest=sha256:" + "1" * 64,
    )
    images = {
        c["image"]
        for d in docs
        for spec in [d.get("spec", {}).get("template", {}).get("spec") or d.get("spec", {})]
        for c in spec.get("containers", []) or []
    }
    assert images == {
        "registry.example:5000/mwms-dev/mwms-operator@sha256:" + "1" * 64,
        "registry.example:5000/mlflow/mlflow:v3.17.2",
    }
    assert _env(docs)["MWMS_TRAINER_IMAGE"] == f"registry.example:5000/mwms-dev/mwms-trainer:{VERSION}"


def test_trainer_image_parts(helm):
    env = _env(_docs(helm, "--set", "trainer.image.repository=registry.local/trainer,trainer.image.tag=dev"))
    assert env["MWMS_TRAINER_IMAGE"] == "registry.local/trainer:dev"
    env = _env(_docs(helm, "--set", "trainer.image.digest=sha256:" + "2" * 64))
    assert env["MWMS_TRAINER_IMAGE"] == "ghcr.io/mwms-dev/mwms-trainer@sha256:" + "2" * 64


def test_leader_election_timings_reach_the_operator(helm):
    env = _env(
        _docs(
            helm,
            "--set",
            "operator.leaderElection.leaseDuration=30s,operator.leaderElection.renewDeadline=20",
            "--set",
            "operator.leaderElection.retryPeriod=2.5s",
        )
    )
    assert env["MWMS_LEADER_ELECTION"] == "true"
    assert (
        env["MWMS_LEADER_ELECTION_LEASE_SECONDS"],
        env["MWMS_LEADER_ELECTION_RENEW_DEADLINE_SECONDS"],
        env["MWMS_LEADER_ELECTION_RETRY_SECONDS"],
    ) == ("30", "20", "2.5")
    wrong = run(
        [helm, "template", "t", CHART, "--set", "operator.leaderElection.renewDeadline=20s"], check=False
    )
    assert (
        wrong.returncode != 0 and "retryPeriod (2) < renewDeadline (20) < leaseDuration (15)" in wrong.stderr
    )


def test_leader_election_off_means_one_replica_and_no_lease(helm):
    """The operator runs unelected (MWMS_LEADER_ELECTION=false needs no namespace or Lease); the schema
    refuses two such replicas, which would both reconcile every TrainJob."""
    docs = _docs(helm, "--set", "operator.leaderElection.enabled=false,operator.replicaCount=1")
    env = _env(docs)
    assert env["MWMS_LEADER_ELECTION"] == "false"
    assert not [name for name in env if name.startswith("MWMS_LEADER_ELECTION_")]
    assert not [
        d for d in docs if "leader-election" in d["metadata"]["name"] or "lease" in d["metadata"]["name"]
    ]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    for two in ("operator.replicaCount=2", "replicaCount=2"):
        refused = run(
            [helm, "template", "t", CHART, "--set", f"operator.leaderElection.enabled=false,{two}"],
            check=False,
        )
        assert refused.returncode != 0 and "schema" in refused.stderr, (two, refused.stderr)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_log_format_reaches_the_operator(helm, log_format):
    assert _env(_docs(helm, "--set", f"operator.logFormat={log_format}"))["MWMS_LOG_FORMAT"] == log_format


def test_service_monitor_takes_its_namespace_timeout_and_relabelings(helm):
    values = {
        "serviceMonitor": {
            "enabled": True,
            "namespace": "monitoring",
            "scrapeTimeout": "10s",
            "relabelings": [{"targetLabel": "cluster", "replacement": "prod-eu"}],
            "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}],
        }
    }
    docs = _docs(helm, "--set-json", f"serviceMonitor={json.dumps(values['serviceMonitor'])}")
    monitor = find(docs, "ServiceMonitor", OPERATOR)
    assert monitor["metadata"]["namespace"] == "monitoring"
    # It still selects the operator's Service, in the release namespace.
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["mwms-system"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scrapeTimeout"] == "10s"
    assert endpoint["relabelings"] == values["serviceMonitor"]["relabelings"]
    assert endpoint["metricRelabelings"] == values["serviceMonitor"]["metricRelabelings"]
    plain = find(_docs(helm, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor", OPERATOR)
    assert plain["metadata"]["namespace"] == "mwms-system"
    assert not {"scrapeTimeout", "relabelings", "metricRelabelings"} & plain["spec"]["endpoints"][0].keys()


def test_crds_keep_off_lets_uninstall_delete_the_crd(helm):
    kept = find(_docs(helm), "CustomResourceDefinition", "trainjobs.mwms.dev")
    assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    docs = _docs(helm, "--set", "crds.keep=false")
    assert "annotations" not in find(docs, "CustomResourceDefinition", "trainjobs.mwms.dev")["metadata"]
    assert "deletes the TrainJob CRD" in _notes(helm, "--set", "crds.keep=false")


def test_notes_apply_the_sample_of_the_charts_own_version_by_its_full_name(helm):
    notes = _notes(helm)
    sample = f"https://raw.githubusercontent.com/mwms-dev/mwms-operator/v{VERSION}/manifests/samples/"
    assert sample in notes and "/main/" not in notes
    assert "trainjobs.mwms.dev/breast-cancer" in notes
    assert "trainjob/" not in notes and "get trainjob " not in notes
