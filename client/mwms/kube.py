"""The client's one module that talks to the API server, through the `kubernetes` package.

Plain dicts go in and out; a refusal or an unreachable server becomes a SubmitError that says what happened.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mwms.log_lines import lines_of, unseen
from mwms_contract import names

# Where the kubelet mounts a pod's service account: token, ca.crt, namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The waits before each new try of a followed log that broke off (a reset, an unreachable API server or
# node); one more break and `stream_log` names it.
STREAM_RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0)
LOG_RIGHT = "get pods/log"  # the RBAC right a pod's log needs
PROXY_RIGHT = "get services/proxy"  # the RBAC right the API server's service proxy needs
PROXY_CONNECT_SECONDS = 10.0


class SubmitError(RuntimeError):
    """Something the user must fix (the message says what): a refusal, an unreachable API server."""


class NotFound(SubmitError):
    """No such TrainJob in the namespace."""


class LogRefused(SubmitError):
    """The API server refused a pod's log (the message names the right it needs)."""


@dataclass
class Proxied:
    """A Service's answer through the API server's service proxy: its status and headers, and its body
    (`body`), or, when asked to stream, the open response to read it from (`stream`, urllib3's)."""

    status: int
    headers: dict[str, str]
    body: bytes = b""
    stream: Any = None


