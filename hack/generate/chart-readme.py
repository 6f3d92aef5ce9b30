#!/usr/bin/env python3
"""Write charts/mwms-operator/README.md (what `helm show readme` prints) from Chart.yaml and the `# --`
comments of values.yaml, as helm-docs does: one table row per documented value, with its type and default.

A `# --` comment documents the key below it; the `#` lines that follow it continue the text. A documented
map is one row (its default is the whole map) and its keys get no rows of their own.

    hack/generate/chart-readme.py          write the README
    hack/generate/chart-readme.py --check  exit 1 if it is out of date (the static tests run this)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "mwms-operator"
README = CHART / "README.md"
KEY = re.compile(r"^(\s*)([A-Za-z][\w-]*):(\s.*)?$")
# The README's Upgrading and Uninstall sections (`helm show readme` is what users of the OCI chart read).
LIFECYCLE = """## Upgrading

```sh
helm upgrade mwms oci://ghcr.io/mwms-dev/charts/mwms-operator --version <new> -n mwms-system -f my-values.yaml
```

- The CRD is a template, so it is upgraded with the release (Helm never upgrades a chart's `crds/`). It is
  `v1alpha1`: read `CHANGELOG.md` for CRD changes before a minor upgrade.
- The operator rolls one pod at a time (`maxSurge: 1, maxUnavailable: 0`); a stopping leader gives its Lease
  up and a standby leads within `operator.leaderElection.retryPeriod`. Running TrainJobs are not touched.
- Values that moved under `operator` (and `global.imagePullSecrets`, `trainer.image`) are still read for one
  release; the upgrade's notes name each old key found. Prefer your own values file to `--reuse-values`.

## Reading runs

The bundled MLflow is a Service users' machines cannot resolve: `mwms logs`, `describe`, `events` and `ui`
read a job's run through the API server's service proxy with each user's own rights, which need `get` (and,
for `mwms ui`, `create`) on `services/proxy` of `<release>-mlflow` in the release namespace; add the API
server's host to `mlflow.extraAllowedHosts` (`docs/install.md`, Reading runs through the API server).

## Uninstall

```sh
helm uninstall mwms -n mwms-system
```

Removes the operator, its RBAC, the bundled MLflow (and its volume: back up `/mlflow` first), and, through a
post-delete hook, the operator's leader-election Lease. It keeps the TrainJob CRD and every TrainJob
(`crds.keep`, default true); jobs that were running keep their pods until an operator runs again. Delete
the CRD only when you mean to delete every TrainJob: `kubectl delete crd trainjobs.mwms.dev`.
""".splitlines()


def documented_values(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for each key with a `# --` comment, in file order."""
    lines = text.splitlines()
    parents: list[tuple[int, str, bool]] = []  # (indent, key, documented) of the enclosing maps
    rows = []
    for number, line in enumerate(lines):
        match = KEY.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        while parents and parents[-1][0] >= indent:
            parents.pop()
        comments = []
        above = number - 1
        while above >= 0 and lines[above].strip().startswith("#"):
            comments.insert(0, lines[above].strip().removeprefix("#").strip())
            above -= 1
        starts = [i for i, c in enumerate(comments) if c.startswith("--")]
        path = ".".join([key for _, key, _ in parents] + [match.group(2)])
        inside_documented = any(documented for _, _, documented in parents)
        if starts and not inside_documented:
            text_lines = comments[starts[-1] :]
            rows.append((path, " ".join([text_lines[0].removeprefix("--").strip(), *text_lines[1:]]).strip()))
        if not (match.group(3) or "").strip():  # a map: its keys follow, indented
            parents.append((indent, match.group(2), bool(starts) or inside_documented))
    return rows


def lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        node = node[key]
    return node


def type_name(value: Any) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string"), (list, "list")):
        if isinstance(value, kind):
            return name
    return "object"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values_text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    rows = []
    for key, text in documented_values(values_text):
        default = lookup(values, key)
        rows.append(f"| `{key}` | {type_name(default)} | `{cell(json.dumps(default))}` | {cell(text)} |")
    return "\n".join(
        [
            "<!-- Generated from Chart.yaml and values.yaml by hack/generate/chart-readme.py: edit those "
            "instead. -->",
            f"# {chart['name']}",
            "",
            chart["description"].strip(),
            "",
            f"Kubernetes: `{chart['kubeVersion']}`",
            "",
            "## Install",
            "",
            "```sh",
            "helm install mwms oci://ghcr.io/mwms-dev/charts/mwms-operator \\",
            "  --version <version> --namespace mwms-system --create-namespace",
            "```",
            "",
            "Every value is checked by `values.schema.json`: a misspelt key fails the install.",
            "Installing with kustomize, Argo CD or Flux, upgrades, CRDs and uninstalling: `docs/install.md`",
            "in the",
            f"[repository]({chart['home']}).",
            "",
            *LIFECYCLE,
            "",
            "## Values",
            "",
            "| Key | Type | Default | Description |",
            "|-----|------|---------|-------------|",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the README is out of date")
    args = parser.parse_args(argv)
    expected = render()
    if args.check:
        if not README.exists() or README.read_text() != expected:
            stale = README.relative_to(REPO)
            print(f"{stale} is out of date: run hack/generate/chart-readme.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(expected)
    print(f"wrote {README.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
