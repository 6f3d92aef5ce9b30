"""`mwms convert`'s TrainJobs on a real API server (no operator, no node): each TFJob of the test data
(tests/data/tfjob/: training-operator's examples, the peer bench's, one per loss), converted, is created with
kubectl's strict field validation and CEL rules, and kept as converted: nothing refused, nothing pruned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mwms import convert_tfjob

DATA = Path(__file__).resolve().parents[2] / "data" / "tfjob"


def converted(namespace: str) -> list[dict[str, Any]]:
    jobs = []
    for path in sorted(p for p in DATA.rglob("*.yaml") if "converted" not in p.relative_to(DATA).parts):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "TFJob":
                job = convert_tfjob(doc).trainjob
                job["metadata"]["namespace"] = namespace
                jobs.append(job)
    return jobs


def test_every_converted_tfjob_is_created_and_kept_as_converted(kubectl, namespace):
    jobs = converted(namespace)
    assert len({job["metadata"]["name"] for job in jobs}) == len(jobs) > 20
    kubectl.apply({"apiVersion": "v1", "kind": "List", "items": jobs}, "--validate=strict")
    for job in jobs:
        stored = kubectl.json("get", "trainjobs.mwms.dev", job["metadata"]["name"], "-n", namespace)
        name = job["metadata"]["name"]
        for key in ("labels", "annotations"):
            kept = {
                k: v for k, v in (stored["metadata"].get(key) or {}).items() if not k.startswith("kubectl.")
            }
            assert kept == job["metadata"].get(key, {}), name
        spec = stored["spec"]
        assert spec["template"] == job["spec"]["template"], name  # securityContext: {} too
        for key in ("replicas", "port", "mlflow"):
            assert key not in job["spec"] or spec[key] == job["spec"][key], name
        # The CRD's defaults are added (startupTimeoutSeconds, ...); what was converted is kept.
        assert job["spec"]["runPolicy"].items() <= spec["runPolicy"].items(), name
