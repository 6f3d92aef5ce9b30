"""The tests' one TrainJob factory (tests/kit/mwms_kit/trainjobs.py): what each of its keywords puts where."""

import pytest

from mwms_contract.names import API_VERSION, KIND
from mwms_contract.trainjob import parse
from mwms_kit.trainjobs import trainjob

HEAD = {"apiVersion": "mwms.dev/v1alpha1", "kind": "TrainJob"}
SECRET_ENV = {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


def pod(*containers):
    return {"spec": {"containers": list(containers)}}


def job(spec, **more):
    return {**HEAD, "metadata": {"name": "j"}, "spec": spec, **more}


CASES = [
    ("bare", trainjob("j"), job({"replicas": 2})),
    ("no replicas", trainjob("j", None), job({})),
    (
        "spec fields",
        trainjob("j", 3, image="i:1", port=3333, runPolicy={"suspend": True}),
        job({"replicas": 3, "image": "i:1", "port": 3333, "runPolicy": {"suspend": True}}),
    ),
    (
        "metadata",
        trainjob("j", namespace="ns", labels={"a": "b"}, metadata={"uid": "u", "generation": 1}),
        {
            **job({"replicas": 2}),
            "metadata": {"name": "j", "namespace": "ns", "labels": {"a": "b"}, "uid": "u", "generation": 1},
        },
    ),
    ("status", trainjob("j", status={"phase": "Running"}), job({"replicas": 2}, status={"phase": "Running"})),
    (
        "env as a mapping",
        trainjob("j", env={"A": "1"}),
        job({"replicas": 2, "template": pod({"name": "trainer", "env": [{"name": "A", "value": "1"}]})}),
    ),
    (
        "env as EnvVars; the container's fields after env",
        trainjob("j", env=[SECRET_ENV], container={"image": "i:1", "command": ["py"]}),
        job(
            {
                "replicas": 2,
                "template": pod({"name": "trainer", "env": [SECRET_ENV], "image": "i:1", "command": ["py"]}),
            }
        ),
    ),
    (
        "the container's fields win over env",
        trainjob("j", env={"A": "1"}, container={"env": [SECRET_ENV]}),
        job({"replicas": 2, "template": pod({"name": "trainer", "env": [SECRET_ENV]})}),
    ),
    (
        "the trainer container goes first, the template's own after it",
        trainjob("j", env={}, template={"metadata": {"labels": {"t": "1"}}, **pod({"name": "sidecar"})}),
        job(
            {
                "replicas": 2,
                "template": {
                    "metadata": {"labels": {"t": "1"}},
                    **pod({"name": "trainer", "env": []}, {"name": "sidecar"}),
                },
            }
        ),
    ),
    (
        "a template alone is the pod template as given",
        trainjob("j", template=pod({"name": "trainer", "image": "i:1"})),
        job({"replicas": 2, "template": pod({"name": "trainer", "image": "i:1"})}),
    ),
]


@pytest.mark.parametrize(("made", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_keyword_lands_where_it_belongs(made, expected):
    assert made == expected


def test_api_version_and_kind_are_the_contracts():
    assert (trainjob("j")["apiVersion"], trainjob("j")["kind"]) == (API_VERSION, KIND)


def test_a_made_job_is_valid_and_keeps_its_settings():
    spec = parse(
        trainjob("j", 4, trainer={"epochs": 3}, env={"A": "1"}),
        tracking_uri="http://mlflow:5000",
        image="i:1",
    )
    assert (spec.replicas, spec.trainer["epochs"]) == (4, 3)


def test_what_is_given_is_copied_not_shared():
    trainer, template = {"epochs": 3}, {"spec": {"volumes": []}}
    job = trainjob("j", trainer=trainer, template=template, container={"command": ["x"]})
    job["spec"]["trainer"]["epochs"] = 9
    job["spec"]["template"]["spec"]["volumes"].append({"name": "v"})
    assert trainer == {"epochs": 3} and template == {"spec": {"volumes": []}}


def test_a_trainer_container_given_twice_is_refused():
    with pytest.raises(ValueError, match="given twice"):
        trainjob("j", env={"A": "1"}, template=pod({"name": "trainer"}))
