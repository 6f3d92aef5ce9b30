"""The client side's one module that talks to the API server (`mwms submit`, `Cluster`).

Imports the `kubernetes` package on first use only: the trainer image never needs it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mwms_operator import constants


class SubmitError(RuntimeError):
    """Something the user must fix before a job can run (the message says what)."""


@dataclass(frozen=True)
class Cluster:
    """Where `MirroredStrategyRunner(cluster=...)` and `mwms submit` send jobs. None: the kubeconfig's."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    image: str | None = None  # default: the operator's trainer image


class JobClient:
    def __init__(self, cluster: Cluster) -> None:
        import kubernetes

        api = kubernetes.config.new_client_from_config(
            config_file=cluster.kubeconfig, context=cluster.context
        )
        # Any: plain dicts go in and out (the client's models are only to_dict()-ed).
        self._core: Any = kubernetes.client.CoreV1Api(api)
        self._custom: Any = kubernetes.client.CustomObjectsApi(api)
        self._errors = kubernetes.client.exceptions.ApiException
        if cluster.namespace:
            self.namespace = cluster.namespace
        else:
            _, active = kubernetes.config.list_kube_config_contexts(config_file=cluster.kubeconfig)
            self.namespace = (active or {}).get("context", {}).get("namespace") or "default"

    def _refused(self, what: str, error: Any) -> SubmitError:
        import json

        try:
            message = json.loads(error.body).get("message") or error.reason
        except (TypeError, ValueError):
            message = error.reason
        return SubmitError(f"the API server refused {what}: {message}")

    def create_configmap(self, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self._core.create_namespaced_config_map(self.namespace, dict(body)).to_dict()
        except self._errors as e:
            raise self._refused(f"ConfigMap {body['metadata'].get('name')}", e) from None

    def create_trainjob(self, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self._custom.create_namespaced_custom_object(
                constants.GROUP, constants.VERSION, self.namespace, constants.PLURAL, dict(body)
            )
        except self._errors as e:
            raise self._refused(f"TrainJob {body['metadata'].get('name')}", e) from None

    def own_configmap(self, name: str, owner: Mapping[str, Any]) -> None:
        """The TrainJob owns its code: garbage collection deletes the ConfigMap with the job."""
        patch = {"metadata": {"ownerReferences": [dict(owner)]}}
        try:
            self._core.patch_namespaced_config_map(name, self.namespace, patch)
        except self._errors as e:
            raise self._refused(
                f"making TrainJob {owner.get('name')} the owner of ConfigMap {name}", e
            ) from None

    def delete_configmap(self, name: str) -> None:
        try:
            self._core.delete_namespaced_config_map(name, self.namespace)
        except self._errors as e:
            if e.status != 404:
                raise self._refused(f"deleting ConfigMap {name}", e) from None

    def get_trainjob(self, name: str) -> dict[str, Any] | None:
        try:
            return self._custom.get_namespaced_custom_object(
                constants.GROUP, constants.VERSION, self.namespace, constants.PLURAL, name
            )
        except self._errors as e:
            if e.status == 404:
                return None
            raise

    def delete_trainjob(self, name: str) -> None:
        try:
            self._custom.delete_namespaced_custom_object(
                constants.GROUP,
                constants.VERSION,
                self.namespace,
                constants.PLURAL,
                name,
                body={"propagationPolicy": "Background"},
            )
        except self._errors as e:
            if e.status != 404:
                raise self._refused(f"deleting TrainJob {name}", e) from None

    def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            return self._core.read_namespaced_pod(name, self.namespace).to_dict()
        except self._errors as e:
            if e.status == 404:
                return None
            raise

    def stream_log(self, pod: str, on_line: Callable[[str], None], stop: threading.Event) -> None:
        """Follow the pod's `trainer` log until it ends or `stop` is set (call in a thread)."""
        while not stop.is_set():
            try:
                response = self._core.read_namespaced_pod_log(
                    pod,
                    self.namespace,
                    container=constants.CONTAINER_NAME,
                    follow=True,
                    _preload_content=False,
                )
            except self._errors:  # not started yet
                stop.wait(1)
                continue
            for line in _lines(response.stream(decode_content=True)):
                on_line(line)
                if stop.is_set():
                    break
            response.release_conn()
            return


def _lines(chunks: Iterator[bytes]) -> Iterator[str]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            yield line.decode(errors="replace")
    if buffer:
        yield buffer.decode(errors="replace")
