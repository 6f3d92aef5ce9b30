"""One leader, as users install it: the tier's chart release (`node_chain`) runs the chart's defaults, two
operator replicas electing a leader on a Lease. Mid-job the leader's operator process is lost, found from the
host through the node's containerd (its task's PID) and signalled as `kill` would:

- kill: SIGKILL (a crash, the OOM killer). The kubelet restarts the container at once, and its new process has
  the pod's identity again (`<pod>_1`: PID 1 in the container), so it renews the Lease, usually before the
  standby may claim it. Either way a live operator must lead within leaseDuration + retryPeriod of the kill.
- freeze: SIGSTOP (a hung process, a node that stops answering). Nothing renews: the standby must claim the
  expired Lease within leaseDuration + retryPeriod. Then the hung leader is SIGKILLed; it comes back as a
  standby.

leaseDuration and retryPeriod are the chart's, read from the Deployment it rendered. In both cases the job
must end as if nothing happened: it never has more pods than its replicas at any moment (a watch on its pods
from before it starts until it ends, not a sample), none is recreated, it succeeds with exactly one MLflow run
in its experiment, `FINISHED`, and at the end only the Lease's holder says it leads.

The workers are the stand-in (mwms_kit/standin_worker.py) in the trainer image, writing a real MLflow run to
the chart's bundled server, an epoch every 2 s for ~40 s: no TensorFlow, so the job is cheap and the loss of
the leader lands inside the run."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwms_dev.chain import mlflow_get, mlflow_post
from mwms_kit.standin import standin_container
from mwms_kit.trainjobs import trainjob
from mwms_kit.watches import PodWatch

pytestmark = pytest.mark.timeout(1500)

REPLICAS = 2


def micro_time(value: str) -> float:
    """A Lease's MicroTime (`2026-12-05T08:00:00.123456Z`) as seconds since the epoch."""
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def operator_pid(real_node: Any, pod: dict) -> int:
    """The PID on this host of the pod's operator process: containerd's task of its container."""
    (status,) = pod["status"]["containerStatuses"]
    container = status["containerID"].removeprefix("containerd://")
    for line in real_node.ctr("tasks", "ls").stdout.splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container:
            return int(pid)
    raise AssertionError(f"no containerd task {container} of pod {pod['metadata']['name']}")


def restart_count(pod: dict) -> int:
    (status,) = pod["status"]["containerStatuses"]
    return int(status["restartCount"])


def leader_gauge(pod: dict, port: str) -> float:
    """The replica's `mwms_leader_election_master_status`, scraped at its pod IP (the host reaches it)."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=10) as reply:
        families = text_string_to_metric_families(reply.read().decode())
    (value,) = [
        s.value for f in families for s in f.samples if s.name == "mwms_leader_election_master_status"
    ]
    return value


def experiment_runs(url: str, experiment: str) -> list[dict]:
    found = mlflow_get(url, "experiments/get-by-name", {"experiment_name": experiment})["experiment"]
    return mlflow_post(url, "runs/search", {"experiment_ids": [found["experiment_id"]]}).get("runs", [])


class ChartOperators:
    """The chart release's operator replicas and their Lease, as the Deployment the chart rendered says."""

    def __init__(self, kubectl: Any, namespace: str) -> None:
        self.kubectl, self.namespace = kubectl, namespace
        (self.deployment,) = kubectl.json(
            "get", "deployments", "-n", namespace, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        (container,) = self.deployment["spec"]["template"]["spec"]["containers"]
        self.env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        self.lease_name = self.env["MWMS_LEADER_ELECTION_LEASE_NAME"]

    def bound(self) -> float:
        """leaseDuration + retryPeriod: when a standby must lead at the latest after the last renewal."""
        return sum(float(self.env[f"MWMS_LEADER_ELECTION_{k}_SECONDS"]) for k in ("LEASE", "RETRY"))

    def lease(self) -> dict:
        return self.kubectl.json("get", "lease", self.lease_name, "-n", self.namespace)["spec"]

    def pods(self) -> dict[str, dict]:
        labels = self.deployment["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        items = self.kubectl.json("get", "pods", "-n", self.namespace, "-l", selector)["items"]
        return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}

    def all_ready(self) -> bool:
        conditions = [p["status"].get("conditions", []) for p in self.pods().values()]
        return len(conditions) == 2 and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in pod) for pod in conditions
        )

    def gauges(self) -> dict[str, float | None]:
        """Each replica's leader gauge (None while it cannot be scraped, e.g. restarting)."""
        found: dict[str, float | None] = {}
        for name, pod in self.pods().items():
            try:
                found[name] = leader_gauge(pod, self.env["MWMS_METRICS_PORT"])
            except (OSError, KeyError, ValueError):
                found[name] = None
        return found


