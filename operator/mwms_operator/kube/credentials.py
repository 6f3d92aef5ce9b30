"""How the operator logs in to the API server: kopf's credentials, which kube/client.py uses too."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import kopf


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's credentials, and ours: the ServiceAccount in a pod, else $KUBECONFIG (explicit, predictable in
    tests)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return kopf.login_with_kubeconfig(**kwargs)
    info = kopf.login_with_service_account(**kwargs)
    if info is None:
        return None
    # Like client-go: the address from the environment, not kopf's fixed https://kubernetes.default.svc,
    # which needs cluster DNS and port 443.
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return dataclasses.replace(info, server=f"https://{host}:{port}")
