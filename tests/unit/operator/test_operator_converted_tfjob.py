"""A TrainJob converted from a TFJob (mwms convert), as the operator builds its worker pods. Here, not
beside the converter's tests: the client's tests run where the operator is not installed."""

from __future__ import annotations

from pathlib import Path

import yaml

from mwms import convert_tfjob
from mwms_contract import names
from mwms_operator.render.pod import build_worker_pod
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig

CARRIED = Path(__file__).resolve().parents[2] / "data" / "tfjob" / "carried.yaml"


def carried(name: str) -> dict:
    return next(doc for doc in yaml.safe_load_all(CARRIED.read_text()) if doc["metadata"]["name"] == name)


def test_the_operator_runs_a_converted_job_with_the_tfjobs_image_and_command():
    """Worker pods as the operator builds them: the user's image and command in `trainer` with TF_CONFIG,
    no rendezvous probe (only our trainer passes it), the image's own user."""
    job = convert_tfjob(carried("full")).trainjob
    spec = parse_trainjob(job, OperatorConfig().spec_defaults())
    hosts = [f"full-worker-{i}.full.team-a.svc:2223" for i in range(4)]
    pod = build_worker_pod(
        spec, job_name="full", namespace="team-a", uid="u", index=0, hosts=hosts, restart_count=0
    )
    trainer = next(c for c in pod["spec"]["containers"] if c["name"] == names.CONTAINER_NAME)
    assert trainer["image"] == "example.com/vision/resnet:2.1" and trainer["command"] == [
        "python",
        "/app/train.py",
    ]
    assert [e["name"] for e in trainer["env"]].count(names.ENV_TF_CONFIG) == 1
    assert "readinessProbe" not in trainer and trainer["securityContext"] == {}
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["priorityClassName"] == "high"
