"""A real Python package index for tests: pypiserver (from the release tools' environment,
hack/build/release-tools-venv.sh) on a free port, serving what is uploaded to it. Uploads need its one
user's password (htpasswd); downloads are open, and a project it does not hold is redirected to PyPI, so
`pip install --index-url <index> mwms==X` resolves mwms from here and its dependencies from PyPI, as
`pip install mwms==X` will from PyPI alone.

Usage: `with PackageIndex(tmp_dir) as index: index.simple_url, index.upload_env`.
"""

from __future__ import annotations

import secrets
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from mwms_kit.mlflow_server import free_port, stop_group
from mwms_kit.oci_registry import htpasswd_line, release_tools_python

START_TIMEOUT_SECONDS = 60


class PackageIndex:
    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = Path(root)
        self.host = host
        self.username = "mwms-release"
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.root / "pypiserver.log"

    @property
    def url(self) -> str:
        """Where twine uploads."""
        return f"http://{self.host}:{self.port}/"

    @property
    def simple_url(self) -> str:
        """pip's --index-url."""
        return f"{self.url}simple/"

    @property
    def upload_env(self) -> dict[str, str]:
        """hack/ci/release.sh's `upload` step's environment."""
        return {"INDEX_URL": self.url, "TWINE_USERNAME": self.username, "TWINE_PASSWORD": self.password}

    def start(self) -> PackageIndex:
        packages = self.root / "packages"
        packages.mkdir(parents=True, exist_ok=True)
        htpasswd = self.root / "htpasswd"
        htpasswd.write_text(htpasswd_line(self.username, self.password) + "\n")
        self.port = free_port(self.host)
        argv = [
            release_tools_python(), "-m", "pypiserver", "run",
            "--host", self.host, "--port", str(self.port),
            "--passwords", str(htpasswd), "--authenticate", "update",
            str(packages),
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pypiserver exited {self.process.returncode}: {self.log_tail()}")
            try:
                urllib.request.urlopen(self.simple_url, timeout=5).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"pypiserver not ready after {START_TIMEOUT_SECONDS}s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        stop_group(self.process, 5)

    def __enter__(self) -> PackageIndex:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