@dataclass(frozen=True)
class Cluster:
    """Where `Client`, `MirroredStrategyRunner(cluster=...)` and `mwms` send jobs. None: the kubeconfig's."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    image: str | None = None  # default: the operator's trainer image


class JobClient:
    def __init__(self, cluster: Cluster) -> None:
        import kubernetes
        import urllib3

        if in_cluster(cluster):
            api, active = _service_account_client(), {"context": {"namespace": pod_namespace()}}
        else:
            try:
                api = kubernetes.config.new_client_from_config(
                    config_file=cluster.kubeconfig, context=cluster.context
                )
                _, active = kubernetes.config.list_kube_config_contexts(config_file=cluster.kubeconfig)
            except (kubernetes.config.ConfigException, OSError) as e:
                where = cluster.kubeconfig or "$KUBECONFIG or ~/.kube/config"
                raise SubmitError(
                    f"no usable kubeconfig at {where} ({e}): set KUBECONFIG or pass --kubeconfig"
                ) from None
        # Any: plain dicts go in and out (the client's models are only to_dict()-ed).
        self._core: Any = kubernetes.client.CoreV1Api(api)
        self._custom: Any = kubernetes.client.CustomObjectsApi(api)
        self._errors = kubernetes.client.exceptions.ApiException
        self._unreachable = urllib3.exceptions.HTTPError
        self.server = api.configuration.host
        context = (active or {}).get("context", {})
        self.namespace = cluster.namespace or context.get("namespace") or "default"

    def _ask(
        self, what: str, call: Callable[[], Any], missing_ok: bool = False, right: str | None = None
    ) -> Any:
        """call(); a refusal or a connection failure as SubmitError naming `what` (a 403 of a call that needs
        the RBAC `right` names it), a 404 as NotFound (or None with missing_ok)."""
        try:
            return call()
        except self._errors as e:
            if e.status == 404:
                if missing_ok:
                    return None
                raise NotFound(f"{what}: not found in namespace {self.namespace}") from None
            raise self._refusal(what, e, right) from None
        except self._unreachable as e:
            raise SubmitError(f"cannot reach the API server at {self.server} ({what}): {e}") from None

    def _custom_args(self, *rest: Any) -> tuple[Any, ...]:
        return (names.GROUP, names.VERSION, self.namespace, names.PLURAL, *rest)

    def create_configmap(self, body: Mapping[str, Any]) -> dict[str, Any]:
        create = self._core.create_namespaced_config_map
        return self._ask(
            f"ConfigMap {body['metadata'].get('name')}", lambda: create(self.namespace, dict(body)).to_dict()
        )

    def create_trainjob(self, body: Mapping[str, Any]) -> dict[str, Any]:
        create = self._custom.create_namespaced_custom_object
        return self._ask(
            f"TrainJob {body['metadata'].get('name')}", lambda: create(*self._custom_args(dict(body)))
        )

    def own_configmap(self, name: str, owner: Mapping[str, Any]) -> None:
        """The TrainJob owns its code: garbage collection deletes the ConfigMap with the job."""
        patch = {"metadata": {"ownerReferences": [dict(owner)]}}
        self._ask(
            f"making TrainJob {owner.get('name')} the owner of ConfigMap {name}",
            lambda: self._core.patch_namespaced_config_map(name, self.namespace, patch),
        )

    def delete_configmap(self, name: str) -> None:
        delete = self._core.delete_namespaced_config_map
        self._ask(f"deleting ConfigMap {name}", lambda: delete(name, self.namespace), missing_ok=True)

    def get_trainjob(self, name: str) -> dict[str, Any]:
        get = self._custom.get_namespaced_custom_object
        return self._ask(f"TrainJob {name}", lambda: get(*self._custom_args(name)))

    def list_trainjobs(self, all_namespaces: bool = False, selector: str | None = None) -> list[Any]:
        listed = self._ask("listing TrainJobs", self._lister(all_namespaces, selector))
        return list(listed.get("items") or [])

    def _lister(self, all_namespaces: bool, selector: str | None, **more: Any) -> Callable[[], Any]:
        """The list call (in a namespace or all) with a label selector; `more` for a watch."""
        chosen = {"label_selector": selector, **more} if selector else more
        if all_namespaces:
            return lambda: self._custom.list_cluster_custom_object(
                names.GROUP, names.VERSION, names.PLURAL, **chosen
            )
        return lambda: self._custom.list_namespaced_custom_object(*self._custom_args(), **chosen)

    def watch_trainjobs(
        self,
        all_namespaces: bool = False,
        selector: str | None = None,
        name: str | None = None,
        timeout: int | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(ADDED|MODIFIED|DELETED, the job) for each change from now, for `timeout` seconds (None: ever)."""
        import kubernetes

        fields = {"field_selector": f"metadata.name={name}"} if name else {}
        listed = self._ask("listing TrainJobs", self._lister(all_namespaces, selector, **fields))
        version = listed.get("metadata", {}).get("resourceVersion")
        args: tuple[Any, ...] = (
            (names.GROUP, names.VERSION, names.PLURAL) if all_namespaces else self._custom_args()
        )
        custom = self._custom
        call = custom.list_cluster_custom_object if all_namespaces else custom.list_namespaced_custom_object
        options: dict[str, Any] = {**fields, **({"label_selector": selector} if selector else {})}
        if timeout is not None:
            options["timeout_seconds"] = timeout
        watch = kubernetes.watch.Watch()
        try:
            for event in watch.stream(call, *args, resource_version=version, **options):
                yield event["type"], event["object"]
        except self._errors as e:
            raise SubmitError(f"the API server refused watching TrainJobs: {_message(e)}") from None
        except self._unreachable as e:
            where = f"the API server at {self.server}"
            raise SubmitError(f"cannot reach {where} (watching TrainJobs): {e}") from None
        finally:
            watch.stop()

    def delete_trainjob(self, name: str, missing_ok: bool = True) -> None:
        delete = self._custom.delete_namespaced_custom_object
        background = {"propagationPolicy": "Background"}  # the pods and the code ConfigMap go after it
        self._ask(
            f"deleting TrainJob {name}", lambda: delete(*self._custom_args(name), body=background), missing_ok
        )

    def get_pod(self, name: str) -> dict[str, Any] | None:
        """The pod, or None when it is gone (cleanPodPolicy, a restart) or not created yet."""
        read = self._core.read_namespaced_pod
        pod = self._ask(f"pod {name}", lambda: read(name, self.namespace), missing_ok=True)
        return None if pod is None else pod.to_dict()

    def list_pods(self, selector: str) -> list[dict[str, Any]]:
        """The namespace's pods with these labels (`key=value,...`)."""
        listing = self._core.list_namespaced_pod
        found = self._ask(
            f"listing pods {selector}", lambda: listing(self.namespace, label_selector=selector)
        )
        return [pod.to_dict() for pod in found.items or []]

    def list_events(self) -> list[dict[str, Any]]:
        """The namespace's Events (core/v1: events.k8s.io's too), as the API server's JSON names them."""
        listing = self._core.list_namespaced_event
        as_json = self._core.api_client.sanitize_for_serialization
        return [
            as_json(event)
            for event in self._ask("listing events", lambda: listing(self.namespace)).items or []
        ]

    def read_log(self, pod: str, tail: int | None = None) -> str:
        """The `trainer` container's log so far (its last `tail` lines, when given)."""
        read = self._core.read_namespaced_pod_log
        lines = {} if tail is None else {"tail_lines": tail}
        return str(
            self._ask(
                f"the log of pod {pod}",
                lambda: read(pod, self.namespace, container=names.CONTAINER_NAME, **lines),
                right=LOG_RIGHT,
            )
        )

    def stream_log(
        self, pod: str, on_line: Callable[[str], None], stop: threading.Event, tail: int | None = None
    ) -> None:
        """Follow the pod's `trainer` log (from its last `tail` lines, when given) until it ends or `stop` is
        set (call in a thread). A log not there yet (its pod or container not started) is asked for until
        `stop`; a refusal is LogRefused at once; a stream that breaks off is followed again from the line
        after the last one given, STREAM_RETRY_DELAYS apart, then a SubmitError names the break."""
        read, what = self._core.read_namespaced_pod_log, f"the log of pod {pod}"
        last: str | None = None  # the last line given, with its timestamp: where a new try resumes
        breaks = 0
        while not stop.is_set():
            lines = {"tail_lines": tail} if tail is not None and last is None else {}
            try:
                response = read(
                    pod,
                    self.namespace,
                    container=names.CONTAINER_NAME,
                    follow=True,
                    timestamps=True,
                    _preload_content=False,
                    **lines,
                )
                try:
                    for line in unseen(lines_of(response.stream(decode_content=True)), last):
                        last, breaks = line, 0
                        on_line(line.partition(" ")[2])
                        if stop.is_set():
                            break
                finally:
                    response.release_conn()
                return
            except self._errors as e:
                if e.status in (400, 404):  # not started, or not created, yet
                    stop.wait(1)
                    continue
                if e.status in (401, 403):
                    raise self._refusal(what, e, LOG_RIGHT) from None
                broke = f"the API server answered {e.status}: {_message(e)}"
            except self._unreachable as e:
                broke = str(e)
            breaks += 1
            if breaks > len(STREAM_RETRY_DELAYS):
                raise SubmitError(f"{what} broke off {breaks} times in a row, the last: {broke}")
            stop.wait(STREAM_RETRY_DELAYS[breaks - 1])

    def service_proxy(
        self,
        namespace: str,
        service: str,
        path: str,
        *,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        stream: bool = False,
    ) -> Proxied:
        """A request to `service` ("[SCHEME:]NAME:PORT") in `namespace` through the API server's service
        proxy, at `path` (with its query), on this kubeconfig's credentials: the Service's answer, whatever
        its status; the API server's own refusals are SubmitErrors (a 403 names the right it needs)."""
        import urllib.parse

        import urllib3

        api, quoted = self._core.api_client, urllib.parse.quote(service, safe=":")
        resource = f"/api/v1/namespaces/{namespace}/services/{quoted}/proxy/{path.lstrip('/')}"
        what = f"the service proxy to {service} in namespace {namespace}"
        # The kubeconfig's token as every call of the package sends it (its client certificate is the pool's).
        sent = {**api.default_headers, **dict(headers or {})}
        for auth in api.configuration.auth_settings().values():
            if auth["in"] == "header" and auth["value"]:
                sent[auth["key"]] = auth["value"]
        url = api.configuration.host + resource
        try:
            timeouts = urllib3.Timeout(connect=PROXY_CONNECT_SECONDS, read=timeout)
            response = api.rest_client.pool_manager.request(
                method, url, body=body, headers=sent, preload_content=False, redirect=False, timeout=timeouts
            )
        except (self._unreachable, OSError) as e:
            raise SubmitError(f"cannot reach the API server at {self.server} ({what}): {e}") from None
        answer = Proxied(response.status, {k.lower(): v for k, v in response.headers.items()})
        if stream and answer.status < 400:  # an error's body is read: it may be the API server's own
            answer.stream = response
            return answer
        try:
            answer.body = response.read()
        finally:
            response.release_conn()
        message = _status_message(answer.body) if answer.status >= 400 else ""
        if message and answer.status == 503:
            raise SubmitError(f"the API server refused {what}: {message} (is a pod of it ready?)")
        if message:  # a Status object: the API server's own answer, not the Service's
            raise self._refused(what, answer.status, message, PROXY_RIGHT, namespace)
        return answer

    def list_services(self, selector: str) -> list[dict[str, Any]]:
        """The Services with these labels in every namespace, else in this client's namespace, as far as
        this user may list them (none where neither is allowed)."""
        for call in (
            lambda: self._core.list_service_for_all_namespaces(label_selector=selector),
            lambda: self._core.list_namespaced_service(self.namespace, label_selector=selector),
        ):
            try:
                listed = self._ask("listing Services", call, right="list services")
                return [service.to_dict() for service in listed.items or []]
            except LogRefused:
                continue
        return []

    def _refusal(self, what: str, error: Any, right: str | None = None) -> SubmitError:
        return self._refused(what, error.status, _message(error), right)

    def _refused(
        self, what: str, status: int, message: str, right: str | None = None, namespace: str | None = None
    ) -> SubmitError:
        """The API server's refusal of `what`; a 403 of a call that needs the RBAC `right` ("VERB RESOURCE")
        is LogRefused, naming that right as a Role grants it."""
        refused, namespace = f"the API server refused {what}: {message}", namespace or self.namespace
        if status != 403 or right is None:
            return SubmitError(refused)
        verb, resource = right.split()
        return LogRefused(
            f"{refused} (this needs the RBAC right to {verb} {resource} in namespace "
            f'{namespace}: a Role with apiGroups [""], resources ["{resource}"], verbs ["{verb}"]; '
            f"`kubectl auth can-i {verb} {resource} -n {namespace}` checks it)"
        )


