"""Shared pieces of the static checks: where the tools are, and running them (fixtures: conftest.py).

Helm and kubectl come from hack/build/tools.sh (pinned, cached by version); the linters are pip packages of
the `test` dependency group, next to this Python. A missing tool skips with the reason — except under CI
(CI=true), where a skip would hide a broken install, so it fails.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mwms-operator"
CI_VALUES = CHART / "ci" / "ci-values.yaml"
MONITORING_VALUES = CHART / "ci" / "monitoring-values.yaml"
MANIFESTS = REPO / "manifests"
VENV_BIN = Path(sys.executable).parent
# kubernetes-validate knows 1.25-1.37; the chart's kubeVersion is >=1.30.
KUBE_VERSIONS = [f"1.{minor}" for minor in range(30, 38)]


def missing_tool(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must have every tool: run `make tools` / `pip install --group test`)")
    pytest.skip(reason)


def run(args: Sequence[str | os.PathLike], *, check: bool = True, timeout: float = 300, **kwargs):
    """Run a tool; on an unexpected exit code fail with its whole output, so the reason is in the report."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, **kwargs
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )
    return result


def venv_tool(name: str) -> Path:
    path = VENV_BIN / name
    if not path.exists():
        missing_tool(f"{name} is not installed next to {sys.executable} (pip install --group test)")
    return path


def load_all(text: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(helm: Path, *args: str | os.PathLike, namespace: str = "mwms-system") -> str:
    return run([helm, "template", "mwms-operator", CHART, "--namespace", namespace, *args]).stdout


def validate_strict(kubernetes_validate: Path, rendered: str, version: str, tmp_path: Path) -> None:
    """kubernetes-validate --strict: built-in kinds against the API's schema, unknown fields rejected."""
    path = tmp_path / f"rendered-{version}.yaml"
    path.write_text(rendered)
    result = run([kubernetes_validate, "--strict", "--quiet", "-k", version, path], check=False)
    # It only warns on custom resources (it has no schema for them); any other line is a failure.
    problems = [
        line for line in (result.stdout + result.stderr).splitlines() if line.strip() and "WARN" not in line
    ]
    assert result.returncode == 0 and not problems, (
        f"kubernetes-validate {version} rejected the objects:\n{result.stdout}\n{result.stderr}"
    )


def find(docs: list[dict], kind: str, name: str) -> dict:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"want one {kind}/{name}, found {len(matches)}"
    return matches[0]


def container_env(deployment: dict) -> dict[str, str | None]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def strict_json_schema(crd: dict) -> dict:
    """A CRD's openAPIV3Schema (its storage version) as a JSON Schema that rejects unknown fields, as `kubectl
    apply` does (server-side strict field validation). OpenAPI v3.0 schemas are draft-04 (boolean
    exclusiveMinimum)."""
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def strict(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for child in node.values():
                strict(child)
        elif isinstance(node, list):
            for child in node:
                strict(child)

    strict(schema)
    # metadata is the API server's ObjectMeta (labels, namespace, ...): a CRD may only restrict it.
    schema["properties"].get("metadata", {}).pop("additionalProperties", None)
    schema["$schema"] = "http://json-schema.org/draft-04/schema#"
    return schema
