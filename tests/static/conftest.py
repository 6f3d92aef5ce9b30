"""Fixtures of the static checks: the pinned tools, installed on first use (see static_support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from static_support import missing_tool, venv_tool

from mwms_dev.builds import BuildError, built


@pytest.fixture(scope="session")
def tools_bin() -> Path:
    """The bin dir of hack/build/tools.sh (installs Helm and kubectl on first use, a no-op afterwards)."""
    try:
        return built("tools.sh", timeout=600)
    except BuildError as e:
        missing_tool(f"Helm and kubectl: {e}")


@pytest.fixture(scope="session")
def helm(tools_bin: Path) -> Path:
    return tools_bin / "helm"


@pytest.fixture(scope="session")
def kubectl(tools_bin: Path) -> Path:
    return tools_bin / "kubectl"


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    return venv_tool("kubernetes-validate")
