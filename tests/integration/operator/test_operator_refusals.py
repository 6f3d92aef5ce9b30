"""Refusals on a shared cluster, each from the real API server: an invalid worker pod fails the job naming the
field; a pod refused for now (a real ResourceQuota, a real LimitRange, a real validating webhook served by
this test over HTTPS, one whose server is down) is said in status and events, no part of the group is kept
while waiting, and creation is tried again with a backoff, so the job runs once the cause is gone. A name the
job needs, taken by an object that is not the job's, is named in its status and never touched."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mwms_contract.status import Condition
from mwms_dev import pki
from mwms_dev.cluster import free_port
from mwms_kit.fake_api_server import FakeApiServer, Seen, served
from mwms_kit.waits import condition, get_job, wait_condition


def pod_names(kubectl: Any, namespace: str, name: str) -> list[str]:
    pods = kubectl.json("get", "pods", "-n", namespace, "-l", f"mwms.dev/job-name={name}")["items"]
    return [p["metadata"]["name"] for p in pods]


def warnings(kubectl: Any, namespace: str, name: str, reason: str) -> list[str]:
    items = kubectl.json(
        "get", "events", "-n", namespace,
        "--field-selector", f"involvedObject.kind=TrainJob,involvedObject.name={name},reason={reason}",
    )["items"]  # fmt: skip
    return [e["message"] for e in items if e["type"] == "Warning"]


def wait_refused(
    kubectl: Any,
    wait_for: Any,
    namespace: str,
    name: str,
    words: str,
    reason: str = "CreatePodsRefused",
    foreign: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The job says, in its Running condition and a Warning event (both with `reason`), that creating its
    workers was refused for `words`; it is not failed, and holds no worker pod while it waits (`foreign`:
    pods with its label that are not its own)."""

    def refused() -> dict[str, Any] | None:
        job = get_job(kubectl, namespace, name)
        running = condition(job, "Running")
        status = job.get("status") or {}  # none until the operator first sees the job
        assert status.get("phase") != "Failed", status
        if running is not None and running.reason == reason and words in running.message:
            return job
        return None

    job = wait_for(refused, timeout=60, interval=0.3, what=f"Running=False {reason} ({words})")
    assert job["status"]["phase"] == "Pending" and job["status"].get("restarts", 0) == 0
    assert any(words in m for m in wait_for(lambda: warnings(kubectl, namespace, name, reason)))
    # Nothing is held while waiting: the pods a refused try created are removed (between tries, none exist).
    held = lambda: set(pod_names(kubectl, namespace, name)) - set(foreign)  # noqa: E731
    wait_for(lambda: not held(), timeout=30, what="no worker pod held")
    return job


def succeeded(kubectl: Any, namespace: str, name: str, timeout: int = 120) -> dict[str, Any]:
    return wait_condition(kubectl, namespace, name, "Succeeded", timeout=timeout)


def test_a_pod_field_the_api_server_does_not_know_fails_the_job_naming_it(
    operator, make_standin, kubectl, namespace, wait_for
):
    """`resourcez` passes the CRD (spec.template.spec is a PodSpec the API server checks) but not the strict
    field validation the operator creates pods with: the job fails at once naming it, instead of running
    without the resources its author meant to ask for (the API server's default drops an unknown field)."""
    kubectl.apply(make_standin("typo", 2, container={"resourcez": {"limits": {"cpu": "1"}}}),
                  "-n", namespace)  # fmt: skip
    wait_condition(kubectl, namespace, "typo", "Failed", timeout=60)
    failed = condition(get_job(kubectl, namespace, "typo"), "Failed")
    assert failed.reason == "InvalidSpec" and "spec.containers[0].resourcez" in failed.message, failed
    assert pod_names(kubectl, namespace, "typo") == []


def test_a_resource_quota_refusal_is_shown_and_retried_and_the_job_runs_once_the_quota_is_raised(
    operator, make_standin, kubectl, namespace, wait_for
):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": "1"}},
    }
    kubectl.apply(quota, "-n", namespace)
    # Enforced once the quota controller has counted what is there.
    wait_for(
        lambda: kubectl.json("get", "resourcequota", "pods", "-n", namespace).get("status", {}).get("hard"),
        what="the quota's status",
    )
    kubectl.apply(make_standin("quota", 2), "-n", namespace)
    wait_refused(kubectl, wait_for, namespace, "quota", "exceeded quota")

    kubectl("patch", "resourcequota", "pods", "-n", namespace, "--type=merge", "-p",
            '{"spec":{"hard":{"pods":"4"}}}')  # fmt: skip
    job = succeeded(kubectl, namespace, "quota")
    assert job["status"]["restarts"] == 0, "a refused try is not a restart"
    assert "Traceback" not in operator.log(), "a refusal is no error of the operator"