def pod_of(identity: str) -> str:
    return identity.rsplit("_", 1)[0]  # the identity is `<pod>_<pid>`


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_losing_the_leader_of_the_charts_two_replicas_mid_job_leaves_one_leader_one_run_no_extra_pods(
    how, real_node, node_kubectl, node_namespace, node_chain, node_trainer_image, operator_log, wait_for
):
    operators = ChartOperators(node_kubectl, node_chain.operator_namespace)
    assert operators.deployment["spec"]["replicas"] == 2, "the chart's default: two replicas"
    assert operators.env["MWMS_LEADER_ELECTION"] == "true"
    bound = operators.bound()
    # Both replicas run on the one node (the chart sets no anti-affinity), one of them holds the Lease.
    wait_for(operators.all_ready, timeout=180, what="two Ready operator replicas")
    holder = wait_for(lambda: operators.lease().get("holderIdentity"), timeout=60, what="a leader")
    (standby_pod,) = set(operators.pods()) - {pod_of(holder)}

    name, experiment = f"failover-{how}", f"failover-{how}-{node_namespace}"
    job = trainjob(
        name,
        REPLICAS,
        container=standin_container(node_trainer_image),
        env={"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "2"},
        trainer={"epochs": 20},  # ~40 s of run: the takeover happens inside it
        mlflow={"experiment": experiment},
    )
    watch = PodWatch(node_kubectl, node_namespace, name)
    url = node_chain.mlflow_pod_url()

    def status() -> dict:
        return node_kubectl.json("get", "trainjob", name, "-n", node_namespace).get("status") or {}

    def running_with_a_run() -> bool:
        try:
            return status().get("phase") == "Running" and bool(experiment_runs(url, experiment))
        except OSError:  # the experiment is not there yet (404)
            return False

    try:
        node_kubectl.apply(job, "-n", node_namespace)
        wait_for(running_with_a_run, timeout=300, interval=1, what="the job Running, its MLflow run open")
        leader = operators.pods()[pod_of(holder)]
        pid = operator_pid(real_node, leader)
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3] == [
            b"python",
            b"-m",
            b"mwms_operator",
        ]
        restarts = restart_count(leader)
        lost_at = time.time()
        os.kill(pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)  # no release of the Lease

        def led_again() -> tuple[str, float] | None:
            spec = operators.lease()
            if spec.get("holderIdentity") != holder:  # another process claimed the expired Lease
                return spec["holderIdentity"], micro_time(spec["acquireTime"]) - lost_at
            renewed = micro_time(spec["renewTime"])  # the killed pod's new process, the same identity
            return (holder, renewed - lost_at) if renewed > lost_at else None

        new_holder, takeover = wait_for(led_again, timeout=120, what="an operator to lead again")
        who = "the standby" if pod_of(new_holder) == standby_pod else "the restarted leader"
        print(f"takeover after {how}: {takeover:.2f} s by {who} ({new_holder}); bound {bound:g} s")
        assert takeover <= bound, f"{who} led {takeover:.2f} s after the {how}, over {bound:g} s"
        if how == "freeze":
            assert who == "the standby"
            os.kill(pid, signal.SIGKILL)  # kill -9 of the hung leader: it must come back as a standby
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what=f"process {pid} to be gone")
        wait_for(
            lambda: restart_count(operators.pods()[pod_of(holder)]) > restarts, timeout=60, what="restart"
        )

        def finished() -> str | None:
            phase = status().get("phase")
            return phase if phase in ("Succeeded", "Failed") else None

        assert wait_for(finished, timeout=300, interval=1, what="the job to end") == "Succeeded", status()
        # One leader: the Lease's holder is a live replica, and only it says it leads.
        wait_for(operators.all_ready, timeout=180, what="both replicas Ready again")
        leading = pod_of(operators.lease()["holderIdentity"])
        expected = {pod: float(pod == leading) for pod in operators.pods()}
        wait_for(lambda: operators.gauges() == expected, timeout=60, what=f"only {leading} leading")
    except Exception:
        print(operator_log())
        raise
    finally:
        early = watch.stop()
    assert not early, early
    assert watch.count >= REPLICAS
    assert watch.most <= REPLICAS, f"{watch.most} pods at once for {REPLICAS} replicas"
    assert len(watch.uids) == REPLICAS, f"pods recreated: {sorted(watch.uids)}"
    final = status()
    assert final.get("restarts", 0) == 0
    (run,) = experiment_runs(url, experiment)
    assert run["info"]["status"] == "FINISHED"
    assert final["mlflow"]["runId"] == run["info"]["run_id"]
