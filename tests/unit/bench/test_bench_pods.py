"""The pod watch's counting and the two operators' kinds, on records made by hand: what a duplicate worker
is, the most pods of a job alive at once, groups that ran; the peer's TFJob has the TrainJob's shape and
what the KWOK Stages read, its phase is its furthest true condition, its restarts and API cost are counted
from its pods and client-go."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from mwms_bench import measure
from mwms_bench.operators import OPERATORS
from mwms_bench.watch import PodRecord, PodWatcher
from mwms_dev.kwok import STAGES_DIR, WorkerScript

OURS, PEER = OPERATORS["mwms"], OPERATORS["training-operator"]


def watcher(*pods: tuple[str, str, str, float, float | None, float | None]) -> PodWatcher:
    """(uid, restart, index, added, running, deleting) of job `j` in namespace `ns`."""
    w = PodWatcher(core=None)
    for uid, restart, index, added, running, deleting in pods:
        w.pods[uid] = PodRecord("ns", "j", restart, index, added, running=running, deleting=deleting)
    return w


RESTARTED = [("c", "1", "0", 6, 7, None), ("d", "1", "1", 6, 7, None)]  # group 1, created at 6


def test_a_group_restarted_after_the_last_was_deleted_is_no_duplicate_and_never_over_replicas():
    w = watcher(("a", "0", "0", 1, 2, 5), ("b", "0", "1", 1, 2, 5), *RESTARTED)
    assert w.duplicates("ns") == {} and w.most_alive("ns") == {"j": 2}
    assert set(w.running("ns", 2, "1")) == {"j"}


def test_a_group_created_while_the_last_ones_pods_live_is_over_replicas():
    w = watcher(("a", "0", "0", 1, 2, 5), ("b", "0", "1", 1, 2, None), *RESTARTED)
    assert w.most_alive("ns") == {"j": 3}


def test_two_pods_of_one_worker_at_once_are_a_duplicate():
    w = watcher(("a", "0", "0", 1, 2, None), ("b", "0", "0", 3, None, None))
    assert w.duplicates("ns") == {"j/0/0": 2}


def test_a_pod_deleted_before_it_ran_is_left_out_of_its_group():
    w = watcher(("a", "0", "0", 1, None, 1.5), ("b", "0", "0", 2, 3, None), ("c", "0", "1", 2, None, None))
    assert w.duplicates("ns") == {} and w.running("ns", 2) == {}
    w.pods["c"].running = 3.0
    assert [r.index for r in w.running("ns", 2)["j"]] == ["0", "1"]


def pod(uid: str, name: str, index: str, phase: str = "Running") -> SimpleNamespace:
    labels = {"training.kubeflow.org/job-name": "j", "training.kubeflow.org/replica-index": index}
    meta = SimpleNamespace(uid=uid, name=name, namespace="ns", labels=labels, deletion_timestamp=None)
    return SimpleNamespace(
        metadata=meta, spec=SimpleNamespace(node_name="n"), status=SimpleNamespace(phase=phase)
    )


def test_the_peers_pod_created_again_under_its_name_is_a_restart_of_that_worker_alone():
    w = PodWatcher(core=None, keys=PEER.keys)
    w._seen(pod("a0", "j-worker-0", "0"), 1.0)
    w._seen(pod("a1", "j-worker-1", "1"), 1.0)
    w._seen(pod("a1", "j-worker-1", "1", "Failed"), 2.0, gone=True)  # the same pod again: no new group
    w._seen(pod("b1", "j-worker-1", "1"), 3.0)
    assert {(r.restart, r.index) for r in w.pods.values()} == {("0", "0"), ("0", "1"), ("1", "1")}
    assert [r.name for r in w.running("ns", 1, "1")["j"]] == ["j-worker-1"] and w.duplicates("ns") == {}
    assert PEER.restarts({"j": {}}, w, "ns") == {"j": 1}
    assert PEER.wrong_size(w, "ns", 2) == [] and PEER.wrong_size(w, "ns", 3) == ["j"]


def test_a_tfjob_has_the_trainjobs_shape_and_what_the_stages_read():
    script = WorkerScript(run_for="15s", exit_code=75, message="retryable: x")
    theirs, ours = (kind.job("s-1", 4, script, backoff_limit=2, ttl=5) for kind in (PEER, OURS))
    worker, template = theirs["spec"]["tfReplicaSpecs"]["Worker"], ours["spec"]["template"]
    assert (theirs["kind"], worker["replicas"], worker["restartPolicy"]) == ("TFJob", 4, "OnFailure")
    assert theirs["spec"]["runPolicy"] == {"backoffLimit": 2, "ttlSecondsAfterFinished": 5}
    assert worker["template"]["metadata"]["annotations"] == template["metadata"]["annotations"]
    (container,) = worker["template"]["spec"]["containers"]
    assert container["name"] == "tensorflow"  # the container whose exit code the TFJob controller reads
    assert container["resources"] == template["spec"]["containers"][0]["resources"]
    key, value = next(iter(worker["template"]["metadata"]["labels"].items()))
    for path in sorted(STAGES_DIR.glob("*.yaml")):  # every pod Stage selects the peer's workers too
        for expression in yaml.safe_load(path.read_text())["spec"]["selector"]["matchExpressions"]:
            if expression["key"] == f'.metadata.labels["{key}"]':
                assert value in expression["values"], path.name


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [([], ""),
     (["Created"], "Pending"), (["Created", "Running"], "Running"), (["Created", "Failed"], "Failed"),
     (["Created", "Restarting"], "Restarting"), (["Running", "Succeeded"], "Succeeded")],
)  # fmt: skip
def test_a_tfjobs_phase_is_its_furthest_true_condition(conditions, phase):
    false = [{"type": "Suspended", "status": "False"}]
    assert PEER.phase({"conditions": [{"type": t, "status": "True"} for t in conditions] + false}) == phase


def test_the_peers_api_cost_is_its_client_go_count_by_method_and_code():
    counts = {("POST", "201"): 12, ("PUT", "200"): 4, ("PUT", "409"): 1}
    metric = 'rest_client_requests_total{{code="{}",method="{}"}} {}\n'
    text = "".join(metric.format(code, method, n) for (method, code), n in counts.items())
    assert PEER.requests(measure.samples(text)) == counts