def test_a_limit_range_refusal_is_shown_and_retried(operator, make_standin, kubectl, namespace, wait_for):
    limits = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "small"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]},
    }
    kubectl.apply(limits, "-n", namespace)
    big = {"resources": {"requests": {"cpu": "600m"}, "limits": {"cpu": "600m"}}}  # both fit on 2 CPUs
    kubectl.apply(make_standin("big", 2, container=big), "-n", namespace)
    wait_refused(kubectl, wait_for, namespace, "big", "maximum cpu usage per Container is 500m")

    kubectl("delete", "limitrange", "small", "-n", namespace)
    succeeded(kubectl, namespace, "big")


class Webhook:
    """A validating admission webhook over HTTPS that refuses every pod while `deny` is set."""

    def __init__(self, directory: Path) -> None:
        ca = pki.new_ca("mwms-test-webhook-ca")
        serving = pki.serving_cert(ca, "test-webhook", ("localhost",), ("127.0.0.1",))
        (directory / "tls.crt").write_bytes(serving.cert_pem)
        (directory / "tls.key").write_bytes(serving.key_pem)
        self.ca_bundle = base64.b64encode(ca.cert_pem).decode()
        self.deny = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
        self.fake = FakeApiServer(answer=self.review)
        self.serving = served(self.fake, tls=context)
        self.serving.__enter__()
        self.url = f"{self.fake.url}/validate"

    @property
    def reviewed(self) -> int:
        return len(self.fake.seen)

    def review(self, seen: Seen) -> tuple[int, dict[str, Any]]:
        response: dict[str, Any] = {"uid": seen.body["request"]["uid"], "allowed": not self.deny}
        if self.deny:
            response["status"] = {"code": 403, "message": "team policy: no training before noon"}
        return 200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def stop(self) -> None:
        self.serving.__exit__(None, None, None)


def register_webhook(kubectl: Any, namespace: str, url: str, ca_bundle: str) -> str:
    """A validating webhook (failurePolicy Fail) for the creation of this namespace's operator-made pods
    only; its name."""
    name = f"deny-{namespace}"
    kubectl.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "deny-workers.mwms.dev",
                    "clientConfig": {"url": url, "caBundle": ca_bundle},
                    "rules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ],  # fmt: skip
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "objectSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "mwms-operator"}},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        }
    )
    return name


@pytest.fixture
def webhook(kubectl: Any, namespace: str, tmp_path: Path) -> Iterator[Webhook]:
    hook = Webhook(tmp_path)
    name = register_webhook(kubectl, namespace, hook.url, hook.ca_bundle)
    try:
        yield hook
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found", check=False)
        hook.stop()


def test_a_validating_webhook_refusal_is_shown_and_retried(
    operator, make_standin, kubectl, namespace, wait_for, webhook
):
    kubectl.apply(make_standin("hooked", 2), "-n", namespace)
    wait_refused(kubectl, wait_for, namespace, "hooked", "team policy: no training before noon")
    assert (
        'admission webhook "deny-workers.mwms.dev" denied the request'
        in condition(get_job(kubectl, namespace, "hooked"), "Running").message
    )
    tries = webhook.reviewed
    webhook.deny = False
    succeeded(kubectl, namespace, "hooked")
    assert webhook.reviewed > tries


def test_an_invalid_template_edit_leaves_the_running_group_alone_and_says_why(
    operator, make_standin, kubectl, namespace, wait_for
):
    kubectl.apply(make_standin("edited", 2, env={"STANDIN_SLEEP_SECONDS": "20"}), "-n", namespace)
    wait_for(lambda: get_job(kubectl, namespace, "edited").get("status", {}).get("phase") == "Running",
             timeout=90, what="the job to run")  # fmt: skip
    uids = {p["metadata"]["uid"] for p in kubectl.json("get", "pods", "-n", namespace)["items"]}
    # What the CRD can say it says at once: the edit is refused (see also test_operator_crd.py).
    reserved = {"op": "add", "path": "/spec/template/spec/containers/0/env/-",
                "value": {"name": "TF_CONFIG", "value": "{}"}}  # fmt: skip
    refused = kubectl("patch", "trainjob", "edited", "-n", namespace, "--type=json", "-p",
                      json.dumps([reserved]), check=False)  # fmt: skip
    assert refused.returncode != 0 and "spec.template.spec.containers[0].env" in refused.stderr
    # What only the operator checks (the CRD leaves spec.template.spec open) is said in a condition.
    volumes = {"op": "add", "path": "/spec/template/spec/volumes", "value": {"scratch": {"emptyDir": {}}}}
    kubectl("patch", "trainjob", "edited", "-n", namespace, "--type=json", "-p", json.dumps([volumes]))

    def rejected() -> Condition | None:
        accepted = condition(get_job(kubectl, namespace, "edited"), "TemplateAccepted")
        return accepted if accepted is not None and accepted.status == "False" else None

    accepted = wait_for(rejected, timeout=30, what="TemplateAccepted=False")
    assert accepted.reason == "InvalidSpec", accepted
    assert "spec.template.spec.volumes" in accepted.message, accepted
    assert any("must be a list" in m for m in warnings(kubectl, namespace, "edited", "InvalidSpec"))
    job = get_job(kubectl, namespace, "edited")
    assert job["status"]["phase"] == "Running", job["status"]
    alive = kubectl.json("get", "pods", "-n", namespace)["items"]
    assert {p["metadata"]["uid"] for p in alive if not p["metadata"].get("deletionTimestamp")} == uids
    # The group it left alone finishes its work.
    assert succeeded(kubectl, namespace, "edited")["status"]["restarts"] == 0


