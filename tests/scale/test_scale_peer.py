"""The scale bench's training-operator side (bench/scale/peer.py, bench/scale/operators.py): its TFJobs have
the shape of our TrainJobs and carry what the KWOK Stages read, its phases map from TFJob conditions, its pod
watch groups a pod created again under the same name as a restart, and its API cost comes from client-go's
rest_client_requests_total. No cluster: manifests, statuses, metrics text and pod events made by hand."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from mwms_dev.kwok import STAGES_DIR, WorkerScript
from mwms_kit import modules


@pytest.fixture(scope="module")
def scale() -> Any:
    run = modules.load("mwms_scale_run", "bench/scale/run.py")
    peer = modules.load("mwms_scale_peer", "bench/scale/peer.py")
    operators = modules.load("mwms_scale_operators", "bench/scale/operators.py")
    return SimpleNamespace(run=run, peer=peer, operators=operators, watch=run.watch)


def worker_template(tfjob: dict) -> dict:
    return tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]


def test_a_tfjob_has_the_trainjobs_shape_and_what_the_stages_read(scale):
    script = WorkerScript(run_for="15s", exit_code=75, message="retryable: x")
    job = scale.peer.tfjob("s-1", 4, script, backoff_limit=2, ttl=5)
    ours = scale.run.trainjob("s-1", 4, script, backoff_limit=2, ttl=5)

    assert (job["apiVersion"], job["kind"], job["metadata"]) == ("kubeflow.org/v1", "TFJob", {"name": "s-1"})
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == ours["spec"]["replicas"] == 4
    assert job["spec"]["runPolicy"] == {"backoffLimit": 2, "ttlSecondsAfterFinished": 5}
    # the lost worker's exit code 75 restarts it under OnFailure (under ExitCode, 1-127 fail the job)
    assert worker["restartPolicy"] == "OnFailure"
    template = worker_template(job)
    assert template["metadata"]["annotations"] == ours["spec"]["template"]["metadata"]["annotations"]
    (container,) = template["spec"]["containers"]
    assert container["name"] == "tensorflow"  # the container whose exit code the TFJob controller reads
    assert container["resources"] == ours["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}


def test_every_pod_stage_selects_the_tfjobs_workers(scale):
    key, value = scale.peer.MANAGED_BY
    labels = worker_template(scale.peer.tfjob("j", 4, WorkerScript()))["metadata"]["labels"]
    assert labels == {key: value}
    for path in sorted(STAGES_DIR.glob("*.yaml")):
        stage = yaml.safe_load(path.read_text())
        for expression in stage["spec"]["selector"]["matchExpressions"]:
            if expression["key"] == f'.metadata.labels["{key}"]':
                assert value in expression["values"], path.name


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [
        ([], ""),
        ([("Created", "True")], "Pending"),
        ([("Created", "True"), ("Running", "True")], "Running"),
        ([("Created", "True"), ("Running", "False"), ("Restarting", "True")], "Restarting"),
        ([("Created", "True"), ("Running", "True"), ("Succeeded", "True")], "Succeeded"),
        ([("Created", "True"), ("Running", "False"), ("Failed", "True")], "Failed"),
    ],
)
def test_a_tfjobs_phase_is_its_furthest_true_condition(scale, conditions, phase):
    status = {"conditions": [{"type": t, "status": s} for t, s in conditions]}
    assert scale.peer.phase(status) == phase


def pod(uid: str, name: str, index: str, phase: str = "Running", job: str = "j") -> Any:
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-index": index,
        "training.kubeflow.org/replica-type": "worker",
    }
    return SimpleNamespace(
        metadata=SimpleNamespace(uid=uid, name=name, namespace="ns", labels=labels, deletion_timestamp=None),
        spec=SimpleNamespace(node_name="kwok-node-0"),
        status=SimpleNamespace(phase=phase),
    )


def test_the_peers_watch_groups_a_pod_created_again_under_its_name_as_a_restart(scale):
    w = scale.watch.PodWatcher(core=None, keys=scale.peer.KEYS)
    assert w.keys.selector == "training.kubeflow.org/job-name"
    for i in range(2):
        w._seen(pod(f"a{i}", f"j-worker-{i}", str(i)), 1.0)
    w._seen(pod("a1", "j-worker-1", "1", phase="Failed"), 2.0)  # the same pod again: no new group
    w._seen(pod("a1", "j-worker-1", "1", phase="Failed"), 2.5, gone=True)
    w._seen(pod("b1", "j-worker-1", "1"), 3.0)  # created again, same name, new uid

    assert {(r.job, r.restart, r.index, r.name) for r in w.pods.values()} == {
        ("j", "0", "0", "j-worker-0"),
        ("j", "0", "1", "j-worker-1"),
        ("j", "1", "1", "j-worker-1"),
    }
    assert set(w.running("ns", 2)) == {"j"}
    assert [r.name for r in w.running("ns", 1, "1")["j"]] == ["j-worker-1"]
    assert w.duplicates("ns") == {}


def test_the_peers_restarts_and_worker_indices_come_from_its_pods(scale):
    w = scale.watch.PodWatcher(core=None, keys=scale.peer.KEYS)
    for job in ("j", "k"):
        for i in range(2):
            w._seen(pod(f"{job}{i}", f"{job}-worker-{i}", str(i), job=job), 1.0)
    w._seen(pod("j1", "j-worker-1", "1", job="j"), 2.0, gone=True)
    w._seen(pod("j1-again", "j-worker-1", "1", job="j"), 3.0)
    env = SimpleNamespace(watcher=w, jobs=lambda namespace: {"j": {}, "k": {}})
    peer = scale.operators.OPERATORS["training-operator"]

    assert peer.restarted_size(4) == 1
    assert peer.restarts(env, "ns") == {"j": 1, "k": 0}
    assert peer.wrong_size(env, "ns", 2) == []
    assert peer.wrong_size(env, "ns", 3) == ["j", "k"]


def test_ours_still_groups_by_its_restart_label(scale):
    w = scale.watch.PodWatcher(core=None)
    assert w.keys == scale.watch.OURS
    ours = pod("a", "j-worker-0", "0")
    ours.metadata.labels = {"mwms.dev/job-name": "j", "mwms.dev/restart": "3", "mwms.dev/replica-index": "0"}
    w._seen(ours, 1.0)
    assert (w.pods["a"].job, w.pods["a"].restart, w.pods["a"].index) == ("j", "3", "0")


METRICS = """\
# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 12
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 4
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PUT"} 1
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 3
# HELP workqueue_depth Current depth of workqueue
# TYPE workqueue_depth gauge
workqueue_depth{name="tfjob-controller"} 7
"""


def test_the_peers_api_cost_is_its_own_client_go_count_by_method_and_code(scale):
    samples = scale.run.metric_samples
    env = SimpleNamespace(operator_metrics=lambda prefix="": samples(METRICS, prefix))
    peer = scale.operators.OPERATORS["training-operator"]
    requests = peer.requests(env)
    assert requests == {("POST", "201"): 12, ("PUT", "200"): 4, ("PUT", "409"): 1, ("GET", "200"): 3}
    assert peer.depth(env) == 7


OURS_METRICS = """\
# HELP mwms_api_requests_total Requests the operator sent to the Kubernetes API server
# TYPE mwms_api_requests_total counter
mwms_api_requests_total{code="201",resource="pods",verb="create"} 8
mwms_api_requests_total{code="409",resource="pods",verb="create"} 2
mwms_api_requests_total{code="200",resource="trainjobs",verb="patch"} 5
"""


def test_our_api_cost_is_our_own_count_by_verb_and_resource_over_every_code(scale):
    samples = scale.run.metric_samples
    env = SimpleNamespace(operator_metrics=lambda prefix="": samples(OURS_METRICS, prefix))
    ours = scale.operators.OPERATORS["mwms"]
    assert ours.requests(env) == {("create", "pods"): 10, ("patch", "trainjobs"): 5}
