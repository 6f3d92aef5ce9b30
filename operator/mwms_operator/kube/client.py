"""The only module that talks to the API server: a small blocking HTTP client (http.client) on the
credentials kopf logs in with, not the `kubernetes` client (docs/design/own-api-client.md). Callers run its
calls with asyncio.to_thread; each thread keeps one keep-alive connection. Creates and deletes are idempotent
and carry the uid they mean, so a retried reconcile is harmless and never touches an object not the job's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import http.client
import json
import logging
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import kopf

from mwms_contract import names
from mwms_contract.status import MAX_MESSAGE, format_time
from mwms_operator import __version__
from mwms_operator.kube.credentials import login
from mwms_operator.kube.events import EventBook, new_event
from mwms_operator.kube.refusals import TRANSIENT_ERRORS, ApiError, NamespaceEnding, NameTaken, refusal
from mwms_operator.telemetry import metrics

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 15.0  # a hung call must not stall a job's reconcile loop
EVENT_TIMEOUT_SECONDS = 10.0
# Creates are checked by the API server against the full schema: an unknown field (a typo such as
# `resourcez`) is refused with 400 naming it, instead of being dropped silently.
STRICT = "?fieldValidation=Strict"
DRY_RUN = "&dryRun=All"  # admission (quota, LimitRange, webhooks) answers; nothing is stored
# A collection's answer as the objects' metadata only (a deletecollection answers with what it deleted).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
TRAINJOBS_PATH = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{{namespace}}/{names.PLURAL}"
# Kueue's Workloads: the operator makes a MultiKueue job's (decide/managed_by.py) and ends a worker copy's.
WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"

# What a keep-alive connection the server has closed meanwhile raises: sent again on a new connection.
_STALE_CONNECTION = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def use_api_threads(count: int) -> None:
    """Run the blocking calls (asyncio.to_thread) on `count` threads: set once, at startup, on the running
    loop. asyncio's own default, min(32, CPUs + 4) threads, would cap the calls in flight by the CPUs."""
    pool = concurrent.futures.ThreadPoolExecutor(count, thread_name_prefix="api")
    asyncio.get_running_loop().set_default_executor(pool)


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """Where and how to connect, made once per login (the SSL context is shared by all connections)."""

    https: bool
    host: str
    port: int
    prefix: str  # a server URL may have a path (an API proxy); requests go below it
    headers: dict[str, str]
    ssl_context: Any

    @classmethod
    def of(cls, info: kopf.ConnectionInfo) -> _Endpoint:
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

    def connect(self) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=TIMEOUT_SECONDS, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_SECONDS)


