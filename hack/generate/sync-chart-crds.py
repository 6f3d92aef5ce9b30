#!/usr/bin/env python3
"""Copy manifests/crd.yaml (the single source of truth) into the Helm chart as a template.

The chart's copy differs only in what GitOps needs: it is rendered behind `crds.enabled` and, with
`crds.keep` (the default), carries `helm.sh/resource-policy: keep` (Helm, Flux) and
`argocd.argoproj.io/sync-options: Prune=false,Delete=false` (Argo CD, which applies rendered manifests
itself), so removing the release never deletes the CRD and every TrainJob with it. Its labels are the
chart's standard set (`mwms-operator.labels`), as on every object of the release. CRDs are
templates rather than files in crds/ because Helm never upgrades crds/.

    hack/generate/sync-chart-crds.py          write the chart's copy
    hack/generate/sync-chart-crds.py --check  exit 1 if the chart's copy is out of date (a static test)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "manifests" / "crd.yaml"
TARGET = REPO / "charts" / "mwms-operator" / "templates" / "crds.yaml"
ANNOTATIONS = {
    "helm.sh/resource-policy": "keep",
    "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
}
HEADER = (
    "{{- /* Generated from manifests/crd.yaml by hack/generate/sync-chart-crds.py: edit that file instead. */"
    "}}\n"
    "{{- if .Values.crds.enabled }}\n"
)
FOOTER = "{{- end }}\n"
# Stands for the labels in the dumped YAML until the helper's include replaces it.
LABELS_MARK = "MWMS_CHART_LABELS"
LABELS = 'labels:\n    {{- include "mwms-operator.labels" . | nindent 4 }}'
ANNOTATIONS_MARK = "MWMS_CHART_KEEP_ANNOTATIONS"
KEEP = (
    "{{- if .Values.crds.keep }}\n  annotations:\n"
    + "".join(f"    {key}: {value}\n" for key, value in ANNOTATIONS.items())
    + "  {{- end }}"
)


def render(source_text: str) -> str:
    """The chart template for the CRDs in source_text: each document plus the keep annotations."""
    docs = [doc for doc in yaml.safe_load_all(source_text) if doc]
    if not docs or any(doc.get("kind") != "CustomResourceDefinition" for doc in docs):
        raise SystemExit(f"{SOURCE}: expected only CustomResourceDefinition documents")
    body = []
    for doc in docs:
        if doc["metadata"].get("annotations"):
            raise SystemExit(f"{SOURCE}: the chart sets the CRD's annotations; the source may carry none")
        doc["metadata"]["labels"] = LABELS_MARK
        doc["metadata"]["annotations"] = ANNOTATIONS_MARK
        body.append(yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True))
    text = "---\n".join(body)
    if "{{" in text or "}}" in text:  # Helm would read them as template actions
        raise SystemExit(f"{SOURCE}: has '{{{{' or '}}}}', which a chart template cannot carry verbatim")
    text = text.replace(f"labels: {LABELS_MARK}", LABELS).replace(f"annotations: {ANNOTATIONS_MARK}", KEEP)
    return HEADER + text + FOOTER


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the chart's copy is out of date")
    args = parser.parse_args(argv)
    expected = render(SOURCE.read_text())
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != expected:
            stale = TARGET.relative_to(REPO)
            print(f"{stale} is out of date: run hack/generate/sync-chart-crds.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected)
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
