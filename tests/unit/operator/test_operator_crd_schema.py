"""manifests/crd.yaml against the code: every field documented, and every status field the operator writes
declared (the API server silently prunes undeclared fields from a structural schema)."""

import re
from datetime import UTC, datetime
from pathlib import Path

import yaml

from mwms_contract.names import RESERVED_ENV
from mwms_kit.trainjobs import trainjob
from mwms_operator.decide.job_status import JobMeta
from mwms_operator.decide.policy import decide
from mwms_operator.mlflow.progress import progress_from_run
from mwms_operator.observe.pod_states import WorkerPod
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig

CRD = Path(__file__).resolve().parents[3] / "manifests" / "crd.yaml"


def schema():
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def walk(node, path="", out=None):
    out = [] if out is None else out
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        out.append((here, child))
        walk(child, here, out)
    if "items" in node:
        walk(node["items"], f"{path}[]", out)
    return out


def test_every_field_has_a_description():
    # metadata is the API server's own ObjectMeta (the schema may only restrict name).
    own = [(path, node) for path, node in walk(schema()) if path.split(".")[0] != "metadata"]
    missing = [path for path, node in own if not node.get("description")]
    assert not missing, f"fields without a description: {missing}"


def test_every_status_field_the_operator_writes_is_declared():
    status = schema()["properties"]["status"]
    config = OperatorConfig()
    spec = parse_trainjob(trainjob("j", 1), config.spec_defaults())
    message = '{"runId": "r", "experimentId": "1", "modelUri": "m"}'
    pods = [WorkerPod("j-worker-0", 0, 0, "Succeeded", exit_code=0, message=message)]
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = decide(JobMeta("j", "ns", "u"), spec, [], service_exists=False, now=now)
    done = decide(JobMeta("j", "ns", "u"), spec, pods, service_exists=True, now=now, previous=first.status)
    progress = progress_from_run(
        {"info": {"run_id": "r"}, "data": {"metrics": [{"key": "l", "value": 1.0}]}}, 2
    )
    written = {**done.status, "progress": {**progress, "updateTime": "t"}}

    def undeclared(value, node, path):
        if isinstance(value, dict) and "properties" in node:
            for key, child in value.items():
                if key not in node["properties"]:
                    yield f"{path}.{key}"
                else:
                    yield from undeclared(child, node["properties"][key], f"{path}.{key}")
        elif isinstance(value, list) and "items" in node:
            for item in value:
                yield from undeclared(item, node["items"], f"{path}[]")

    assert not list(undeclared(written, status, "status"))
    assert {c["type"] for c in done.status["conditions"]} <= {
        "Created",
        "Running",
        "Restarting",
        "Succeeded",
        "Failed",
        "Suspended",
    }
    assert done.status["phase"] in status["properties"]["phase"]["enum"]


def test_the_crds_reserved_env_rule_names_exactly_the_variables_the_operator_sets():
    container = schema()["properties"]["spec"]["properties"]["template"]["properties"]["spec"]["properties"][
        "containers"
    ]["items"]
    (rule,) = container["x-kubernetes-validations"]
    assert set(re.findall(r"'([A-Z_]+)'", rule["rule"])) == RESERVED_ENV
