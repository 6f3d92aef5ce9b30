#!/usr/bin/env python3
"""Copy the Kubernetes API types that chart values pass through (affinity, securityContext, resources, env,
tolerations, volumes...) into charts/mwms-operator/values.schema.json, so a typo in them fails `helm install`
as it would fail `kubectl apply --validate=strict`, not silently later.

The types come from the OpenAPI of the Kubernetes we build (`K8S_VERSION` in hack/build/k8s-build.sh, 1.37),
as the `kubernetes-validate` package carries it: the definitions of k8s.io/kubernetes' api/openapi-spec,
turned into strict JSON Schema (unknown fields refused, quantities as strings or numbers). The newest API is
the one to type with: Kubernetes adds pod fields and does not remove them, so every field a cluster of the
chart's range (Chart.yaml `kubeVersion`, 1.30 up) takes passes, and a typo still fails (a static test checks
each older version's fields are here). A field newer than the user's cluster passes the schema and is then
refused or dropped by that cluster's API server, as with any manifest. Every `$ref` to
`#/definitions/io.k8s...` in the schema names a root; this script writes the definitions those roots need, and
drops the ones nothing needs any more.

    hack/generate/k8s-values-schema.py          rewrite the schema's io.k8s.* definitions
    hack/generate/k8s-values-schema.py --check  exit 1 if they are out of date (the static tests run this)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "charts" / "mwms-operator" / "values.schema.json"
K8S_BUILD = REPO / "hack" / "build" / "k8s-build.sh"
PREFIX = "io.k8s."
# Kept from the API's schema: what validates. Descriptions are left out (the chart's values.yaml documents
# each value and links the API reference), and so are the x-kubernetes-* extensions no validator reads.
# fmt: off
KEEP = {
    "type", "properties", "additionalProperties", "items", "required", "oneOf", "anyOf", "allOf", "enum",
    "format", "$ref",
}
# fmt: on


def built_version() -> str:
    """1.37 from hack/build/k8s-build.sh's `K8S_VERSION=${K8S_VERSION:-v1.37.2}` (the Kubernetes we build)."""
    pattern = r"^K8S_VERSION=\$\{K8S_VERSION:-v(\d+)\.(\d+)\.\d+\}"
    match = re.search(pattern, K8S_BUILD.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"{K8S_BUILD}: no K8S_VERSION=${{K8S_VERSION:-v1.N.P}} line")
    return f"{match.group(1)}.{match.group(2)}"


def api_definitions(version: str) -> dict[str, Any]:
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    path = root / f"v{version}.0-local-strict" / "_definitions.json"
    if not path.exists():
        raise SystemExit(f"kubernetes-validate has no schema for Kubernetes {version} ({path})")
    return json.loads(path.read_text())["$defs"]


def refs(node: Any) -> set[str]:
    """Names of the io.k8s definitions that node refers to, in either spelling of the reference."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                name = value.rsplit("/", 1)[-1]
                if name.startswith(PREFIX):
                    found.add(name)
            else:
                found |= refs(value)
    elif isinstance(node, list):
        for item in node:
            found |= refs(item)
    return found


def trimmed(node: Any) -> Any:
    """An API schema node with only the validating keywords, its refs pointing into our `definitions`."""
    if isinstance(node, list):
        return [trimmed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref":
            out[key] = "#/definitions/" + value.rsplit("/", 1)[-1]
        elif key == "properties":
            out[key] = {name: trimmed(child) for name, child in value.items()}
        elif key in KEEP:
            out[key] = trimmed(value)
    return out


def render(schema: dict[str, Any], api: dict[str, Any]) -> dict[str, Any]:
    """schema with its io.k8s definitions replaced by the closure of what its own parts refer to."""
    own = {name: d for name, d in schema.get("definitions", {}).items() if not name.startswith(PREFIX)}
    roots = refs({key: value for key, value in schema.items() if key != "definitions"}) | refs(own)
    needed: dict[str, Any] = {}
    todo = sorted(roots)
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        if name not in api:
            raise SystemExit(f"{SCHEMA.name} refers to {name}, which the Kubernetes API schema does not have")
        needed[name] = trimmed(api[name])
        todo.extend(sorted(refs(needed[name]) - needed.keys()))
    return {**schema, "definitions": {**own, **dict(sorted(needed.items()))}}


def dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the schema's API types are out of date")
    args = parser.parse_args(argv)
    current = SCHEMA.read_text()
    expected = dump(render(json.loads(current), api_definitions(built_version())))
    if args.check:
        if current != expected:
            print(f"{SCHEMA.relative_to(REPO)} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(expected)
    print(f"wrote {SCHEMA.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
