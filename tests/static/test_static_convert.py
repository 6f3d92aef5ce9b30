"""`mwms convert` against both CRDs: every TFJob of its test data (tests/data/tfjob/) is one by
training-operator's TFJob CRD (v1.9.0's, kept there), and the TrainJob converted from each (losses allowed)
passes our CRD's schema, both strict as `kubectl apply` is."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import yaml
from static_support import MANIFESTS, REPO, load_all, run, strict_json_schema, venv_tool

from mwms import convert_tfjob

DATA = REPO / "tests" / "data" / "tfjob"
TFJOB_CRD = DATA / "training-operator" / "kubeflow.org_tfjobs.yaml.gz"
INPUTS = sorted(p for p in DATA.rglob("*.yaml") if "converted" not in p.relative_to(DATA).parts)


def tfjobs() -> list[dict]:
    return [doc for path in INPUTS for doc in load_all(path.read_text()) if doc.get("kind") == "TFJob"]


def tfjob_schema() -> dict:
    with gzip.open(TFJOB_CRD, "rt", encoding="utf-8") as crd:
        return strict_json_schema(yaml.safe_load(crd))


def check(schema: dict, docs: list[dict], tmp_path: Path) -> tuple[int, str]:
    """check-jsonschema over every document at once; its output names each that fails and why."""
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(schema))
    instances = []
    for i, doc in enumerate(docs):
        instances.append(tmp_path / f"{i}-{doc['metadata']['name']}.json")
        instances[-1].write_text(json.dumps(doc))
    result = run([venv_tool("check-jsonschema"), "--schemafile", schema_file, *instances], check=False)
    return result.returncode, result.stdout + result.stderr


def test_the_test_data_holds_the_examples_and_the_peer_benchs_tfjobs():
    names = {doc["metadata"]["name"] for doc in tfjobs()}
    assert {"dist-mnist-for-e2e-test", "multi-worker", "mnist", "tfjob-simple", "lat-0", "b-0"} <= names


def test_every_tfjob_of_the_test_data_is_one_by_training_operators_crd(tmp_path):
    code, output = check(tfjob_schema(), tfjobs(), tmp_path)
    assert code == 0, output


def test_the_tfjob_check_can_fail(tmp_path):
    misspelt = copy.deepcopy(tfjobs()[0])
    misspelt["spec"]["enableDynamicWorkers"] = True
    code, output = check(tfjob_schema(), [misspelt], tmp_path)
    assert code != 0 and "enableDynamicWorkers" in output


def test_each_tfjob_converts_to_a_trainjob_our_crd_accepts(tmp_path):
    converted = [convert_tfjob(doc).trainjob for doc in tfjobs()]
    ours = strict_json_schema(next(d for d in load_all((MANIFESTS / "crd.yaml").read_text())))
    code, output = check(ours, converted, tmp_path)
    assert code == 0, output
