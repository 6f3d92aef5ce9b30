"""The only module that talks to the API server (the `kubernetes` client; kopf's own for login).

Calls are blocking; handlers run them with asyncio.to_thread. Creates are idempotent (409 means it is there),
deletes too (404 means it is gone), so a retried or repeated reconcile is harmless.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import kubernetes
import pydantic
import urllib3
from kubernetes.client.exceptions import ApiException

from mwms_operator import constants

log = logging.getLogger(__name__)


# What a call may raise that a later try can fix: the API server's errors, timeouts, lost connections.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ApiException, OSError, urllib3.exceptions.HTTPError)


class Rejected(Exception):
    """The object is invalid (400/422 from the API server, Pod Security, or the client's own schema check
    before any request): retrying cannot help."""


class Refused(Exception):
    """The API server refused to create the object for now (403: a ResourceQuota exceeded, a LimitRange, a
    validating webhook): it may be accepted once that changes, so it is worth trying again later."""


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's credentials: the ServiceAccount in a pod, else $KUBECONFIG (explicit, predictable in tests)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return kopf.login_with_kubeconfig(**kwargs)
    info = kopf.login_with_service_account(**kwargs)
    if info is None:
        return None
    # Like client-go (and the `kubernetes` client below): the address from the environment, not kopf's fixed
    # https://kubernetes.default.svc, which needs cluster DNS and port 443.
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return dataclasses.replace(info, server=f"https://{host}:{port}")


class Kube:
    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)

    @classmethod
    def connect(cls) -> Kube:
        configuration = kubernetes.client.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        else:
            kubernetes.config.load_kube_config(client_configuration=configuration)
        # Short timeouts: a hung call must not stall a job's reconcile loop.
        configuration.retries = 1
        return cls(kubernetes.client.ApiClient(configuration))

    def _create(self, create: Any, namespace: str, body: Mapping[str, Any]) -> bool:
        try:
            create(namespace, body, _request_timeout=15)
        except pydantic.ValidationError as error:
            # The client checks the body against its models first (e.g. `resourcez` in a container).
            raise Rejected(invalid_fields(body, error)) from None
        except ApiException as error:
            if error.status == 409:
                return False
            reason = _reason(error)
            if error.status == 403 and "being terminated" in reason:
                return False  # its namespace is going away, and the TrainJob with it
            # 400/422: invalid; 403 from Pod Security admission: the template breaks the namespace's policy.
            if error.status in (400, 422) or (error.status == 403 and "violates PodSecurity" in reason):
                raise Rejected(reason) from None
            if error.status == 403:  # quota, LimitRange, a validating webhook: the message says which
                raise Refused(reason) from None
            raise
        return True

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> bool:
        """True if created, False if it already existed."""
        return self._create(self.core.create_namespaced_pod, namespace, body)

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> bool:
        return self._create(self.core.create_namespaced_service, namespace, body)

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, _request_timeout=15)
        except ApiException as error:
            if error.status != 404:
                raise

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the pod of this name now; None if there is none."""
        try:
            pod = self.core.read_namespaced_pod(name, namespace, _request_timeout=15)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return pod.metadata.uid if pod.metadata is not None else None

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any] | None:
        """JSON merge patch of status (None values remove fields); None if the TrainJob is gone."""
        try:
            response = self.custom.patch_namespaced_custom_object_status(
                constants.GROUP,
                constants.VERSION,
                namespace,
                constants.PLURAL,
                name,
                {"status": dict(status)},
                _request_timeout=15,
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], response)

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on the TrainJob. Best effort, tried once: an event that cannot be posted (its namespace
        is being deleted, say) must neither fail the reconcile nor delay other events (kopf's poster retries
        each one for a minute, in one queue)."""
        meta = job.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event: Any = {  # a plain dict, as the client accepts for every body
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
            "involvedObject": {
                "apiVersion": constants.API_VERSION,
                "kind": constants.KIND,
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": constants.MANAGED_BY},
            "reportingComponent": constants.MANAGED_BY,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(str(meta.get("namespace")), event, _request_timeout=10)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as error:
            log.info(
                "event %s on %s/%s not posted: %s", reason, meta.get("namespace"), meta.get("name"), error
            )

    def delete_trainjob(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name, _request_timeout=15
            )
        except ApiException as error:
            if error.status != 404:
                raise


def _reason(error: ApiException) -> str:
    try:
        return json.loads(error.body or "{}").get("message") or str(error.reason)
    except ValueError:
        return str(error.reason)


def invalid_fields(body: Mapping[str, Any], error: pydantic.ValidationError) -> str:
    """The client's schema errors as `<Kind> is invalid: <path>: <message>`, paths as the API server writes
    them."""
    parts = []
    for item in error.errors()[:5]:
        path = ""
        for step in item["loc"][1:]:  # the first step names the call's argument (the body)
            path += f"[{step}]" if isinstance(step, int) else f".{step}" if path else str(step)
        parts.append(f"{path}: {item['msg']}")
    more = f" (and {error.error_count() - 5} more)" if error.error_count() > 5 else ""
    return f"{body.get('kind', 'object')} is invalid: {'; '.join(parts)}{more}"
