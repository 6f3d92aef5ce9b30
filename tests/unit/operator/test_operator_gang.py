"""Native gang scheduling (spec.scheduling.gang, Kubernetes' PodGroup API): which group gets a PodGroup, the
job that requires one where none is served, what the status says while a gang waits, the objects built, and
the reconciler's calls (the PodGroup first, then its workers; the API asked about rarely). The real scheduler
placing a gang: tests/node/test_node_gang.py and tests/scale/test_scale_gang.py."""

from __future__ import annotations

import asyncio

import pytest

from mwms_contract.trainjob import SpecError
from mwms_kit.decisions import META, T0, conditions, group, pod, running_status, spec, step
from mwms_kit.fake_kube import KEY, job_body
from mwms_operator.decide.job_status import CreatePods, DeletePodGroups
from mwms_operator.decide.policy import decide
from mwms_operator.kube.pod_groups import NOT_SERVED_FOR_SECONDS, SERVED_FOR_SECONDS, PodGroups
from mwms_operator.kube.refusals import ApiError, Refused
from mwms_operator.observe.pod_states import worker_pod
from mwms_operator.render.pod import build_worker_pod
from mwms_operator.render.pod_group import build_pod_group, pod_group_selector

REQUIRED = {"scheduling": {"gang": "Required"}}
# kube-scheduler 1.37's words on a gang of 3 with room for 2 (tests/scale/test_scale_gang.py sees them).
FITS = (
    "pod group is unschedulable, minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, pod group "
    "preemption: No preemption victims found for incoming preemptor"
)
MISFIT = "0/1 nodes are available: 1 Insufficient cpu."


def test_the_field_defaults_to_auto_and_a_bad_value_names_the_field():
    assert spec().gang == "Auto"
    assert spec(scheduling={"gang": "Off"}).gang == "Off"
    with pytest.raises(
        SpecError, match=r"spec.scheduling.gang: must be one of Auto, Required, Off, got 'on'"
    ):
        spec(scheduling={"gang": "on"})


@pytest.mark.parametrize(
    ("fields", "served", "gang"),
    [
        ({}, True, True),
        ({}, False, False),
        (REQUIRED, True, True),
        ({"scheduling": {"gang": "Off"}}, True, False),
        # The template's own scheduling group (a PodGroup the user made) is kept: no second one.
        ({"template": {"spec": {"schedulingGroup": {"podGroupName": "mine"}}}}, True, False),
    ],
)
def test_a_new_group_gets_a_pod_group_where_served_and_not_off(fields, served, gang):
    d = decide(META, spec(**fields), [], service_exists=True, now=T0, gang_served=served)
    assert d.actions == (CreatePods((0, 1, 2), 0, gang),)


def test_required_where_not_served_fails_before_any_worker_is_made():
    d = decide(META, spec(**REQUIRED), [], service_exists=True, now=T0)
    assert d.status["phase"] == "Failed" and d.rule == "gang-unavailable"
    assert conditions(d)["Failed"] == ("True", "GangSchedulingUnavailable")
    failed = next(c for c in d.status["conditions"] if c["type"] == "Failed")
    assert "spec.scheduling.gang is Required" in failed["message"]
    assert (
        "scheduling.k8s.io/v1beta1 podgroups" in failed["message"] and "GenericWorkload" in failed["message"]
    )
    assert not any(isinstance(a, CreatePods) for a in d.actions)


def test_required_leaves_a_running_group_alone_when_the_api_goes():
    d = decide(META, spec(**REQUIRED), group(), service_exists=True, now=T0, previous=running_status())
    assert d.status["phase"] == "Running"


def test_a_restart_deletes_the_old_groups_pod_groups_where_served():
    failed = [pod(0), pod(1, "Failed", exit_code=75), pod(2)]
    served = decide(META, spec(), failed, service_exists=True, now=T0, previous=running_status(),
                    gang_served=True)  # fmt: skip
    assert served.status["restarts"] == 1 and DeletePodGroups(keep=1) in served.actions
    not_served = decide(META, spec(), failed, service_exists=True, now=T0, previous=running_status())
    assert not any(isinstance(a, DeletePodGroups) for a in not_served.actions)


def test_a_waiting_gang_says_how_many_workers_fit_and_why_the_others_do_not():
    fits = {"waiting": f"Unschedulable: {FITS}", "gang_placed": 2}
    misfit = {"waiting": f"Unschedulable: {MISFIT}"}
    pods = [
        pod(i, "Pending", unschedulable=True, pod_group="mnist-0", **w)
        for i, w in enumerate([fits, fits, misfit])
    ]
    created = step(None, [], service=False).status
    d = decide(META, spec(), pods, service_exists=True, now=T0, previous=created, gang_served=True)
    running = next(c for c in d.status["conditions"] if c["type"] == "Running")
    assert running["reason"] == "WorkersPending"
    assert running["message"] == (
        "waiting for 3 of 3 workers to run: the scheduler places the 3 workers all at once or none (PodGroup "
        "mnist-0) and finds room for 2 of them (mnist-worker-2: Unschedulable: 0/1 nodes are available: 1 "
        "Insufficient cpu.)"
    )
    assert d.status.get("stalledSince") is None, "a wholly pending gang holds no node: no startup clock"


