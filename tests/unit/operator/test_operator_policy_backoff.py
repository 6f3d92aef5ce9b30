"""The policy's counted group restarts: the first is immediate, the later ones back off like the kubelet's
CrashLoopBackOff (10 s doubling up to 5 minutes), and a disruption never waits."""

from datetime import timedelta

import pytest

from mwms_contract.status import format_time
from mwms_kit.decisions import T0, conditions, group, pod, running_status, spec, step
from mwms_operator.decide.job_status import CreatePods, DeletePods, next_due
from mwms_operator.decide.restarts import restart_backoff


def failed_group(restart):
    return [pod(0, restart=restart), pod(1, "Failed", restart=restart, exit_code=75), pod(2, restart=restart)]


def test_the_first_counted_restart_recreates_the_group_as_soon_as_the_old_one_is_gone():
    restarting = step(running_status(), failed_group(0), at=60)
    assert restarting.status["phase"] == "Restarting" and restarting.status["restarts"] == 1
    assert restarting.status["nextRestartTime"] is None, "nothing to wait for"
    assert next_due(spec(), restarting.status) is None
    assert "restarting all 3 workers now (restart 1 of at most 3)" in restarting.events[0].message
    leaving = [pod(0, deleting=True), pod(1, "Failed", exit_code=75), pod(2, deleting=True)]
    waiting = step(restarting.status, leaving, at=61)
    assert waiting.actions == (DeletePods(("mnist-worker-1",)),)
    # What the new group waits for is named (a pod stuck Terminating on a lost node shows here).
    running_condition = next(c for c in waiting.status["conditions"] if c["type"] == "Running")
    assert running_condition["reason"] == "WaitingForOldPods"
    assert all(f"mnist-worker-{i}" in running_condition["message"] for i in range(3))
    recreate = step(waiting.status, [], at=62)
    assert recreate.actions == (CreatePods((0, 1, 2), 1),)
    assert conditions(recreate)["Running"] != ("False", "RestartBackoff")
    assert recreate.status["groupStartTime"] == format_time(T0 + timedelta(seconds=62))
    pending = step(recreate.status, group(phase="Pending", restart=1), at=63)
    assert pending.status["phase"] == "Restarting" and pending.actions == ()
    running = step(pending.status, group(restart=1), at=64)
    assert running.status["phase"] == "Running" and running.status["restarts"] == 1
    assert conditions(running)["Restarting"][0] == "False"
    assert conditions(running)["Running"][0] == "True"


def test_the_second_counted_restart_waits_10_s_saying_so():
    first = step(running_status(), failed_group(0), at=60)
    again = step(first.status, [], at=61)
    running = step(step(again.status, group(restart=1), at=62).status, group(restart=1), at=63)
    second = step(running.status, failed_group(1), at=100)
    assert second.status["restarts"] == 2
    assert second.status["nextRestartTime"] == format_time(T0 + timedelta(seconds=110))
    assert next_due(spec(), second.status) == T0 + timedelta(seconds=110)
    assert "after a 10s back-off (restart 2 of at most 3)" in second.events[0].message
    backing_off = step(second.status, [], at=101)
    assert backing_off.actions == () and conditions(backing_off)["Running"] == ("False", "RestartBackoff")
    assert step(backing_off.status, [], at=109).actions == ()
    recreate = step(backing_off.status, [], at=110)
    assert recreate.actions == (CreatePods((0, 1, 2), 2),)
    assert recreate.status["nextRestartTime"] is None


@pytest.mark.parametrize(
    ("counted", "seconds"), [(1, 0), (2, 10), (3, 20), (4, 40), (6, 160), (7, 300), (30, 300)]
)
def test_counted_restarts_back_off_exponentially_up_to_5_minutes(counted, seconds):
    assert restart_backoff(counted) == seconds
    job = spec(runPolicy={"backoffLimit": 100})
    # Two earlier restarts were disruptions: they do not make the back-off longer.
    status = dict(running_status(), restarts=counted - 1 + 2, disruptions=2)
    d = step(status, failed_group(counted + 1), at=5, job=job)
    due = format_time(T0 + timedelta(seconds=5 + seconds)) if seconds else None
    assert d.status["nextRestartTime"] == due
    plan = f"after a {seconds}s back-off" if seconds else "now"
    assert f"{plan} (restart {counted} of at most 100)" in d.events[0].message
