"""Two operator replicas, one leader: the Lease election (leader.py) against the real API server, logged in
as the operator's ServiceAccount (so its Role is what is tested too), and a failover of two real
`python -m mwms_operator` processes while a job runs."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from typing import Any

import kopf
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mwms_operator import k8s
from mwms_operator.config import Timing
from mwms_operator.leader import Elector

pytestmark = pytest.mark.integration

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


def renewing(elector: Elector) -> tuple[threading.Event, threading.Thread, list[bool]]:
    """The leader's renew loop in a thread; its result (False: it gave up) lands in the list."""
    stop, result = threading.Event(), []
    thread = threading.Thread(target=lambda: result.append(elector.keep_renewing(stop)), daemon=True)
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
    assert result == [True]  # it renewed until told to stop
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


def test_a_leader_that_cannot_renew_gives_up_within_the_renew_deadline(electors, kubectl, wait_for):
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
    assert result == [False]


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


def test_the_standby_takes_over_a_running_job_when_the_leader_is_killed(
    operator_kubeconfig, fresh_lease, start_operator, kubectl, make_standin, namespace, wait_for
):
    processes = start_two(start_operator)
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

        kubectl.apply(make_standin("failover", 2, env={"STANDIN_SLEEP_SECONDS": "45"}), "-n", namespace)

        def phase() -> str | None:
            return kubectl.json("get", "trainjob", "failover", "-n", namespace).get("status", {}).get("phase")

        def pods() -> dict[str, str]:
            items = kubectl.json("get", "pods", "-n", namespace, "-l", "mwms.dev/job-name=failover")["items"]
            return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}

        wait_for(lambda: phase() == "Running", timeout=120, what="the job to run")
        before = pods()
        assert len(before) == 2

        leader.kill()  # SIGKILL: no release; the standby must wait for the lease to expire
        wait_for(
            lambda: (metric(standby, "mwms_reconcile_duration_seconds_count") or 0) > 0,
            timeout=15 + 2 * 2 + 30,  # the lease duration, two retry periods, and a loaded 2-core box
            what="the standby to lead and reconcile",
        )
        assert leader_of(kubectl, processes) is standby
        assert metric(standby, "mwms_leader_election_master_status") == 1

        def finished() -> str | None:
            return phase() if phase() in ("Succeeded", "Failed") else None

        # Checked while the job still runs (the pods may go once it succeeds): the same pods, none recreated.
        assert pods() == before
        assert wait_for(finished, timeout=180, what="the job to finish") == "Succeeded"
        status = kubectl.json("get", "trainjob", "failover", "-n", namespace)["status"]
        assert status.get("restarts", 0) == 0
        after = pods()
        assert all(before[name] == uid for name, uid in after.items()), (before, after)
    finally:
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
