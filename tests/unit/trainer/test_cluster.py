"""cluster_spec.py: TF_CONFIG -> rank, workers, chief; malformed TF_CONFIG names the field."""

from __future__ import annotations

import json

import pytest

from mwms_contract.tf_config import tf_config
from mwms_trainer.cluster_spec import from_tf_config
from mwms_trainer.errors import ConfigError

HOSTS = ["w-0.j.ns.svc:2222", "w-1.j.ns.svc:2222", "w-2.j.ns.svc:2222"]


def test_no_tf_config_is_one_local_chief():
    for raw in (None, "", "  "):
        c = from_tf_config(raw)
        assert (c.num_workers, c.rank, c.is_chief, c.is_distributed, c.peers) == (1, 0, True, False, ())


@pytest.mark.parametrize("index", [0, 1, 2])
def test_operator_tf_config_round_trip(index):
    c = from_tf_config(json.dumps(tf_config(HOSTS, index)))
    assert c.hosts == tuple(HOSTS)
    assert c.rank == index
    assert c.num_workers == 3
    assert c.is_chief == (index == 0)
    assert c.own_address == HOSTS[index]
    assert c.peers == tuple(h for i, h in enumerate(HOSTS) if i != index)


def test_a_chief_task_ranks_first():
    raw = {"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}, "task": {"type": "worker", "index": 0}}
    c = from_tf_config(json.dumps(raw))
    assert c.hosts == ("c:1", "w0:1", "w1:1")
    assert c.rank == 1 and not c.is_chief
    raw["task"] = {"type": "chief", "index": 0}
    assert from_tf_config(json.dumps(raw)).is_chief


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("{not json", "TF_CONFIG"),
        ("[]", "TF_CONFIG"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "TF_CONFIG.cluster"),
        (
            json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}),
            "TF_CONFIG.cluster.ps",
        ),
        (
            json.dumps({"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}),
            "TF_CONFIG.cluster.worker",
        ),
        (
            json.dumps({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}),
            "TF_CONFIG.cluster.worker",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}}),
            "TF_CONFIG.cluster.worker",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}),
            "TF_CONFIG.cluster",
        ),
        (json.dumps({"cluster": {"worker": ["a:1"]}}), "TF_CONFIG.task"),
        (
            json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}),
            "TF_CONFIG.task.type",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}),
            "TF_CONFIG.task.index",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": True}}),
            "TF_CONFIG.task.index",
        ),
        (
            json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}),
            "TF_CONFIG.task.index",
        ),
    ],
)
def test_malformed_tf_config_names_the_field(raw, field):
    with pytest.raises(ConfigError) as err:
        from_tf_config(raw)
    assert err.value.setting == field
    assert str(err.value).startswith(f"{field}: ")
    assert err.value.exit_code == 2
