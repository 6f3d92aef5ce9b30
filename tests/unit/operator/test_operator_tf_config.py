import pytest

from mwms_contract.tf_config import tf_config, worker_hosts


@pytest.mark.parametrize(
    ("job", "ns", "replicas", "port", "domain", "expected"),
    [
        ("a", "ns", 1, 2222, "", ["a-worker-0.a.ns.svc:2222"]),
        (
            "mnist",
            "team-a",
            3,
            2222,
            "",
            [
                "mnist-worker-0.mnist.team-a.svc:2222",
                "mnist-worker-1.mnist.team-a.svc:2222",
                "mnist-worker-2.mnist.team-a.svc:2222",
            ],
        ),
        (
            "j",
            "default",
            2,
            9000,
            "cluster.local",
            ["j-worker-0.j.default.svc.cluster.local:9000", "j-worker-1.j.default.svc.cluster.local:9000"],
        ),
        ("j", "default", 1, 2222, ".corp.example.", ["j-worker-0.j.default.svc.corp.example:2222"]),
    ],
)
def test_worker_hosts(job, ns, replicas, port, domain, expected):
    assert worker_hosts(job, ns, replicas, port, domain) == expected


@pytest.mark.parametrize("index", [0, 1, 2])
def test_tf_config_names_every_worker_and_this_task(index):
    hosts = worker_hosts("mnist", "team-a", 3, 2222, "")
    assert tf_config(hosts, index) == {
        "cluster": {"worker": hosts},
        "task": {"type": "worker", "index": index},
    }


def test_tf_config_has_no_chief_task_so_worker_0_is_the_chief():
    assert set(tf_config(["h:1", "h:2"], 0)["cluster"]) == {"worker"}


def test_tf_config_copies_the_host_list():
    hosts = ["h:1"]
    config = tf_config(hosts, 0)
    hosts.append("h:2")
    assert config["cluster"]["worker"] == ["h:1"]


@pytest.mark.parametrize("index", [-1, 3])
def test_tf_config_rejects_an_index_outside_the_cluster(index):
    with pytest.raises(ValueError, match="outside the cluster of 3"):
        tf_config(["a:1", "b:1", "c:1"], index)
