"""A job's MLflow tracking server as this machine reaches it: at its address, or, where that does not answer
here and it names a Service of the cluster (`http://NAME.NS.svc[.cluster.local][:PORT]`, as the chart's
bundled MLflow), through the API server's service proxy with the user's own kubeconfig rights (`get
services/proxy`). Otherwise the error says what to set: MLFLOW_TRACKING_URI, or `--tracking-uri`.

Which server is the caller's to say (logs.job_tracking_uri, describe.known_servers).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mwms.kube import Proxied, SubmitError
from mwms_contract.mlflow_auth import tracking_headers

if TYPE_CHECKING:
    from mwms.kube import JobClient

DIRECT_TIMEOUT_SECONDS = 5.0  # a server that does not answer this machine within this is tried otherwise
READ_TIMEOUT_SECONDS = 60.0
SET_IT = "set MLFLOW_TRACKING_URI (or pass --tracking-uri) to an address of that server this machine reaches"
_SERVICE_HOST = re.compile(
    r"(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9-]+)\.svc(\.[a-z0-9.-]+)?"
)


class TrackingUnreachable(SubmitError):
    """The tracking server answers neither at its address nor through the service proxy (the message says
    what to set)."""


@dataclass(frozen=True)
class ServiceAddress:
    """A tracking server that is a Service of the cluster: where the service proxy finds it."""

    namespace: str
    name: str
    port: int
    scheme: str
    path: str  # the server's base path ("" or "/mlflow")

    @property
    def target(self) -> str:
        """The proxy's [SCHEME:]NAME:PORT."""
        return f"{'https:' if self.scheme == 'https' else ''}{self.name}:{self.port}"


def service_address(uri: str) -> ServiceAddress | None:
    """The Service a tracking URI names, or None (not http(s), not a `NAME.NS.svc` host)."""
    parts = urllib.parse.urlsplit(uri.strip())
    found = _SERVICE_HOST.fullmatch((parts.hostname or "").lower())
    if parts.scheme not in ("http", "https") or found is None:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return ServiceAddress(found["namespace"], found["name"], port, parts.scheme, parts.path.rstrip("/"))


class TrackingServer:
    """One tracking server, at `uri`: asked directly first; through the API server's service proxy (`api`)
    once it does not answer this machine and is a Service of the cluster."""

    def __init__(
        self, uri: str, api: JobClient | None = None, environ: Mapping[str, str] = os.environ
    ) -> None:
        self.uri, self.api, self.environ = uri.rstrip("/"), api, environ
        self.service = service_address(uri)
        self.proxied = False  # decided by the first request that did not answer directly

    @property
    def where(self) -> str:
        shown = f"MLflow at {self.uri}"
        return f"{shown} (through the API server's service proxy)" if self.proxied else shown

    @property
    def proxy_prefix(self) -> str:
        """The path of the server's base through the service proxy ("" when it is no Service)."""
        if self.service is None:
            return ""
        where = f"/api/v1/namespaces/{self.service.namespace}/services/{self.service.target}/proxy"
        return where + self.service.path

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        stream: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Proxied:
        """`path` (with its query) below the server's base: its answer, whatever its status."""
        headers = dict(headers or ({"Content-Type": "application/json"} if body is not None else {}))
        if not self.proxied:
            try:
                return self._direct(method, path, body, stream, headers)
            except OSError as e:  # no answer: DNS (a Service name), refused, a timeout
                reason = str(getattr(e, "reason", None) or e) or type(e).__name__
                if self.service is None or self.api is None:
                    raise TrackingUnreachable(
                        f"{self.where} does not answer from this machine ({reason}): {SET_IT}"
                    ) from None
                self.proxied = True
        assert self.service is not None and self.api is not None
        try:
            return self.api.service_proxy(
                self.service.namespace,
                self.service.target,
                self.service.path + path,
                method=method,
                body=body,
                headers=headers,
                timeout=READ_TIMEOUT_SECONDS,
                stream=stream,
            )
        except SubmitError as e:
            raise type(e)(
                f"{self.where} does not answer from this machine, nor through the proxy: {e}"
            ) from None

    def _direct(
        self, method: str, path: str, body: bytes | None, stream: bool, headers: Mapping[str, str]
    ) -> Proxied:
        request = urllib.request.Request(self.uri + path, data=body, method=method)
        for header, value in {**headers, **tracking_headers(self.environ)}.items():
            request.add_header(header, value)
        try:
            response = urllib.request.urlopen(request, timeout=DIRECT_TIMEOUT_SECONDS)
        except urllib.error.HTTPError as e:  # an answer: the server is reached
            return Proxied(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())
        if stream:
            return Proxied(
                response.status, {k.lower(): v for k, v in response.headers.items()}, b"", response
            )
        with response:
            return Proxied(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )

    def _refused(self, answer: Proxied, what: str) -> SubmitError:
        text = answer.body.decode(errors="replace").strip()[:300]
        if self.proxied and answer.status == 403 and "Invalid Host header" in text:
            return TrackingUnreachable(
                f"{self.where} refused {what}: {text} (its --allowed-hosts lacks the API server's host, "
                "which the service proxy passes on; with the chart's MLflow add it to "
                f"mlflow.extraAllowedHosts), or {SET_IT}"
            )
        return SubmitError(f"{self.where} refused {what}: HTTP {answer.status} {text}")

    def api_json(self, path: str, query: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """MLflow's REST API `path` (as `runs/get`) answered as JSON; None when it has no such thing (404, or
        400 for an ID of another form)."""
        target = f"/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        answer = self.request("GET", target)
        if answer.status in (400, 404):
            return None
        if answer.status != 200:
            raise self._refused(answer, path)
        try:
            found = json.loads(answer.body or b"{}")
        except ValueError:
            raise SubmitError(f"{self.where} answered {path} with something that is not JSON") from None
        return found if isinstance(found, dict) else {}

    def run(self, run_id: str) -> dict[str, Any] | None:
        """The run (its `info` and `data`), None when the server has no run of that ID."""
        found = self.api_json("runs/get", {"run_id": run_id})
        return None if found is None else dict(found.get("run") or {})

    def artifact(self, run_id: str, path: str) -> str | None:
        """An artifact of the run, as text; None when the run has none there."""
        query = urllib.parse.urlencode({"run_uuid": run_id, "path": path})
        answer = self.request("GET", f"/get-artifact?{query}")
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise self._refused(answer, f"{path} of run {run_id}")
        return answer.body.decode("utf-8", errors="replace")

    def artifacts(self, run_id: str, path: str) -> Iterator[str]:
        """The paths of the run's artifacts directly under `path`."""
        listed = self.api_json("artifacts/list", {"run_id": run_id, "path": path}) or {}
        yield from (str(f.get("path")) for f in listed.get("files") or [] if not f.get("is_dir"))

    def run_page(self, base: str, experiment_id: str | None, run_id: str) -> str:
        """The run's page of the MLflow UI served at `base`."""
        return f"{base.rstrip('/')}/#/experiments/{experiment_id or 0}/runs/{run_id}"
