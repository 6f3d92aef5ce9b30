"""Security of the operator on the real control plane: what its ServiceAccount may and may not do (RBAC
from manifests/rbac.yaml, asked of the API server's authorizer with SubjectAccessReviews), and that a
Secret a TrainJob's workers use never shows up in the operator's log, the TrainJob or its events."""

from __future__ import annotations

import hashlib
import json
import secrets

import pytest
from rbac_support import ALLOWED, CLUSTER_ALLOWED, CLUSTER_DENIED, DENIED, OPERATOR_SA, can_i

from mwms_kit.waits import condition, get_job, wait_condition


@pytest.fixture(scope="module")
def rbac(kubectl, operator):
    """manifests/rbac.yaml applied (the `operator` fixture does it, and runs the operator we test below)."""
    return OPERATOR_SA


def label(verb: str, resource: str, subresource: str) -> str:
    return f"{verb} {resource}{'/' + subresource if subresource else ''}"


def test_the_operator_may_do_what_it_needs_in_every_namespace(rbac, kubectl, namespace):
    wrong = []
    for verb, resource, sub in ALLOWED:
        for scope in (["-n", namespace], ["-n", "mwms-system"], ["--all-namespaces"]):
            if not can_i(kubectl, OPERATOR_SA, verb, resource, sub, *scope):
                wrong.append(f"may not {label(verb, resource, sub)} {' '.join(scope)}")
    for verb, resource, sub in CLUSTER_ALLOWED:
        if not can_i(kubectl, OPERATOR_SA, verb, resource, sub):
            wrong.append(f"may not {label(verb, resource, sub)} (cluster)")
    assert not wrong, "\n".join(wrong)


def test_the_operator_may_not_do_anything_else(rbac, kubectl, namespace):
    wrong = []
    for verb, resource, sub in DENIED:
        for scope in (["-n", namespace], ["-n", "mwms-system"], ["-n", "kube-system"], ["--all-namespaces"]):
            if can_i(kubectl, OPERATOR_SA, verb, resource, sub, *scope):
                wrong.append(f"may {label(verb, resource, sub)} {' '.join(scope)}")
    for verb, resource, sub in CLUSTER_DENIED:
        if can_i(kubectl, OPERATOR_SA, verb, resource, sub):
            wrong.append(f"may {label(verb, resource, sub)} (cluster)")
    assert not wrong, "\n".join(wrong)


LEASE = "leases.coordination.k8s.io"


def test_the_operator_may_hold_its_leader_lease_in_its_own_namespace_only(rbac, kubectl, namespace):
    """Leader election: create a Lease, read and renew the one it elects on, in mwms-system; nothing else
    (not the control plane's Leases in kube-system, not another Lease next to its own)."""
    own = ["-n", "mwms-system"]
    allowed = [
        ("create", LEASE),
        ("get", f"{LEASE}/mwms-operator-leader"),
        ("update", f"{LEASE}/mwms-operator-leader"),
    ]
    denied = [
        ("get", f"{LEASE}/another"),
        ("update", f"{LEASE}/another"),
        ("delete", f"{LEASE}/mwms-operator-leader"),
        ("patch", f"{LEASE}/mwms-operator-leader"),
        ("list", LEASE),
        ("watch", LEASE),
    ]
    wrong = [
        f"may not {verb} {what} in mwms-system"
        for verb, what in allowed
        if not can_i(kubectl, OPERATOR_SA, verb, what, "", *own)
    ]
    wrong += [
        f"may {verb} {what} in mwms-system"
        for verb, what in denied
        if can_i(kubectl, OPERATOR_SA, verb, what, "", *own)
    ]
    for scope in (["-n", namespace], ["-n", "kube-system"], ["--all-namespaces"]):
        for verb, what in allowed + denied:
            if can_i(kubectl, OPERATOR_SA, verb, what, "", *scope):
                wrong.append(f"may {verb} {what} {' '.join(scope)}")
    assert not wrong, "\n".join(wrong)


def test_the_matrix_is_the_whole_story(rbac, kubectl, namespace):
    """`can-i --list` as the operator: every rule it holds is one the matrix above expects (a new, broader
    rule in rbac.yaml fails here until it is added to ALLOWED on purpose)."""
    listed = kubectl("auth", "can-i", "--list", f"--as={OPERATOR_SA}", "-n", namespace).stdout
    expected = {(resource, sub) for _, resource, sub in ALLOWED + CLUSTER_ALLOWED}
    # Rights every authenticated user has (self reviews; ClusterTrustBundles are public CA bundles) are not
    # the operator's.
    public = {
        "clustertrustbundles.certificates.k8s.io",
        "selfsubjectreviews.authentication.k8s.io",
        "selfsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectrulesreviews.authorization.k8s.io",
    }
    unexpected = []
    for line in listed.splitlines()[1:]:
        resource = line.split()[0] if line.split() else ""
        if not resource or resource.startswith("[") or resource in public:
            continue
        base, _, sub = resource.partition("/")
        if (base, sub) not in expected or "*" in line:
            unexpected.append(line)
    assert not unexpected, "\n".join(unexpected)


