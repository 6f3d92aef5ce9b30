"""A real OCI registry for tests: the CNCF Distribution registry (`registry serve`), built from its Go module
by hack/build/build-oci-tools.sh, over TLS signed by a CA of its own and with htpasswd authentication on (one
user). Clients get their credentials and trust from `client_env` (a Docker config that crane, cosign and Helm
read, and SSL_CERT_FILE), never from the host's own files; nodes get the CA through containerd's hosts.toml
(`KubeletNode.trust_registry`) and the credentials from a pod's imagePullSecrets (`pull_secret`).

Usage: `with OciRegistry(tmp_dir) as registry: registry.address, registry.client_env, registry.crane(...)`."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from mwms_dev.builds import built
from mwms_kit.mlflow_server import free_port, stop_group

START_TIMEOUT_SECONDS = 60


def oci_tool(name: str) -> str:
    """The path of `registry`, `crane` or `cosign` (`make oci-tools`; a no-op once built)."""
    return str(built("build-oci-tools.sh", name))


def release_tools_python() -> str:
    """The python of the release tools' environment: build, twine, pypiserver, bcrypt."""
    return str(built("release-tools-venv.sh"))


def htpasswd_line(username: str, password: str) -> str:
    """`user:bcrypt-hash`, the one htpasswd format Distribution reads (bcrypt: the release tools' venv)."""
    script = "import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt()).decode())"
    hashed = subprocess.run(
        [release_tools_python(), "-c", script, password], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"{username}:{hashed}"


def docker_auth(address: str, username: str, password: str) -> dict[str, Any]:
    """A Docker config.json body holding one registry's credentials."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {address: {"auth": token}}}


class OciRegistry:
    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = Path(root)
        self.host = host
        self.username = "mwms-ci"
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "registry.log"
        self.ca_file = self.root / "ca.crt"
        self.docker_config = self.root / "docker"

    @property
    def address(self) -> str:
        """host:port, as image references and the chart's global.imageRegistry name it."""
        return f"{self.host}:{self.port}"

    @property
    def client_env(self) -> dict[str, str]:
        """What crane, cosign and Helm need to push and pull here: the credentials and the CA."""
        return {
            "DOCKER_CONFIG": str(self.docker_config),
            "HELM_REGISTRY_CONFIG": str(self.docker_config / "config.json"),
            "SSL_CERT_FILE": str(self.ca_file),
        }

    def start(self) -> OciRegistry:
        from mwms_dev import pki

        self.root.mkdir(parents=True, exist_ok=True)
        binary = oci_tool("registry")
        self.port = free_port(self.host)
        ca = pki.new_ca("mwms test registry CA")
        serving = pki.serving_cert(ca, "registry", ("localhost",), tuple({self.host, "127.0.0.1"}))
        self.ca_file.write_bytes(ca.cert_pem)
        (self.root / "tls.crt").write_bytes(serving.cert_pem)
        (self.root / "tls.key").write_bytes(serving.key_pem)
        (self.root / "tls.key").chmod(0o600)
        (self.root / "htpasswd").write_text(htpasswd_line(self.username, self.password) + "\n")
        self.docker_config.mkdir(exist_ok=True)
        auth = docker_auth(self.address, self.username, self.password)
        (self.docker_config / "config.json").write_text(json.dumps(auth))
        config = {
            "version": 0.1,
            "log": {"level": "info", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.root / "data")},
                "delete": {"enabled": True},
            },
            "http": {
                "addr": self.address,
                "secret": secrets.token_hex(16),
                "tls": {"certificate": str(self.root / "tls.crt"), "key": str(self.root / "tls.key")},
            },
            "auth": {"htpasswd": {"realm": "mwms-test", "path": str(self.root / "htpasswd")}},
        }
        (self.root / "config.yml").write_text(json.dumps(config))  # YAML reads JSON
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary, "serve", str(self.root / "config.yml")],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"registry exited {self.process.returncode}: {self.log_tail()}")
            if self.answers_with_auth_required():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"registry not ready after {START_TIMEOUT_SECONDS}s: {self.log_tail()}")

    def answers_with_auth_required(self) -> bool:
        """Ready: `GET /v2/` over TLS without credentials is refused with 401 and a Basic challenge."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            urllib.request.urlopen(f"https://{self.address}/v2/", timeout=5, context=context)
        except urllib.error.HTTPError as exc:
            return exc.code == 401 and "Basic" in (exc.headers.get("WWW-Authenticate") or "")
        except OSError:
            return False
        raise RuntimeError(f"the registry at {self.address} answered /v2/ without credentials")

    def crane(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """crane with this registry's credentials and CA."""
        done = subprocess.run(
            [oci_tool("crane"), *args],
            env={**os.environ, **self.client_env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"crane {' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done

    def pull_secret(self, kubectl: Any, namespace: str, name: str, password: str | None = None) -> None:
        """A kubernetes.io/dockerconfigjson Secret for this registry (`password`: a wrong one, for tests)."""
        kubectl(
            "create", "secret", "docker-registry", name, "-n", namespace,
            f"--docker-server={self.address}",
            f"--docker-username={self.username}",
            f"--docker-password={self.password if password is None else password}",
        )  # fmt: skip

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Stop it and drop what was pushed (GBs; pytest keeps its tmp dirs), keeping the log."""
        stop_group(self.process, 5)
        shutil.rmtree(self.root / "data", ignore_errors=True)

    def __enter__(self) -> OciRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
