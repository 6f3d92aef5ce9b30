"""The node agent's only connection to the API server: plain JSON over the `kubernetes` client's transport.

Objects stay the API server's JSON (dicts), so the pure parts read exactly what the server sent.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger("mwms_dev.nodeagent")

MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str, what: str) -> None:
        try:
            message = json.loads(body).get("message", body)
        except (ValueError, AttributeError):
            message = body
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status = status


class Kube:
    def __init__(self, kubeconfig: str, *, pool_size: int = 32) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool_size  # one request per pod worker thread at most
        self.api = client.ApiClient(cfg)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] = 30,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        req = self.api.param_serialize(
            method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        resp = self.api.call_api(*req, _request_timeout=timeout)
        if not 200 <= resp.status <= 299:
            data = resp.read()
            raise ApiError(resp.status, data.decode(errors="replace"), f"{method} {path}")
        if stream:
            return resp.response
        data = resp.read()
        return json.loads(data) if data else None

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, path: str, **query: Any) -> tuple[list[dict[str, Any]], str]:
        data = self.get(path, query=query)
        return data.get("items") or [], data["metadata"]["resourceVersion"]

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int, **query: Any
    ) -> Iterator[dict[str, Any]]:
        """Watch events from `resource_version` until the server ends the watch after `timeout_seconds`."""
        resp = self.request(
            "GET",
            path,
            query={
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": timeout_seconds,
                **query,
            },
            timeout=(10, timeout_seconds + 30),
            stream=True,
        )
        try:
            for line in iter_resp_lines(resp):
                if line:
                    yield json.loads(line)
        finally:
            resp.close()
            resp.release_conn()

    # --- the calls the agent makes -------------------------------------------------------------

    def patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return self.request(
            "PATCH", _pod(namespace, name) + "/status", body={"status": status}, content_type=MERGE_PATCH
        )

    def post_pod_event(
        self, pod: dict[str, Any], *, reason: str, message: str, node: str, now: str, type_: str = "Warning"
    ) -> None:
        """An Event on the pod, as the kubelet records one (e.g. `Unhealthy` for a failed probe)."""
        meta = pod.get("metadata") or {}
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        event = {
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": name,
                "namespace": namespace,
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """Delete with grace period 0 (the kubelet's last step), only if it is still the same pod."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.request("DELETE", _pod(namespace, name), body=body)
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone already, or a new pod with the same name
                raise

    def request_token(
        self,
        namespace: str,
        service_account: str,
        pod_name: str,
        pod_uid: str,
        audience: str | None,
        seconds: int,
    ) -> str:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid},
            },
        }
        path = f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(service_account)}/token"
        return self.request("POST", path, body=body)["status"]["token"]

    def object_data(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        """The data of a ConfigMap or Secret (Secret values decoded), or None if it does not exist."""
        plural = "configmaps" if kind == "configmap" else "secrets"
        obj = self.get_or_none(f"/api/v1/namespaces/{quote(namespace)}/{plural}/{quote(name)}")
        if obj is None:
            return None
        if kind == "configmap":
            return dict(obj.get("data") or {})
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}


def _pod(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
