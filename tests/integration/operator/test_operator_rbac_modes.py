"""The chart's RBAC on the real API server, in both modes, asked of the authorizer (SubjectAccessReviews):

- cluster-wide (no operator.watchNamespaces): the operator's ServiceAccount works in every namespace;
- namespaced (operator.watchNamespaces set): only in the watched namespaces, and the operator really runs a
  TrainJob there with nothing more (kopf keeps list/watch of CRDs and namespaces only);
- aggregated roles: a namespace's admin and editor manage TrainJobs there, a viewer reads them, nobody gets
  them in another namespace.

The chart is rendered with `helm template` and its RBAC objects applied, under a name of its own so it cannot
borrow rights from manifests/rbac.yaml that other tests apply."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rbac_support import ALLOWED, CLUSTER_ALLOWED, DENIED, can_i

from mwms_kit.waits import condition, wait_condition

SUFFIX = uuid.uuid4().hex[:6]
WATCHED, ALSO_WATCHED, UNWATCHED = f"rb-a-{SUFFIX}", f"rb-b-{SUFFIX}", f"rb-other-{SUFFIX}"
EVENTS_HIDDEN = f"rb-noev-{SUFFIX}"  # a namespace where the operator may post events but not list them
RELEASE_NAMESPACE = f"rb-system-{SUFFIX}"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
TRAINJOBS = "trainjobs.mwms.dev"

# What the operator does in a namespace it serves (and must not do where it does not): the cluster-wide
# mode's tables (rbac_support), asked per namespace.
WORK = ALLOWED
NEVER = [(verb, resource, sub) for verb, resource, sub in DENIED if resource in ("secrets", TRAINJOBS)] + [
    ("create", "pods", "exec")
]


CHART = Path(__file__).resolve().parents[3] / "charts" / "mwms-operator"


def install_rbac(
    kubectl: Any, helm: str, release: str, *values: str, edit: Any = lambda doc: doc
) -> list[dict[str, Any]]:
    """The chart's RBAC objects (and its ServiceAccount), rendered offline, each passed through `edit` and
    applied; returns them."""
    rendered = subprocess.run(
        [helm, "template", release, str(CHART), "--namespace", RELEASE_NAMESPACE,
         "--set", f"fullnameOverride={release}", "--set", "crds.enabled=false", *values],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = [edit(d) for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            doc["metadata"]["namespace"] = RELEASE_NAMESPACE
    kubectl.apply(docs)
    return docs


def wrong_answers(kubectl: Any, who: str, questions: list, scope: list[str], expected: bool) -> list[str]:
    says = "may not" if expected else "may"
    return [
        f"{who} {says} {verb} {resource}{'/' + sub if sub else ''} {' '.join(scope)}"
        for verb, resource, sub in questions
        if can_i(kubectl, who, verb, resource, sub, *scope) != expected
    ]


@pytest.fixture(scope="module")
def namespaces(kubectl: Any, crd: None, wait_for: Any) -> Iterator[None]:
    for name in (WATCHED, ALSO_WATCHED, UNWATCHED, RELEASE_NAMESPACE, EVENTS_HIDDEN):
        kubectl("create", "namespace", name)
    for name in (WATCHED, UNWATCHED, EVENTS_HIDDEN):
        wait_for(
            lambda name=name: kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
            timeout=30,
            what=f"serviceaccount default in {name}",
        )
    yield
    for name in (WATCHED, ALSO_WATCHED, UNWATCHED, RELEASE_NAMESPACE, EVENTS_HIDDEN):
        kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def namespaced(kubectl: Any, helm_binary: str, namespaces: None) -> Iterator[str]:
    release = f"rb-ns-{SUFFIX}"
    docs = install_rbac(
        kubectl, helm_binary, release, "--set", f"operator.watchNamespaces={{{WATCHED},{ALSO_WATCHED}}}"
    )
    yield release
    delete_cluster_scoped(kubectl, docs)


@pytest.fixture(scope="module")
def clusterwide(kubectl: Any, helm_binary: str, namespaces: None) -> Iterator[str]:
    release = f"rb-cw-{SUFFIX}"
    docs = install_rbac(kubectl, helm_binary, release)
    yield release
    delete_cluster_scoped(kubectl, docs)


def delete_cluster_scoped(kubectl: Any, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            kubectl("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found", check=False)


def account(release: str) -> str:
    return f"system:serviceaccount:{RELEASE_NAMESPACE}:{release}"


def test_namespaced_mode_grants_the_work_in_watched_namespaces_only(kubectl, namespaced):
    who = account(namespaced)
    wrong = []
    for namespace in (WATCHED, ALSO_WATCHED):
        wrong += wrong_answers(kubectl, who, WORK, ["-n", namespace], True)
    for scope in (["-n", UNWATCHED], ["-n", "default"], ["-n", RELEASE_NAMESPACE], ["--all-namespaces"]):
        wrong += wrong_answers(kubectl, who, WORK, scope, False)
    for scope in (["-n", WATCHED], ["-n", UNWATCHED], ["--all-namespaces"]):
        wrong += wrong_answers(kubectl, who, NEVER, scope, False)
    wrong += wrong_answers(kubectl, who, CLUSTER_ALLOWED, [], True)
    assert not wrong, "\n".join(wrong)


def test_clusterwide_mode_grants_the_work_everywhere(kubectl, clusterwide):
    who = account(clusterwide)
    wrong = []
    for scope in (["-n", WATCHED], ["-n", UNWATCHED], ["--all-namespaces"]):
        wrong += wrong_answers(kubectl, who, WORK, scope, True)
        wrong += wrong_answers(kubectl, who, NEVER, scope, False)
    wrong += wrong_answers(kubectl, who, CLUSTER_ALLOWED, [], True)
    assert not wrong, "\n".join(wrong)


MANAGE = [(verb, TRAINJOBS, "") for verb in ("create", "get", "list", "watch", "update", "patch", "delete")]
READ = [(verb, TRAINJOBS, "") for verb in ("get", "list", "watch")] + [("get", TRAINJOBS, "status")]
WRITE = [(verb, TRAINJOBS, "") for verb in ("create", "update", "patch", "delete")]


def test_namespace_admins_and_editors_manage_trainjobs_and_viewers_read_them(kubectl, clusterwide, wait_for):
    # Only the chart's aggregated roles may grant this here: the same roles from manifests/rbac.yaml (applied
    # by other tests) are removed, so this fails if the chart lost its aggregation labels.
    for name in ("mwms-operator-trainjobs-edit", "mwms-operator-trainjobs-view"):
        kubectl("delete", "clusterrole", name, "--ignore-not-found")
    users = {"admin": f"ada-{SUFFIX}", "edit": f"eddie-{SUFFIX}", "view": f"vic-{SUFFIX}"}
    for role, user in users.items():
        kubectl("create", "rolebinding", f"{role}-{SUFFIX}", f"--clusterrole={role}", f"--user={user}",
                "-n", WATCHED)  # fmt: skip
    # The controller-manager folds the labelled ClusterRoles into admin/edit/view asynchronously.
    wait_for(
        lambda: (
            can_i(kubectl, users["view"], "list", TRAINJOBS, "", "-n", WATCHED)
            and can_i(kubectl, users["edit"], "create", TRAINJOBS, "", "-n", WATCHED)
        ),
        timeout=60,
        what="the TrainJob rules to be aggregated into admin, edit and view",
    )
    wrong = []
    for role in ("admin", "edit"):
        wrong += wrong_answers(kubectl, users[role], MANAGE + READ, ["-n", WATCHED], True)
        wrong += wrong_answers(kubectl, users[role], MANAGE, ["-n", UNWATCHED], False)
        wrong += wrong_answers(kubectl, users[role], [("patch", TRAINJOBS, "status")], ["-n", WATCHED], False)
    wrong += wrong_answers(kubectl, users["view"], READ, ["-n", WATCHED], True)
    wrong += wrong_answers(kubectl, users["view"], WRITE, ["-n", WATCHED], False)
    wrong += wrong_answers(kubectl, users["view"], READ, ["-n", UNWATCHED], False)
    assert not wrong, "\n".join(wrong)


def test_the_operator_runs_a_job_with_namespaced_rbac_alone(
    kubectl, namespaced, make_standin, start_operator, wait_for
):
    """What kopf really needs in namespaced mode: the operator, logged in as the namespaced ServiceAccount,
    runs a TrainJob in a watched namespace to the end, leaves one in an unwatched namespace alone, and never
    meets an RBAC refusal (nor kopf's "Not enough permissions" fallback)."""
    process = start_operator(
        namespaced, RELEASE_NAMESPACE, {"MWMS_WATCH_NAMESPACES": f"{WATCHED},{ALSO_WATCHED}"}
    )
    try:
        for namespace in (UNWATCHED, WATCHED):
            kubectl.apply(make_standin("scoped", 2), "-n", namespace)
        wait_condition(kubectl, WATCHED, "scoped", "Succeeded", timeout=120)
        events = kubectl.json("get", "events", "-n", WATCHED)["items"]
        assert any(e.get("reason") == "PodsCreated" for e in events), "its events were posted"
        other = kubectl.json("get", "trainjob", "scoped", "-n", UNWATCHED)
        assert "status" not in other and kubectl.json("get", "pods", "-n", UNWATCHED)["items"] == []
        # Our finalizer is on the served job: delete it while the operator runs.
        kubectl("delete", "trainjob", "scoped", "-n", WATCHED, "--timeout=60s")
        kubectl("delete", "trainjob", "scoped", "-n", UNWATCHED, "--wait=false")
    finally:
        process.stop()
    log = process.log()
    markers = ("forbidden", "not enough permissions")
    refused = [line for line in log.splitlines() if any(m in line.lower() for m in markers)]
    assert not refused, "the namespaced operator hit RBAC limits:\n" + "\n".join(refused[:20])


def without_event_reads(doc: dict[str, Any]) -> dict[str, Any]:
    """A Role as an administrator may trim it: events may be posted, not listed."""
    if doc["kind"] == "Role":
        for rule in doc["rules"]:
            if rule.get("resources") == ["events"]:
                rule["verbs"] = ["create", "patch"]
    return doc


def test_an_operator_that_may_not_read_pod_events_still_times_a_job_out_and_says_what_to_grant(
    kubectl, helm_binary, namespaces, make_standin, start_operator
):
    """Listing a starting pod's events is refused (403): the job is not stuck behind the refusal. The startup
    timeout still ends it, and a Warning event on the TrainJob names the missing right."""
    release = f"rb-noev-{SUFFIX}"
    docs = install_rbac(
        kubectl, helm_binary, release, "--set", f"operator.watchNamespaces={{{EVENTS_HIDDEN}}}",
        edit=without_event_reads,
    )  # fmt: skip
    assert not can_i(kubectl, account(release), "list", "events", "", "-n", EVENTS_HIDDEN)
    process = start_operator(release, RELEASE_NAMESPACE, {"MWMS_WATCH_NAMESPACES": EVENTS_HIDDEN})
    try:
        # Worker 1 hangs before its rendezvous: the startup clock runs, and wants the pods' events.
        job = make_standin(
            "blind", 2, env={"STANDIN_HANG_INDEX": "1"}, runPolicy={"startupTimeoutSeconds": 15}
        )
        kubectl.apply(job, "-n", EVENTS_HIDDEN)
        done = wait_condition(kubectl, EVENTS_HIDDEN, "blind", "Failed")
        failed = condition(done, "Failed")
        assert failed.reason == "StartupTimeout", failed
        assert "worker 1 (blind-worker-1)" in failed.message, failed.message
        said = [
            e["message"]
            for e in kubectl.json("get", "events", "-n", EVENTS_HIDDEN)["items"]
            if e.get("reason") == "PodEventsForbidden" and e["involvedObject"]["name"] == "blind"
        ]
        assert len(said) == 1, said
        assert f"may not list events in namespace {EVENTS_HIDDEN}" in said[0], said[0]
        assert "grant the operator's ServiceAccount `list` on events" in said[0], said[0]
        kubectl("delete", "trainjob", "blind", "-n", EVENTS_HIDDEN, "--timeout=60s")
    finally:
        process.stop()
        delete_cluster_scoped(kubectl, docs)
    # The refusal is handled, not retried as an error (whose traceback runs through the events lookup).
    assert "_with_startup_events" not in process.log(), process.log()[-3000:]


def sees_trainjobs_only(namespace: str, release: str) -> list[dict[str, Any]]:
    """A Role a half-done set-up may leave: the operator tends TrainJobs and posts events, lists no pods."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": f"{release}-trainjobs-only", "namespace": namespace},
        "rules": [
            {"apiGroups": ["mwms.dev"], "resources": ["trainjobs"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["mwms.dev"], "resources": ["trainjobs/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"{release}-trainjobs-only", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": release, "namespace": RELEASE_NAMESPACE}],
    }
    return [role, binding]


def test_a_watched_namespace_the_operator_may_not_list_holds_no_other_job(
    kubectl, namespaced, make_standin, start_operator, wait_for
):
    """kopf holds every handler until each watched namespace's pods and Services were listed once. Here one
    watched namespace cannot be listed (the ServiceAccount sees only its TrainJobs there), another has no Role
    at all: the operator runs on, the job in the served namespace runs to the end, and the job in the first is
    left alone with one event and one condition that say why."""
    refused, bare = f"rb-refused-{SUFFIX}", f"rb-bare-{SUFFIX}"  # bare: no Role at all, TrainJobs unseen
    for namespace in (refused, bare):
        kubectl("create", "namespace", namespace)
    try:
        kubectl.apply(sees_trainjobs_only(refused, namespaced))
        process = start_operator(
            namespaced, RELEASE_NAMESPACE, {"MWMS_WATCH_NAMESPACES": f"{WATCHED},{refused},{bare}"}
        )
        try:
            kubectl.apply(make_standin("unheld", 2), "-n", WATCHED)
            kubectl.apply(make_standin("unlisted", 2), "-n", refused)
            # kopf retries the refused lists for about a minute first (its error back-offs, 1 s to 21 s).
            wait_condition(kubectl, WATCHED, "unheld", "Succeeded", timeout=300)

            def told() -> list[str]:
                events = kubectl.json("get", "events", "-n", refused)["items"]
                return [e["message"] for e in events if e.get("reason") == "NamespaceUnlisted"]

            said = wait_for(told, timeout=60, what="the NamespaceUnlisted event")
            assert len(said) == 1 and f"could not list namespace {refused}" in said[0], said
            assert "restart the operator" in said[0], said[0]

            def condition() -> dict[str, Any] | None:
                status = kubectl.json("get", "trainjob", "unlisted", "-n", refused).get("status") or {}
                found = [c for c in status.get("conditions") or [] if c["type"] == "NamespaceUnlisted"]
                return found[0] if found else None

            unlisted = wait_for(condition, timeout=30, what="the NamespaceUnlisted condition")
            assert (unlisted["status"], unlisted["reason"], unlisted["message"]) == (
                "True",
                "WatchRefused",
                said[0],
            )
            kubectl("delete", "trainjob", "unheld", "-n", WATCHED, "--timeout=60s")
            assert process.process is not None and process.process.poll() is None, "the operator still runs"
        finally:
            process.stop()
    finally:
        for namespace in (refused, bare):
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    for watch in (f"pods.v1@{refused}", f"trainjobs.v1alpha1.mwms.dev@{bare}"):
        assert f"the watch of {watch} was refused" in process.log(), process.log()[-3000:]
