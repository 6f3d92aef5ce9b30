"""Two operator replicas, one leader: the Lease election (leader.py) against the real API server, logged in
as the operator's ServiceAccount (so its Role is what is tested too), and a failover of two real
`python -m mwms_operator` processes while a job runs (and its MLflow run is open)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwms_operator.kube import client as k8s
from mwms_operator.kube.leader import Elector, LeaseLost, Timing

OPERATOR_NAMESPACE = "mwms-system"
LEASE = "mwms-operator-leader"  # the one Lease the operator's Role lets it get and update
FAST = Timing(lease_duration=3, renew_deadline=2, retry_period=0.5)
ELECTION_ENV = {"MWMS_LEADER_ELECTION": "true", "MWMS_LEADER_ELECTION_NAMESPACE": OPERATOR_NAMESPACE}


@pytest.fixture
def fresh_lease(kubectl):
    """No Lease before and after a test (the operator's Role allows one name only, so tests share it)."""
    kubectl("delete", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found")
    yield
    kubectl("delete", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found")


@pytest.fixture
def electors(operator_kubeconfig, fresh_lease, monkeypatch):
    """`electors(n)`: n Electors, each with its own client, as the operator's ServiceAccount."""
    monkeypatch.setenv("KUBECONFIG", str(operator_kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    settings = kopf.OperatorSettings()

    def make(count: int) -> list[Elector]:
        return [
            Elector(k8s.Kube.connect(settings), OPERATOR_NAMESPACE, f"replica-{i}", FAST, LEASE)
            for i in range(count)
        ]

    return make


def lease_spec(kubectl) -> dict[str, Any]:
    return kubectl.json("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)["spec"]


def renewing(elector: Elector) -> tuple[threading.Event, threading.Thread, list[Any]]:
    """The leader's renew loop in a thread; what ends it (None: `stop`; else the LeaseLost or error that
    ends the leadership) lands in the list."""
    stop, result = threading.Event(), []

    def renew() -> None:
        try:
            result.append(elector.keep_renewing(stop))
        except Exception as error:
            result.append(error)

    thread = threading.Thread(target=renew, daemon=True)
    thread.start()
    return stop, thread, result


def test_of_two_electors_one_leads_and_the_other_waits_while_it_renews(electors, kubectl):
    first, second = electors(2)
    assert first.try_acquire_or_renew()
    stop, thread, result = renewing(first)
    try:
        # For two lease durations the standby tries every retry period and never leads.
        until = time.monotonic() + 2 * FAST.lease_duration
        while time.monotonic() < until:
            assert not second.try_acquire_or_renew()
            assert lease_spec(kubectl)["holderIdentity"] == "replica-0"
            threading.Event().wait(FAST.retry_period)
    finally:
        stop.set()
        thread.join()
    assert result == [None]  # it renewed until told to stop
    assert lease_spec(kubectl)["leaseTransitions"] == 1


def test_a_write_from_a_stale_read_is_refused(electors, kubectl):
    """Optimistic concurrency: of two replicas that read the same version, only the first write wins."""
    (elector,) = electors(1)
    assert elector.try_acquire_or_renew()
    stale = kubectl.json("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE)
    assert elector.try_acquire_or_renew()  # a renewal: a new resourceVersion
    stale["spec"]["holderIdentity"] = "intruder"
    assert not elector.kube.update_lease(OPERATOR_NAMESPACE, stale, timeout=5)
    assert lease_spec(kubectl)["holderIdentity"] == "replica-0"


def test_when_the_leader_stops_renewing_the_other_takes_over_once_the_lease_expires(
    electors, kubectl, wait_for
):
    leader, standby = electors(2)
    assert leader.try_acquire_or_renew()  # and then nothing more: it died
    assert not standby.try_acquire_or_renew()  # it sees the Lease held, and starts its own clock
    seen = time.monotonic()
    stop, led = threading.Event(), []
    thread = threading.Thread(target=lambda: led.append(standby.acquire(stop)), daemon=True)
    thread.start()
    try:
        wait_for(lambda: led, timeout=FAST.lease_duration * 5, what="the standby to take the expired Lease")
    finally:
        stop.set()
        thread.join()
    assert led == [True]
    # Not before the lease had expired on the standby's own clock (client-go's rule, not the renewTime).
    assert time.monotonic() - seen >= FAST.lease_duration
    spec = lease_spec(kubectl)
    assert spec["holderIdentity"] == "replica-1" and spec["leaseTransitions"] == 2


def test_a_released_lease_is_taken_at_once(electors, kubectl):
    leader, standby = electors(2)
    assert leader.try_acquire_or_renew()
    assert not standby.try_acquire_or_renew()
    assert leader.release()
    assert not lease_spec(kubectl).get("holderIdentity")
    assert standby.try_acquire_or_renew()  # its very next try, without waiting for the lease duration
    assert lease_spec(kubectl)["holderIdentity"] == "replica-1"
    assert not leader.release()  # no longer its Lease: nothing to give up


def test_a_leader_that_sees_another_holder_gives_up_at_once(electors, kubectl, wait_for):
    (leader,) = electors(1)
    assert leader.try_acquire_or_renew()
    stop, thread, result = renewing(leader)
    try:
        # Someone else writes the Lease (as a partition would make it look): every renewal now fails.
        kubectl(
            "patch", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "--type=merge",
            "-p", '{"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 3600}}',
        )  # fmt: skip
        wait_for(lambda: result, timeout=FAST.renew_deadline * 5, what="the leader to give up")
    finally:
        stop.set()
        thread.join()
    (lost,) = result
    assert isinstance(lost, LeaseLost) and "held by intruder" in str(lost)


# -- two real operator processes ------------------------------------------------------------------------


def metric(process: Any, name: str) -> float | None:
    """The sum of a metric's samples on the process's /metrics (None while it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def kopf_serves(process: Any) -> bool:
    """The liveness endpoint is kopf's (the standby's own says so), so kopf runs and handles SIGTERM."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{process.health_port}/healthz", timeout=5) as answer:
            return b"standby" not in answer.read()
    except OSError:
        return False


def holder(kubectl) -> str:
    jsonpath = "jsonpath={.spec.holderIdentity}"
    found = kubectl("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", jsonpath, check=False)
    return found.stdout.strip() if found.returncode == 0 else ""


def identity(process: Any) -> str:
    return f"{socket.gethostname()}_{process.process.pid}"


def leader_of(kubectl, processes: list[Any]) -> Any:
    """The process whose identity (`<host>_<pid>`) holds the Lease."""
    held = holder(kubectl)
    return next((p for p in processes if p.process is not None and identity(p) == held), None)


def start_two(start_operator) -> list[Any]:
    return [start_operator("mwms-operator", OPERATOR_NAMESPACE, ELECTION_ENV) for _ in range(2)]


class PodSampler:
    """Lists a job's pods every half second in a thread: the most seen at once, and every uid seen."""

    def __init__(self, kubectl: Any, namespace: str, job: str) -> None:
        self.kubectl, self.namespace, self.job = kubectl, namespace, job
        self.most, self.samples = 0, 0
        self.uids: set[str] = set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.done.wait(0.5):
            found = self.kubectl(
                "get", "pods", "-n", self.namespace, "-l", f"mwms.dev/job-name={self.job}", "-o",
                "jsonpath={.items[*].metadata.uid}", check=False,
            )  # fmt: skip
            if found.returncode == 0:
                uids = found.stdout.split()
                self.most, self.samples = max(self.most, len(uids)), self.samples + 1
                self.uids.update(uids)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def parse_micro_time(value: str) -> float:
    """A Lease's MicroTime (`2026-12-05T08:00:00.123456Z`) as seconds since the epoch."""
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def test_the_standby_takes_over_a_running_job_when_the_leader_is_killed(
    operator_kubeconfig, fresh_lease, start_operator, kubectl, make_standin, namespace, mlflow_uri, wait_for
):
    """kill -9 of the leader mid-run, at the chart's default timings: the standby leads within the lease
    duration plus a retry period, never two operators act on the job (no pod beyond its replicas, none
    recreated), and the job ends with one MLflow run."""
    import mlflow  # (heavy: only for this test)

    timing = Timing()  # the defaults, as the chart's
    env = {**ELECTION_ENV, "MWMS_ALLOWED_TRACKING_URIS": mlflow_uri}
    processes = [start_operator("mwms-operator", OPERATOR_NAMESPACE, env) for _ in range(2)]
    sampler = None
    try:
        leader = wait_for(lambda: leader_of(kubectl, processes), timeout=60, what="one operator to lead")
        (standby,) = [p for p in processes if p is not leader]
        wait_for(
            lambda: [metric(p, "mwms_leader_election_master_status") for p in (standby, leader)] == [0, 1],
            timeout=60,
            what="the leader gauge: 1 on the leader, 0 on the standby",
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{standby.health_port}/healthz", timeout=5) as health:
            assert health.status == 200  # the standby is alive (liveness) without running kopf
        assert not metric(standby, "mwms_reconcile_duration_seconds_count")  # a standby reconciles nothing

        experiment = f"failover-{namespace}"
        job = make_standin(
            "failover",
            2,
            env={"STANDIN_MLFLOW": "1", "STANDIN_EPOCH_SECONDS": "2"},
            trainer={"epochs": 20},  # ~40 s of run: the takeover happens inside it
            mlflow={"trackingUri": mlflow_uri, "experiment": experiment},
        )
        kubectl.apply(job, "-n", namespace)
        sampler = PodSampler(kubectl, namespace, "failover")

        def phase() -> str | None:
            return kubectl.json("get", "trainjob", "failover", "-n", namespace).get("status", {}).get("phase")

        client = mlflow.MlflowClient(mlflow_uri)

        def runs() -> list[Any]:
            found = client.get_experiment_by_name(experiment)
            return client.search_runs([found.experiment_id]) if found is not None else []

        wait_for(lambda: phase() == "Running" and runs(), timeout=180, what="the job's MLflow run to start")

        killed_at = time.time()
        leader.kill()  # SIGKILL: no release; the standby must wait for the lease to expire
        wait_for(lambda: leader_of(kubectl, processes) is standby, timeout=60, what="the standby to lead")
        # The standby wrote acquireTime from its clock as it claimed the Lease (same machine as killed_at).
        takeover = parse_micro_time(lease_spec(kubectl)["acquireTime"]) - killed_at
        assert takeover <= timing.lease_duration + timing.retry_period, f"takeover took {takeover:.2f} s"
        wait_for(
            lambda: (metric(standby, "mwms_reconcile_duration_seconds_count") or 0) > 0,
            timeout=60,
            what="the standby to reconcile",
        )
        assert metric(standby, "mwms_leader_election_master_status") == 1

        def finished() -> str | None:
            return phase() if phase() in ("Succeeded", "Failed") else None

        assert wait_for(finished, timeout=240, what="the job to finish") == "Succeeded"
        sampler.stop()
        assert sampler.samples > 0
        assert sampler.most <= 2, f"{sampler.most} pods at once for 2 replicas"
        assert len(sampler.uids) == 2, f"pods recreated: {sorted(sampler.uids)}"
        status = kubectl.json("get", "trainjob", "failover", "-n", namespace)["status"]
        assert status.get("restarts", 0) == 0
        (run,) = runs()
        assert run.info.status == "FINISHED"
        assert status["mlflow"]["runId"] == run.info.run_id
    finally:
        if sampler is not None:
            sampler.stop()
        for process in processes:
            process.stop()  # (start_operator stops them too; here, so that the logs are complete)
    log = standby.log()
    assert "leads (Lease" in log
    denied = [line for line in log.splitlines() if "forbidden: User" in line]
    assert not denied, "\n".join(denied[:20])


def test_a_stopped_leader_hands_over_at_once(
    operator_kubeconfig, fresh_lease, start_operator, kubectl, wait_for
):
    """SIGTERM (a rolling update, a drain): the leader releases the Lease as it exits, so the standby leads
    at its next try instead of after the lease duration."""
    processes = start_two(start_operator)
    leader = wait_for(lambda: leader_of(kubectl, processes), timeout=60, what="one operator to lead")
    (standby,) = [p for p in processes if p is not leader]
    wait_for(
        lambda: (
            [metric(p, "mwms_leader_election_master_status") for p in (standby, leader)] == [0, 1]
            and kopf_serves(leader)
        ),
        timeout=60,
        what="the standby to wait and the leader to run kopf",
    )
    leader_process = leader.process
    standby_identity = identity(standby)
    leader.stop()  # SIGTERM, then it waits for the exit
    assert leader_process.returncode == 0
    assert "released the Lease" in leader.log()
    # The old holder is gone from the Lease as soon as it has exited; the standby's next try takes it.
    assert holder(kubectl) in ("", standby_identity)
    wait_for(lambda: holder(kubectl) == standby_identity, timeout=30, what="the standby to lead")