def test_the_scheduler_s_words_on_a_pod_are_read():
    body = {
        "metadata": {"name": "mnist-worker-0", "labels": {"mwms.dev/replica-index": "0"}},
        "spec": {"schedulingGroup": {"podGroupName": "mnist-0"}},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": FITS},
        ]},
    }  # fmt: skip
    found = worker_pod(body)
    assert found is not None and found.pod_group == "mnist-0" and found.gang_placed == 2
    body["status"]["conditions"][0]["message"] = MISFIT
    found = worker_pod(body)
    assert found is not None and found.gang_placed is None and found.unschedulable


def test_the_pod_group_is_a_gang_of_every_worker_owned_by_the_job():
    group_body = build_pod_group(
        job_name="mnist", namespace="team-a", uid="uid-1", restart_count=2, replicas=4
    )
    assert group_body["apiVersion"] == "scheduling.k8s.io/v1beta1" and group_body["kind"] == "PodGroup"
    assert group_body["metadata"]["name"] == "mnist-2"
    assert group_body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}
    (owner,) = group_body["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1" and owner["controller"] and owner["kind"] == "TrainJob"
    labels = group_body["metadata"]["labels"]
    assert labels["mwms.dev/job-uid"] == "uid-1" and labels["mwms.dev/restart"] == "2"
    assert pod_group_selector("uid-1", 2) == "mwms.dev/job-uid=uid-1,mwms.dev/restart!=2"
    worker = build_worker_pod(spec(), job_name="mnist", namespace="team-a", uid="uid-1", index=0, hosts=["h"],
                              restart_count=2, pod_group="mnist-2")  # fmt: skip
    assert worker["spec"]["schedulingGroup"] == {"podGroupName": "mnist-2"}
    plain = build_worker_pod(spec(), job_name="mnist", namespace="team-a", uid="uid-1", index=0, hosts=["h"],
                             restart_count=2)  # fmt: skip
    assert "schedulingGroup" not in plain["spec"]


def test_the_pod_group_is_made_before_its_workers_which_name_it(reconciler):
    kube = reconciler.kube
    kube.pod_groups_served = True
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    made = [name for name, _ in kube.calls if name in ("create_pod_group", "create_pod")]
    assert made == ["create_pod_group", "create_pod", "create_pod"]
    (group_body,) = kube.named("create_pod_group")
    assert group_body["metadata"]["name"] == "mnist-0"
    assert group_body["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2


def test_without_the_api_no_pod_group_is_made(reconciler):
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("create_pod_group") == []
    assert reconciler.kube.named("create_pod") == ["mnist-worker-0", "mnist-worker-1"]


def test_a_refused_pod_group_makes_no_worker_and_the_status_says_why(reconciler):
    kube = reconciler.kube
    kube.pod_groups_served = True
    kube.refuse_pod_groups = Refused('podgroups.scheduling.k8s.io is forbidden: User "op" cannot create')
    reconciler.job_event("ADDED", job_body())
    asyncio.run(reconciler.reconcile(KEY))
    assert kube.named("create_pod") == [] and "CreatePodsRefused" in kube.named("event")
    asyncio.run(reconciler.reconcile(KEY))
    running = next(c for c in reconciler.state.status(KEY)["conditions"] if c["type"] == "Running")
    assert running["reason"] == "CreatePodsRefused" and "podgroups" in running["message"]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_api_is_asked_about_once_and_again_only_when_the_answer_is_old(reconciler):
    kube, clock = reconciler.kube, Clock()
    api = PodGroups(kube, clock)
    assert asyncio.run(api.served()) is False
    clock.now = NOT_SERVED_FOR_SECONDS - 1
    assert asyncio.run(api.served()) is False and len(kube.named("serves")) == 1
    kube.pod_groups_served = True
    clock.now = NOT_SERVED_FOR_SECONDS
    assert asyncio.run(api.served()) is True and len(kube.named("serves")) == 2
    clock.now += SERVED_FOR_SECONDS - 1
    assert asyncio.run(api.served()) is True and len(kube.named("serves")) == 2
    assert kube.named("serves") == ["scheduling.k8s.io/v1beta1/podgroups"] * 2


def test_a_failed_look_keeps_the_last_answer_and_without_one_the_reconcile_is_retried(reconciler):
    kube, clock = reconciler.kube, Clock()
    api = PodGroups(kube, clock)

    def failing(api_version: str, plural: str) -> bool:
        raise ApiError(503, "the server is currently unable to handle the request")

    kube.serves = failing
    with pytest.raises(ApiError):
        asyncio.run(api.served())
    kube.serves = lambda api_version, plural: True
    assert asyncio.run(api.served()) is True
    kube.serves = failing
    clock.now = SERVED_FOR_SECONDS
    assert asyncio.run(api.served()) is True