def in_cluster(cluster: Cluster, environ: Mapping[str, str] = os.environ) -> bool:
    """Inside a pod with no kubeconfig (none named, none at $KUBECONFIG or ~/.kube/config): the pod's
    service account, as kubectl and Kubeflow's TrainerClient do."""
    if cluster.kubeconfig or cluster.context or not environ.get("KUBERNETES_SERVICE_HOST"):
        return False
    paths = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    paths = paths or [os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".kube", "config")]
    return not any(os.path.isfile(p) for p in paths)


def pod_namespace(path: str = SERVICE_ACCOUNT_DIR + "/namespace") -> str:
    """The pod's own namespace (its service account's), "default" when it is not mounted."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def _service_account_client() -> Any:
    import kubernetes

    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException as e:
        raise SubmitError(
            f"in a pod (KUBERNETES_SERVICE_HOST is set) with no kubeconfig, but its service account is not "
            f"usable ({e}): mount its token (automountServiceAccountToken) or pass --kubeconfig"
        ) from None
    return kubernetes.client.ApiClient(configuration)


def _status_message(body: bytes | None) -> str:
    """The message of a Status object (the API server's own answers), else ""."""
    try:
        answer = json.loads(body or b"")
    except ValueError:
        return ""
    if isinstance(answer, dict) and answer.get("kind") == "Status":
        return str(answer.get("message") or answer.get("reason") or "")
    return ""


def _message(error: Any) -> str:
    try:
        return str(json.loads(error.body).get("message") or error.reason)
    except (TypeError, ValueError, AttributeError):
        return str(error.reason)
