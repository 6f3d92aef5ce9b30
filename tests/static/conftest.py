"""Fixtures of the static checks: the pinned tools, installed on first use (see static_support.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from static_support import REPO, missing_tool, venv_tool


@pytest.fixture(scope="session")
def tools_bin() -> Path:
    """The bin dir of hack/build/tools.sh (installs Helm and kubectl on first use, a no-op afterwards)."""
    try:
        result = subprocess.run(
            ["bash", str(REPO / "hack" / "build" / "tools.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        missing_tool("hack/build/tools.sh did not finish in 600 s")
    if result.returncode != 0:
        missing_tool(f"hack/build/tools.sh could not install Helm/kubectl: {result.stderr.strip()[-500:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def helm(tools_bin: Path) -> Path:
    return tools_bin / "helm"


@pytest.fixture(scope="session")
def kubectl(tools_bin: Path) -> Path:
    return tools_bin / "kubectl"


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    return venv_tool("kubernetes-validate")