def test_a_webhook_whose_server_is_down_is_named_in_the_status_and_the_job_runs_once_it_is_removed(
    operator, make_standin, kubectl, namespace, wait_for, tmp_path
):
    """failurePolicy Fail and nobody listening: the API server answers 500 "failed calling webhook", which
    the job's status says after the first try (not only the operator's log)."""
    ca_bundle = Webhook(tmp_path)
    ca_bundle.stop()  # its CA only: the URL below is a closed port
    url = f"https://127.0.0.1:{free_port()}/validate"
    name = register_webhook(kubectl, namespace, url, ca_bundle.ca_bundle)
    try:
        kubectl.apply(make_standin("unhooked", 2), "-n", namespace)
        job = wait_refused(
            kubectl, wait_for, namespace, "unhooked", "failed calling webhook", "WebhookUnavailable"
        )
        assert '"deny-workers.mwms.dev"' in condition(job, "Running").message
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found")
    assert succeeded(kubectl, namespace, "unhooked")["status"]["restarts"] == 0
    assert "Traceback" not in operator.log()


def wait_name_conflict(
    kubectl: Any, wait_for: Any, namespace: str, name: str, taken: str, foreign: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The job waits, Pending, with a NameConflict condition and Warning event naming what took the name
    (`taken`, e.g. "Service x") and that it has no owner."""
    words = f"{taken} exists and is not this TrainJob's (owner: no owner)"
    return wait_refused(kubectl, wait_for, namespace, name, words, "NameConflict", foreign)


def test_a_service_of_the_jobs_name_that_is_not_its_own_is_left_alone_named_and_the_job_runs_once_it_goes(
    operator, make_standin, kubectl, namespace, wait_for
):
    squatter = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "squat", "labels": {"mwms.dev/job-name": "squat"}},  # our label: still not ours
        "spec": {"clusterIP": "None", "selector": {"app": "someone-else"}, "ports": [{"port": 80}]},
    }
    kubectl.apply(squatter, "-n", namespace)
    before = kubectl.json("get", "service", "squat", "-n", namespace)["metadata"]
    kubectl.apply(make_standin("squat", 2), "-n", namespace)
    wait_name_conflict(kubectl, wait_for, namespace, "squat", "Service squat")
    after = kubectl.json("get", "service", "squat", "-n", namespace)["metadata"]
    assert (after["uid"], after["resourceVersion"]) == (before["uid"], before["resourceVersion"]), "untouched"
    assert "ownerReferences" not in after and "deletionTimestamp" not in after

    kubectl("delete", "service", "squat", "-n", namespace)
    assert succeeded(kubectl, namespace, "squat")["status"]["restarts"] == 0
    service = kubectl.json("get", "service", "squat", "-n", namespace)["metadata"]
    assert service["ownerReferences"][0]["kind"] == "TrainJob", "the job's own Service now"


def test_a_worker_pod_name_taken_by_a_pod_that_is_not_the_jobs_is_left_alone_named_and_then_freed(
    operator, make_standin, kubectl, namespace, wait_for
):
    """The foreign pod carries the job's labels (and a scheduling gate, so it never runs): the operator
    neither adopts nor deletes it, and keeps no part of its own group while it waits."""
    foreign = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "taken-worker-1",
            "labels": {"mwms.dev/job-name": "taken", "mwms.dev/replica-index": "1", "mwms.dev/restart": "0"},
        },
        "spec": {
            "schedulingGates": [{"name": "mwms.dev/test-hold"}],
            "containers": [{"name": "trainer", "image": "ghcr.io/mwms-dev/mwms-trainer:never"}],
        },
    }
    kubectl.apply(foreign, "-n", namespace)
    uid = kubectl.json("get", "pod", "taken-worker-1", "-n", namespace)["metadata"]["uid"]
    kubectl.apply(make_standin("taken", 2), "-n", namespace)
    wait_name_conflict(kubectl, wait_for, namespace, "taken", "Pod taken-worker-1", ("taken-worker-1",))
    after = kubectl.json("get", "pod", "taken-worker-1", "-n", namespace)["metadata"]
    assert after["uid"] == uid and "deletionTimestamp" not in after and "ownerReferences" not in after

    kubectl("delete", "pod", "taken-worker-1", "-n", namespace, "--wait=true")
    assert succeeded(kubectl, namespace, "taken")["status"]["restarts"] == 0
