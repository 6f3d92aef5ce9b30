"""Real Kueue (built from its Go module by hack/build/build-kueue.sh) beside a LocalCluster, for tests.

Kueue runs as a local process with the admin kubeconfig; its CRDs come from the same module, and its webhooks
are registered by URL (https://127.0.0.1:<port>) with a CA bundle we make, since there is no Service to point
at. Only the plain-pod integration is enabled. The pod webhook (failurePolicy Fail) is limited to namespaces
carrying NAMESPACE_LABEL, so the rest of a shared test cluster never depends on Kueue being up; stop()
removes the webhook configurations before it stops Kueue.

Kueue v0.17 without its internal cert management reads its metrics serving cert from a fixed path,
/etc/kueue/metrics/certs (main.go), so start() writes a self-signed pair there when none exists.

`multikueue_kinds` (`Kind.version.group`) makes this Kueue a MultiKueue manager that dispatches those kinds
with its generic adapter (multiKueue.externalFrameworks; the MultiKueue and MultiKueueAdaptersForCustomJobs
feature gates are on by default since v0.15); `connect_worker` gives it a worker cluster.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import yaml

from mwms_dev import pki
from mwms_dev.builds import built
from mwms_dev.node_context import free_port

REPO = Path(__file__).resolve().parents[2]
VERSION = "v0.17.0"
NAMESPACE_LABEL = "mwms.dev/kueue"  # value "enabled": Kueue's pod webhook serves this namespace
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
WEBHOOK_NAMES = ("mutating-webhook-configuration", "validating-webhook-configuration")
CONFIG_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class KueueError(RuntimeError):
    pass


def build(version: str = VERSION) -> Path:
    """The cache directory holding bin/kueue and config/ (built on first use)."""
    return built("build-kueue.sh", env={"KUEUE_VERSION": version})


def webhook_configurations(manifests: str, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for its own kinds and pods, pointed at base_url; pods only in
    namespaces labelled NAMESPACE_LABEL=enabled."""
    configs = []
    for doc in yaml.safe_load_all(manifests):
        if not doc or doc.get("kind") not in CONFIG_KINDS:
            continue
        doc = copy.deepcopy(doc)
        kept = []
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            resources = {r for rule in hook.get("rules", []) for r in rule.get("resources", [])}
            if "kueue-x-k8s-io" not in path and resources != {"pods"}:
                continue  # other frameworks' kinds (Jobs, JobSets, ...): not enabled here
            hook["clientConfig"] = {"url": base_url + path, "caBundle": b64encode(ca_pem).decode()}
            if resources == {"pods"}:
                hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: "enabled"}}
            kept.append(hook)
        doc["webhooks"] = kept
        doc["metadata"] = {"name": f"kueue-{doc['metadata']['name']}"}
        configs.append(doc)
    return configs


class Kueue:
    def __init__(
        self,
        kubeconfig: Path,
        kubectl: str,
        state_dir: Path,
        home: Path | None = None,
        multikueue_kinds: tuple[str, ...] = (),
    ) -> None:
        self.kubeconfig, self.kubectl, self.state_dir = kubeconfig, kubectl, state_dir
        self.multikueue_kinds = multikueue_kinds
        self.home = home or build()
        self.process: subprocess.Popen[bytes] | None = None
        self.health_port = free_port()
        self.webhook_port = free_port()
        self.log_path = state_dir / "kueue.log"

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [self.kubectl, f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def start(self, timeout: float = 180) -> Kueue:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca("mwms-kueue-webhook-ca")
        serving = pki.serving_cert(ca, "kueue-webhook", ("localhost",), ("127.0.0.1",))
        certs = self.state_dir / "webhook-certs"
        certs.mkdir(exist_ok=True)
        (certs / "tls.crt").write_bytes(serving.cert_pem)
        (certs / "tls.key").write_bytes(serving.key_pem)
        if not (METRICS_CERT_DIR / "tls.crt").exists():
            METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
            (METRICS_CERT_DIR / "tls.crt").write_bytes(serving.cert_pem)
            (METRICS_CERT_DIR / "tls.key").write_bytes(serving.key_pem)
        crds = str(self.home / "config" / "components" / "crd" / "bases")
        self._kubectl("apply", "--server-side", "-f", crds)
        self._kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
        # Served once discovery knows it: Kueue sets up its indexes at start and exits if a kind is unknown.
        deadline = time.monotonic() + 60
        while subprocess.run(
            [self.kubectl, f"--kubeconfig={self.kubeconfig}", "get", "workloads.kueue.x-k8s.io", "-A"],
            capture_output=True,
        ).returncode:
            if time.monotonic() > deadline:
                raise KueueError("Kueue's CRDs are not served after 60 s")
            time.sleep(0.5)
        if subprocess.run(
            [self.kubectl, f"--kubeconfig={self.kubeconfig}", "get", "namespace", "kueue-system"],
            capture_output=True,
        ).returncode:
            self._kubectl("create", "namespace", "kueue-system")
        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["pod"]},
        }
        if self.multikueue_kinds:
            config["multiKueue"] = {"externalFrameworks": [{"name": kind} for kind in self.multikueue_kinds]}
        config_path = self.state_dir / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [str(self.home / "bin" / "kueue"), f"--config={config_path}",
             "--feature-gates=VisibilityOnDemand=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )  # fmt: skip
        self._wait_ready(timeout)
        manifests = (self.home / "config" / "components" / "webhook" / "manifests.yaml").read_text()
        configs = webhook_configurations(manifests, f"https://127.0.0.1:{self.webhook_port}", ca.cert_pem)
        self._kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": configs})
        )
        return self

    def connect_worker(self, name: str, kubeconfig: dict[str, Any]) -> None:
        """A MultiKueueCluster `name` that reaches a worker cluster with `kubeconfig` (credentials inline, as
        MultiKueue requires), from a Secret in Kueue's namespace."""
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-kubeconfig", "namespace": "kueue-system"},
            "stringData": {"kubeconfig": yaml.safe_dump(kubeconfig)},
        }
        cluster = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueCluster",
            "metadata": {"name": name},
            "spec": {
                "clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"{name}-kubeconfig"}}
            },
        }
        self._kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [secret, cluster]}),
        )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise KueueError(f"kueue exited {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        # The webhook server answers TLS once the manager runs.
                        with socket.create_connection(("127.0.0.1", self.webhook_port), timeout=2) as raw:
                            context.wrap_socket(raw).close()
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise KueueError(f"kueue not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        for kind, name in zip(CONFIG_KINDS, WEBHOOK_NAMES, strict=True):
            subprocess.run(
                [self.kubectl, f"--kubeconfig={self.kubeconfig}", "delete", kind.lower(), f"kueue-{name}",
                 "--ignore-not-found"],
                capture_output=True, timeout=60,
            )  # fmt: skip
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(timeout=30)
        self.process = None
