"""What the operator's ServiceAccount may and may not do (manifests/rbac.yaml and the chart's RBAC), asked of
the API server's authorizer: the tables test_operator_security.py and test_operator_rbac_modes.py share."""

from __future__ import annotations

import json
from typing import Any

OPERATOR_SA = "system:serviceaccount:mwms-system:mwms-operator"

# (verb, resource, subresource, expected). Each is asked in a user namespace, in mwms-system (the operator's
# own) and across all namespaces: the operator's rights are cluster-wide on purpose (it serves every
# namespace), so the answer must be the same everywhere.
ALLOWED = [
    ("get", "trainjobs.mwms.dev", ""),
    ("list", "trainjobs.mwms.dev", ""),
    ("watch", "trainjobs.mwms.dev", ""),
    ("patch", "trainjobs.mwms.dev", ""),
    ("delete", "trainjobs.mwms.dev", ""),  # ttlSecondsAfterFinished
    ("patch", "trainjobs.mwms.dev", "status"),
    ("update", "trainjobs.mwms.dev", "finalizers"),  # blockOwnerDeletion on the owner references
    ("create", "pods", ""),
    ("delete", "pods", ""),
    ("deletecollection", "pods", ""),  # a job's pods that go, in one request (selected by its uid label)
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
    ("create", "services", ""),
    ("delete", "services", ""),
    ("list", "services", ""),
    ("watch", "services", ""),
    ("create", "events", ""),
    ("list", "events", ""),  # a starting pod's events: its image pulls and its readiness probe's last reason
    ("patch", "events", ""),  # a repeated event bumps one Event's count, as client-go's recorder does
    ("create", "podgroups.scheduling.k8s.io", ""),  # native gang scheduling: one per group
    ("get", "podgroups.scheduling.k8s.io", ""),  # read when a create finds one there
    ("deletecollection", "podgroups.scheduling.k8s.io", ""),  # an earlier group's, by the job's uid label
    ("create", "workloads.kueue.x-k8s.io", ""),  # MultiKueue: the Workload of a job MultiKueue runs
    ("get", "workloads.kueue.x-k8s.io", ""),  # read back after a 409
    ("patch", "workloads.kueue.x-k8s.io", "status"),  # a worker cluster's copy: its Finished condition
]
DENIED = [
    ("get", "secrets", ""),
    ("list", "secrets", ""),
    ("watch", "secrets", ""),
    ("create", "secrets", ""),
    ("get", "configmaps", ""),
    ("list", "configmaps", ""),
    ("create", "configmaps", ""),
    ("create", "pods", "exec"),
    ("get", "pods", "exec"),
    ("create", "pods", "attach"),
    ("create", "pods", "portforward"),
    ("create", "pods", "eviction"),
    ("get", "pods", "log"),
    ("update", "pods", ""),
    ("patch", "pods", ""),
    ("update", "trainjobs.mwms.dev", ""),  # kopf patches; update would let it replace a user's spec
    ("create", "trainjobs.mwms.dev", ""),
    ("update", "trainjobs.mwms.dev", "status"),
    ("patch", "services", ""),
    ("update", "services", ""),
    ("update", "podgroups.scheduling.k8s.io", ""),
    ("create", "deployments.apps", ""),
    ("create", "statefulsets.apps", ""),
    ("create", "jobs.batch", ""),
    ("create", "daemonsets.apps", ""),
    ("create", "serviceaccounts", ""),
    ("create", "serviceaccounts", "token"),
    ("create", "persistentvolumeclaims", ""),
    ("create", "roles.rbac.authorization.k8s.io", ""),
    ("create", "rolebindings.rbac.authorization.k8s.io", ""),
    ("delete", "events", ""),
    ("watch", "events", ""),
]
CLUSTER_DENIED = [
    ("escalate", "clusterroles.rbac.authorization.k8s.io", ""),
    ("bind", "clusterroles.rbac.authorization.k8s.io", ""),
    ("create", "clusterroles.rbac.authorization.k8s.io", ""),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("delete", "nodes", ""),
    ("patch", "nodes", ""),
    ("create", "nodes", "proxy"),
    ("delete", "namespaces", ""),
    ("create", "namespaces", ""),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("delete", "persistentvolumes", ""),
    ("impersonate", "users", ""),
    ("impersonate", "serviceaccounts", ""),
    ("create", "certificatesigningrequests.certificates.k8s.io", ""),
    ("create", "tokenreviews.authentication.k8s.io", ""),
]
# What kopf itself needs, cluster-wide (kopf scans resources and follows namespaces).
CLUSTER_ALLOWED = [
    ("list", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("list", "namespaces", ""),
    ("watch", "namespaces", ""),
]


def can_i(kubectl: Any, who: str, verb: str, resource: str, subresource: str, *scope: str) -> bool:
    """Whether `who` may, as the API server's authorizer answers a SubjectAccessReview. Asked by API group
    and resource (`workloads.kueue.x-k8s.io`: group kueue.x-k8s.io), so an API this cluster does not serve
    (Kueue's, the gated PodGroup) is asked as RBAC names it; `kubectl auth can-i` resolves names through
    discovery and asks for an unknown one in the core group. The groups are those impersonation gives."""
    resource, _, name = resource.partition("/")  # RESOURCE/NAME: one object, as `kubectl auth can-i` takes
    kind, _, group = resource.partition(".")
    namespace = scope[1] if scope[:1] == ("-n",) else ""  # "": cluster-scoped, or every namespace
    account = who.removeprefix("system:serviceaccount:")
    groups = ["system:authenticated"]
    if account != who:
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{account.split(':')[0]}"]
    attributes = {"verb": verb, "group": group, "resource": kind, "subresource": subresource, "name": name}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": who, "groups": groups, "resourceAttributes": {**attributes, "namespace": namespace}},
    }
    result = kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review), check=False)
    assert result.returncode == 0, (review, result.stdout, result.stderr)
    return bool(json.loads(result.stdout)["status"].get("allowed"))
