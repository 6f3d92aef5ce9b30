"""A real S3-compatible server for tests: the Versity S3 Gateway (`versitygw posix`: a directory served as
buckets, SigV4-signed requests, multipart uploads; one process), built from its Go module by
hack/build/build-versitygw.sh, with one root identity's credentials.

Usage: `with S3Server(tmp_dir, host) as s3: s3.endpoint, s3.env, s3.upload(local_dir, "bucket/prefix")`.
`host` is the address it listens on: 127.0.0.1 for local workers, the pod bridge's gateway for pods.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

from mwms_dev.builds import built
from mwms_kit.mlflow_server import ServerProcess, free_port

START_TIMEOUT_SECONDS = 120  # well under a second idle; more on 2 loaded cores
BUCKET = "mwms-data"


def s3_server_binary() -> str:
    """$MWMS_VERSITYGW, else the cached build (`make versitygw`)."""
    if os.environ.get("MWMS_VERSITYGW"):
        return os.environ["MWMS_VERSITYGW"]
    return str(built("build-versitygw.sh") / "bin" / "versitygw")


def mlflow_s3_python() -> str:
    """The python of an environment with MLflow's server and boto3 (not .venv: hack/build/mlflow-s3-venv.sh
    says why)."""
    return str(built("mlflow-s3-venv.sh"))


def make_secret(kubectl: Any, namespace: str, name: str, access_key: str, secret_key: str) -> None:
    """A Secret with the standard AWS credential keys, as users create one for a bucket."""
    kubectl(
        "create", "secret", "generic", name, "-n", namespace,
        f"--from-literal=AWS_ACCESS_KEY_ID={access_key}",
        f"--from-literal=AWS_SECRET_ACCESS_KEY={secret_key}",
    )  # fmt: skip


def env_from_secret(secret: str, endpoint: str) -> list[dict[str, Any]]:
    """A trainer container's env for a bucket: the credentials from Secret `secret`, the endpoint plain."""
    from_secret = [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    ]
    plain = [
        {"name": "AWS_ENDPOINT_URL", "value": endpoint},
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},  # no instance metadata service to ask here
    ]
    return from_secret + plain


class S3Server(ServerProcess):
    stop_grace = 5.0  # the data is the test's own and thrown away

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = Path(root)
        self.host = host
        self.access_key = f"AKMWMS{secrets.token_hex(7).upper()}"
        self.secret_key = secrets.token_urlsafe(30)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "versitygw.log"
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables a client of this server needs."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # no instance metadata service to ask here
        }

    def filesystem(self, **overrides: Any) -> Any:
        from pyarrow import fs

        settings = {
            "access_key": self.access_key,
            "secret_key": self.secret_key,
            "endpoint_override": f"{self.host}:{self.port}",
            "scheme": "http",
            "region": "us-east-1",
            "allow_bucket_creation": True,
            **overrides,
        }
        return fs.S3FileSystem(**settings)

    def start(self) -> S3Server:
        data, metadata = self.root / "data", self.root / "metadata"
        data.mkdir(parents=True, exist_ok=True)
        metadata.mkdir(exist_ok=True)
        self.port = free_port(self.host)
        # Object metadata (ETags, content types) in a sidecar directory, not in extended attributes: the
        # server then runs on any filesystem a CI machine has.
        cmd = [
            s3_server_binary(), "--port", f"{self.host}:{self.port}",
            "posix", "--sidecar", str(metadata), str(data),
        ]  # fmt: skip
        # The root identity from the environment, not argv (which `ps` shows to every user).
        env = {**os.environ, "ROOT_ACCESS_KEY": self.access_key, "ROOT_SECRET_KEY": self.secret_key}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"versitygw exited {self.process.returncode}: {self.log_tail()}")
            # Ready when a real S3 request succeeds: creating the tests' bucket (signed with the identity).
            with contextlib.suppress(OSError):
                self.filesystem(connect_timeout=2, request_timeout=5).create_dir(BUCKET)
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"versitygw not ready after {START_TIMEOUT_SECONDS}s: {self.log_tail()}")

    def upload(self, local: Path, destination: str) -> str:
        """Copy a local file or directory to `bucket/prefix`; returns its s3:// URI."""
        from pyarrow import fs

        fs.copy_files(str(local), destination, destination_filesystem=self.filesystem())
        return f"s3://{destination}"
