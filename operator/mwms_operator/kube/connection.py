"""How the operator connects to the API server, set up once at startup: its credentials (kopf's login, which
the API client kube/client.py shares) and the threads the client's blocking calls run on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
from typing import Any

import kopf


def use_api_threads(count: int) -> None:
    """Run the blocking calls (asyncio.to_thread) on `count` threads: set once, at startup, on the running
    loop. asyncio's own default, min(32, CPUs + 4) threads, would cap the calls in flight by the CPUs."""
    pool = concurrent.futures.ThreadPoolExecutor(count, thread_name_prefix="api")
    asyncio.get_running_loop().set_default_executor(pool)


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
