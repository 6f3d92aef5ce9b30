"""How the operator connects to the API server, set up once at startup: its credentials (kopf's login, which
the API client kube/client.py shares), where and how each connection is made, and the threads the client's
blocking calls run on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import http.client
import os
import urllib.parse
from typing import Any

import kopf


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where and how to connect, made once per login (the SSL context is shared by all connections)."""

    https: bool
    host: str
    port: int
    prefix: str  # a server URL may have a path (an API proxy); requests go below it
    headers: dict[str, str]
    ssl_context: Any

    @classmethod
    def of(cls, info: kopf.ConnectionInfo) -> Endpoint:
        url = urllib.parse.urlsplit(info.server)
        https = url.scheme == "https"
        return cls(
            https=https,
            host=url.hostname or "localhost",
            port=url.port or (443 if https else 80),
            prefix=url.path.rstrip("/"),
            headers=info.as_http_headers(),  # bearer token or basic auth; client certificates go in ssl
            ssl_context=info.as_ssl_context() if https else None,
        )

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


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