def secret_checking_command(standin: list[str]) -> list[str]:
    """The stand-in worker, after checking that API_TOKEN holds the Secret's value (by its hash, so the
    value itself is never printed): proves the Secret really reached the worker."""
    check = (
        "import hashlib, os, sys\n"
        "token = os.environ.get('API_TOKEN', '')\n"
        "if hashlib.sha256(token.encode()).hexdigest() != os.environ['API_TOKEN_SHA256']:\n"
        "    open('/dev/termination-log', 'w').write('API_TOKEN does not hold the secret')\n"
        "    sys.exit(2)\n"
        "source = sys.argv[1]\n"
        "sys.argv = ['standin_worker.py']\n"
        "exec(compile(source, 'standin_worker.py', 'exec'), {'__name__': '__main__'})\n"
    )
    python, flag, source = standin
    return [python, flag, check, source]


def test_secret_values_never_reach_the_log_status_or_events(
    operator, make_standin, standin, kubectl, namespace, wait_for
):
    token = f"tok-{secrets.token_hex(24)}"
    kubectl(
        "create", "secret", "generic", "api-credentials", "-n", namespace, f"--from-literal=token={token}"
    )
    digest = hashlib.sha256(token.encode()).hexdigest()
    env = [
        {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "api-credentials", "key": "token"}}},
        {"name": "API_TOKEN_SHA256", "value": digest},
    ]
    command = secret_checking_command(standin["command"])
    ok = make_standin("secretive", 2, container={"command": command, "env": env})
    # The failure path writes conditions and warning events with termination messages: no token there either.
    failing_env = [
        *env,
        {"name": "STANDIN_FAIL_INDEX", "value": "1"},
        {"name": "STANDIN_EXIT_CODE", "value": "2"},
    ]
    failing = make_standin("leaky", 2, container={"command": command, "env": failing_env})
    kubectl.apply([ok, failing], "-n", namespace)
    for name, type_ in (("secretive", "Succeeded"), ("leaky", "Failed")):
        wait_condition(kubectl, namespace, name, type_, timeout=120)
    leaky = kubectl.json("get", "trainjob", "leaky", "-n", namespace)
    failed = condition(leaky, "Failed")
    # Failed because worker 1 was told to, not because the Secret was missing.
    assert "standin worker 1 told to fail" in failed.message, failed

    places = {
        "operator log": operator.log(),
        "TrainJobs": kubectl("get", "trainjobs", "-n", namespace, "-o", "yaml").stdout,
        "events": kubectl("get", "events", "-n", namespace, "-o", "yaml").stdout,
        "pod status": json.dumps(
            [p.get("status") for p in kubectl.json("get", "pods", "-n", namespace)["items"]]
        ),
    }
    assert "secretive" in places["operator log"] or "secretive" in places["events"]
    leaked = [where for where, text in places.items() if token in text]
    assert not leaked, f"the secret value appears in: {', '.join(leaked)}"
    # The pods carry the reference, never the value.
    pods = kubectl("get", "pods", "-n", namespace, "-o", "yaml").stdout
    assert token not in pods and "secretKeyRef" in pods


def test_worker_pods_are_refused_clearly_under_restricted_pod_security(
    operator, make_standin, kubectl, namespace, wait_for
):
    """A namespace that enforces Pod Security `restricted` and a template that breaks it: the job must not
    hang Pending while the operator retries a 403 in its log; it fails naming the policy, or runs."""
    kubectl(
        "label", "namespace", namespace, "--overwrite",
        "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest",
    )  # fmt: skip
    job = make_standin("privileged", 1, container={"securityContext": {"privileged": True}})
    kubectl.apply(job, "-n", namespace)

    def settled():
        failed = condition(get_job(kubectl, namespace, "privileged"), "Failed")
        return failed if failed is not None and failed.true else None

    failed = wait_for(settled, timeout=60, what="the TrainJob failed for the refused pods")
    assert "PodSecurity" in failed.message and "privileged" in failed.message, failed
    assert kubectl.json("get", "pods", "-n", namespace)["items"] == []
