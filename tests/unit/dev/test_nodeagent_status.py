"""Pod status as the node agent writes it (the kubelet's shape)."""

import pytest

from mwms_dev.nodeagent_status import (
    ContainerView,
    after_exit,
    backoff_seconds,
    conditions,
    pod_status,
    termination_message,
)


@pytest.mark.parametrize(
    ("policy", "code", "outcome"),
    [
        ("Never", 0, "Succeeded"),
        ("Never", 3, "Failed"),
        ("OnFailure", 0, "Succeeded"),
        ("OnFailure", 75, "restart"),
        ("Always", 0, "restart"),
        ("Always", 1, "restart"),
    ],
)
def test_after_exit(policy, code, outcome):
    assert after_exit(policy, code) == outcome


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_seconds(n, 10) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_termination_message_keeps_the_last_4_kib():
    data = b"a" * 5000 + b"END"
    msg = termination_message(data)
    assert len(msg) == 4096 and msg.endswith("END")


def test_conditions_keep_transition_times_of_unchanged_ones_and_foreign_conditions():
    first = conditions([], ready=False, completed=False, now="t1")
    assert {c["type"]: c["status"] for c in first} == {
        "PodScheduled": "True",
        "Initialized": "True",
        "ContainersReady": "False",
        "Ready": "False",
    }
    foreign = {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "t0"}
    second = conditions([*first, foreign], ready=True, completed=False, now="t2")
    by_type = {c["type"]: c for c in second}
    assert by_type["PodScheduled"]["lastTransitionTime"] == "t1"
    assert by_type["Ready"]["lastTransitionTime"] == "t2" and by_type["Ready"]["status"] == "True"
    assert by_type["DisruptionTarget"] == foreign


def test_running_pod_is_ready_and_terminated_one_is_not():
    running = ContainerView("trainer", "img", {"running": {"startedAt": "t"}}, restart_count=2)
    status = pod_status(
        {},
        phase="Running",
        pod_ip="10.200.0.2",
        host_ip="10.200.0.1",
        start_time="t0",
        container=running,
        now="t",
    )
    assert status["podIP"] == "10.200.0.2" and status["podIPs"] == [{"ip": "10.200.0.2"}]
    cs = status["containerStatuses"][0]
    assert cs["ready"] and cs["restartCount"] == 2 and cs["state"] == {"running": {"startedAt": "t"}}
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"

    done = ContainerView("trainer", "img", {"terminated": {"exitCode": 0, "reason": "Completed"}})
    status = pod_status(
        status,
        phase="Succeeded",
        pod_ip="10.200.0.2",
        host_ip="10.200.0.1",
        start_time="t0",
        container=done,
        now="t2",
    )
    ready = {c["type"]: c for c in status["conditions"]}["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "PodCompleted"
    assert not status["containerStatuses"][0]["ready"]


def test_pod_waiting_for_init_containers_is_not_initialized():
    init = ContainerView("setup", "img", {"running": {"startedAt": "t"}})
    main = ContainerView("trainer", "img", {"waiting": {"reason": "PodInitializing"}})
    status = pod_status(
        {}, phase="Pending", pod_ip="10.200.0.2", host_ip="10.200.0.1", start_time="t0", container=main,
        init_containers=[init], initialized=False, now="t",
    )  # fmt: skip
    initialized = {c["type"]: c for c in status["conditions"]}["Initialized"]
    assert (initialized["status"], initialized["reason"]) == ("False", "ContainersNotInitialized")
    assert status["initContainerStatuses"][0]["state"] == {"running": {"startedAt": "t"}}
    assert (
        pod_status({}, phase="Pending", pod_ip=None, host_ip="h", start_time="t", container=main, now="t")[
            "initContainerStatuses"
        ]
        is None
    )  # a merge patch with null leaves no stale list behind
