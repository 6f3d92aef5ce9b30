"""`mwms local` before any worker starts: bad manifests name the field; worker env is the operator's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mwms_contract import names
from mwms_kit.trainjobs import trainjob
from mwms_operator.render.spec import parse_trainjob
from mwms_operator.settings import OperatorConfig
from mwms_trainer import local

REPO = Path(__file__).resolve().parents[3]
GOOD = trainjob("j", 2)


def _write(tmp_path, body):
    path = tmp_path / "job.yaml"
    path.write_text(body if isinstance(body, str) else yaml.safe_dump(body))
    return path


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("spec: [unclosed", "job.yaml"),
        ({**GOOD, "kind": "Pod"}, "kind"),
        ({**GOOD, "apiVersion": "mwms.dev/v1"}, "apiVersion"),
        ({**GOOD, "metadata": {}}, "metadata.name"),
        ({**GOOD, "spec": {}}, "spec.replicas"),
        ({**GOOD, "spec": {"replicas": "two"}}, "spec.replicas"),
        (
            {**GOOD, "spec": {"replicas": 4, "trainer": {"globalBatchSize": 2}}},
            "spec.trainer.globalBatchSize",
        ),
    ],
)
def test_bad_manifest_exits_2_naming_the_field(tmp_path, capsys, body, field):
    code = local.main([str(_write(tmp_path, body)), "--workdir", str(tmp_path / "w"), "--json"])
    assert code == names.EXIT_INVALID_CONFIG
    err = capsys.readouterr().err
    assert "invalid TrainJob" in err and field in err
    assert not (tmp_path / "w" / "jobs").exists()  # no worker was started


@pytest.mark.parametrize("sample", ["seed-breast-cancer.yaml", "minimal.yaml"])
def test_samples_parse(sample):
    body = local.load_manifest(REPO / "manifests" / "samples" / sample)
    assert parse_trainjob(body, OperatorConfig().spec_defaults()).replicas >= 1


def test_worker_envs_are_the_operators_pointed_at_local_files(tmp_path):
    spec = parse_trainjob(
        {**GOOD, "spec": {"replicas": 2, "checkpoint": {"hostPath": {"path": "/x"}}}},
        OperatorConfig().spec_defaults(),
    )
    envs = local.worker_envs(
        spec, job_name="j", namespace="ns", uid="u", tracking_uri="sqlite:///m.db", job_dir=tmp_path,
        ports=[5001, 5002], base={},
    )  # fmt: skip
    for i, env in enumerate(envs):
        hosts = ["127.0.0.1:5001", "127.0.0.1:5002"]
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"worker": hosts},
            "task": {"type": "worker", "index": i},
        }
        assert env[names.ENV_TRACKING_URI] == "sqlite:///m.db"
        assert env[names.ENV_JOB_UID] == "u" and env[names.ENV_RESTART_COUNT] == "0"
        assert env[names.ENV_CHECKPOINT_DIR] == str(tmp_path / "checkpoint")
        assert env["MWMS_TERMINATION_LOG"] == str(tmp_path / f"worker-{i}.termination")


def test_spec_code_is_refused_with_what_to_do_instead(tmp_path, capsys):
    body = {**GOOD, "spec": {"replicas": 2, "code": {"configMap": "c", "entrypoint": "train.py"}}}
    code = local.main([str(_write(tmp_path, body)), "--workdir", str(tmp_path / "w")])
    assert code == names.EXIT_INVALID_CONFIG
    assert "spec.code names a ConfigMap or volume" in capsys.readouterr().err
    assert not (tmp_path / "w" / "jobs").exists()