class Kube:
    """The API calls the operator makes, on credentials from `credentials()` (asked again after a 401: a
    ServiceAccount token is rotated on disk)."""

    def __init__(self, credentials: Callable[[], kopf.ConnectionInfo | None]) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()
        self._local = threading.local()  # this thread's connection and the login it was made with
        self._events = EventBook()
        self._endpoint = self._login()

    @classmethod
    def connect(cls, settings: kopf.OperatorSettings) -> Kube:
        return cls(lambda: login(settings=settings))

    def _login(self) -> _Endpoint:
        info = self._credentials()
        if info is None:
            raise kopf.LoginError("no credentials: neither a ServiceAccount (in a pod) nor $KUBECONFIG")
        return _Endpoint.of(info)

    def _connection(self) -> http.client.HTTPConnection:
        endpoint = self._endpoint
        if getattr(self._local, "endpoint", None) is not endpoint:
            self._drop_connection()
            self._local.connection, self._local.endpoint = endpoint.connect(), endpoint
        connection: http.client.HTTPConnection = self._local.connection
        return connection

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
        self._local.connection = self._local.endpoint = None

    def _request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content_type: str = "application/json",
        timeout: float = TIMEOUT_SECONDS,
        accept: str = "application/json",
        parse: bool = True,
    ) -> dict[str, Any]:
        """The answer's JSON ({} unless `parse`: read and dropped); ApiError for any status but 2xx."""
        data = json.dumps(body).encode() if body is not None else None
        relogged = resent = False
        while True:
            connection, endpoint = self._connection(), self._endpoint
            reused = connection.sock is not None
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            headers = {"Accept": accept, "User-Agent": f"{names.MANAGED_BY}/{__version__}"}
            if data is not None:
                headers["Content-Type"] = content_type
            started = time.monotonic()
            try:
                connection.request(
                    method, endpoint.prefix + path, body=data, headers={**headers, **endpoint.headers}
                )
                response = connection.getresponse()
                payload = response.read()
            except BaseException as error:
                metrics.count_request(method, path, "error", time.monotonic() - started)
                self._drop_connection()  # half a request or answer: this connection is unusable
                # Closed by the server while idle: nothing was done, so it is sent again, once.
                if isinstance(error, _STALE_CONNECTION) and reused and not resent:
                    resent = True
                    continue
                raise
            metrics.count_request(method, path, str(response.status), time.monotonic() - started)
            if response.status == 401 and not relogged:
                relogged = True
                with self._lock:
                    if self._endpoint is endpoint:
                        self._endpoint = self._login()
                continue
            if 200 <= response.status < 300:
                answer: dict[str, Any] = json.loads(payload) if payload and parse else {}
                return answer
            raise ApiError.of(response.status, payload, response.reason)

    def _request_unless_gone(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any] | None:
        """As _request, but None when the object is not there (404): reading, patching or deleting what is
        already gone is no error for a reconcile."""
        try:
            return self._request(method, path, body, **kwargs)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def _post(self, path: str, body: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """As _request, but NamespaceEnding when the namespace is being deleted or gone (a 404 that names the
        namespace, not the object): nothing is created there."""
        try:
            return self._request("POST", path, body, **kwargs)
        except ApiError as error:
            terminating = error.status == 403 and "being terminated" in error.message
            if terminating or (error.status == 404 and error.kind == "namespaces"):
                raise NamespaceEnding(error.message) from None
            raise

    def _create(self, path: str, body: Mapping[str, Any], *, dry_run: bool = False) -> str | None:
        """The new object's uid; None if this job's object of that name is there already (a retried or
        lagging reconcile). NameTaken if it is there and is not this job's; Rejected/Refused as refusal()."""
        meta = body.get("metadata") or {}
        name, owner = str(meta.get("name")), _controller_uid(body)
        for _ in range(2):  # the object went between the 409 and the read: sent again, once
            try:
                created = self._post(path + STRICT + (DRY_RUN if dry_run else ""), body)
                return str((created.get("metadata") or {}).get("uid") or "")
            except ApiError as error:
                if error.status != 409:
                    raise refusal(error) from None
                conflict = error
            existing = self._request_unless_gone("GET", f"{path}/{_quote(name)}")
            if existing is not None:
                if owner is not None and _controller_uid(existing) == owner:
                    return None
                raise NameTaken(str(body.get("kind") or "object"), name, _owner_text(existing))
        raise conflict

    def create_pod(self, namespace: str, body: Mapping[str, Any], *, dry_run: bool = False) -> str | None:
        """The new pod's uid (nothing is stored with dry_run), None if the job's pod is there already."""
        return self._create(_core(namespace, "pods"), body, dry_run=dry_run)

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> str | None:
        return self._create(_core(namespace, "services"), body)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Deletes the pod of this name only while it is the one with this uid: a pod that took its name
        meanwhile (another owner's) is left alone."""
        try:
            self._request_unless_gone("DELETE", _core(namespace, "pods", name), _only(uid))
        except ApiError as error:
            if error.status != 409:  # 409: the precondition failed, the pod of that name is another
                raise
            log.info("pod %s/%s is no longer the one with uid %s: left alone", namespace, name, uid)

    def delete_pods(self, namespace: str, labels: str, fields: str) -> None:
        """Deletes the pods both selectors match with one request (deletecollection). Its answer, the pods it
        deleted, is asked for as their metadata only and not parsed: nothing reads it."""
        query = urllib.parse.urlencode({"labelSelector": labels, "fieldSelector": fields})
        path = f"{_core(namespace, 'pods')}?{query}"
        self._request_unless_gone("DELETE", path, accept=METADATA_ONLY, parse=False)

    def pod_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the pod of this name now; None if there is none."""
        pod = self._request_unless_gone("GET", _core(namespace, "pods", name))
        if pod is None:
            return None
        uid = (pod.get("metadata") or {}).get("uid")
        return str(uid) if uid else None

    def pod_events(self, namespace: str, name: str, uid: str, kind: str = "Pod") -> list[dict[str, Any]]:
        """The events of this pod (not of an earlier pod of the same name): its pulls, probes, mounts; or of
        another object of this `kind` (the TrainJob)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name},involvedObject.uid={uid}"
        # resourceVersion 0: from the API server's cache, not a quorum read of every event in the namespace
        # from etcd (a moment stale at most: a pull's end seen a moment late)
        query = urllib.parse.urlencode({"fieldSelector": selector, "resourceVersion": "0"})
        answer = self._request("GET", f"{_core(namespace, 'events')}?{query}")
        return list(answer.get("items") or [])

    def job_pods(self, namespace: str, job_uid: str, restart: int) -> list[dict[str, Any]]:
        """The job's worker pods of the group's `restart`-th (re)start, whole (a group's post-mortem)."""
        labels = urllib.parse.urlencode(
            {"labelSelector": f"{names.LABEL_JOB_UID}={job_uid},{names.LABEL_RESTART}={restart}"}
        )
        return list(self._request("GET", f"{_core(namespace, 'pods')}?{labels}").get("items") or [])

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> dict[str, Any] | None:
        """JSON merge patch of status (None values remove fields); None if the TrainJob is gone."""
        path = _trainjob(namespace, name) + "/status"
        return self._request_unless_gone(
            "PATCH", path, {"status": dict(status)}, content_type="application/merge-patch+json"
        )

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on the TrainJob; a repeat (events.py) counts on the Event already posted, as client-go's
        recorder does. Best effort, tried once: an event that cannot be posted must neither fail the reconcile
        nor delay other events (kopf's poster retries each one for a minute, in one queue).
        NamespaceEnding if its namespace is being deleted."""
        meta = job.get("metadata") or {}
        namespace, uid, now = str(meta.get("namespace")), str(meta.get("uid")), datetime.now(UTC)
        key, message, repeat = self._events.correlate(
            namespace, uid, type_, reason, message[:MAX_MESSAGE], time.monotonic()
        )
        stamp = format_time(now)
        try:
            path = _core(namespace, "events")
            if repeat is not None:
                count = repeat.count + 1
                patch = {
                    "count": count,
                    "lastTimestamp": stamp,
                    "message": message,
                    "series": {"count": count, "lastObservedTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
                }
                counted = self._request_unless_gone(
                    "PATCH",
                    f"{path}/{_quote(repeat.name)}",
                    patch,
                    content_type="application/merge-patch+json",
                    timeout=EVENT_TIMEOUT_SECONDS,
                )
                if counted is not None:  # else gone (the API server's event TTL): posted anew below
                    self._events.posted(key, repeat.name, count, time.monotonic())
                    return
            event = new_event(meta, type_, reason, message, stamp, socket.gethostname())
            created = self._post(path, event, timeout=EVENT_TIMEOUT_SECONDS)
            name = str((created.get("metadata") or {}).get("name") or "")
            if name:
                self._events.posted(key, name, 1, time.monotonic())
        except TRANSIENT_ERRORS as error:
            log.info("event %s on %s/%s not posted: %s", reason, namespace, meta.get("name"), error)

    def delete_trainjob(self, namespace: str, name: str, uid: str) -> None:
        """Only the TrainJob with this uid (not one created again under its name meanwhile)."""
        try:
            self._request_unless_gone("DELETE", _trainjob(namespace, name), _only(uid))
        except ApiError as error:
            if error.status != 409:
                raise
            log.info("TrainJob %s/%s is no longer the one with uid %s: left alone", namespace, name, uid)

    def create_workload(self, namespace: str, body: Mapping[str, Any]) -> str | None:
        """The new Workload's uid, None if the job's Workload is there already."""
        return self._create(_workloads(namespace), body)

    def apply_workload_status(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Server-side apply of the fields of a Workload's status that `body` holds (Kueue keeps the rest)."""
        path = f"{_workloads(namespace)}/{_quote(name)}/status?fieldManager={names.MANAGED_BY}&force=true"
        self._request_unless_gone("PATCH", path, body, content_type="application/apply-patch+yaml")

    # The leader-election Lease (coordination.k8s.io/v1) in the operator's own namespace: see kube/leader.py.

    def get_lease(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any] | None:
        return self._request_unless_gone("GET", _lease(namespace, name), timeout=timeout)

    def create_lease(self, namespace: str, body: Mapping[str, Any], *, timeout: float) -> bool:
        """False if another replica created it first (409). Its namespace missing or ending is an ApiError,
        tried again (not NamespaceEnding: the Lease is no job's)."""
        try:
            self._request("POST", _lease(namespace), body, timeout=timeout)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True

    def update_lease(self, namespace: str, body: Mapping[str, Any], *, timeout: float) -> bool:
        """A replace carrying the resourceVersion that was read: False if the Lease changed since (409), so
        of two replicas that read the same version only one wins."""
        name = str((body.get("metadata") or {}).get("name"))
        try:
            self._request("PUT", _lease(namespace, name), body, timeout=timeout)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True


def _only(uid: str) -> dict[str, Any]:
    """DeleteOptions that make the API server delete the object only if it still has this uid (else 409)."""
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


def _controller_uid(body: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its controller ownerReference), if it has one."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _owner_text(body: Mapping[str, Any]) -> str:
    """Who owns an object, for people: its controller, else its first owner, else "no owner"."""
    refs = (body.get("metadata") or {}).get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return f"{ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})" if ref else "no owner"


def _core(namespace: str, plural: str, name: str | None = None) -> str:
    path = f"/api/v1/namespaces/{_quote(namespace)}/{plural}"
    return f"{path}/{_quote(name)}" if name is not None else path


def _lease(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{_quote(namespace)}/leases"
    return f"{path}/{_quote(name)}" if name is not None else path


def _workloads(namespace: str) -> str:
    return WORKLOADS_PATH.format(namespace=_quote(namespace))


def _trainjob(namespace: str, name: str) -> str:
    return TRAINJOBS_PATH.format(namespace=_quote(namespace)) + f"/{_quote(name)}"


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")
