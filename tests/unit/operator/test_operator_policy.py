"""The policy, walked through every transition of a TrainJob's life, and its rule table rule by rule."""

import dataclasses
from datetime import timedelta

import pytest

from mwms_contract import conditions as contract
from mwms_contract.status import format_time
from mwms_contract.trainjob import SpecError
from mwms_kit.decisions import EVICTED, META, RUN, T0, conditions, group, pod, running_status, spec, step
from mwms_operator.decide.job_status import (
    CreatePods,
    CreateService,
    DeleteJob,
    DeletePods,
    KeepPostmortem,
    unlisted_status,
)
from mwms_operator.decide.policy import RULES, decide
from mwms_operator.observe.findings import CreationRefused


def test_a_new_job_gets_its_service_and_every_pod():
    d = step(None, [], service=False)
    assert d.actions == (CreateService(), CreatePods((0, 1, 2), 0))
    assert d.status["phase"] == "Pending"
    assert d.status["startTime"] == d.status["groupStartTime"] == format_time(T0)
    assert d.status["chiefPod"] == "mnist-worker-0" and d.status["restarts"] == 0
    assert d.status["observedGeneration"] == 1
    assert [e.reason for e in d.events] == [], "the creation's PodsCreated event says it, naming the pods"


def test_only_missing_pods_are_created_after_a_partial_create():
    first = step(None, [], service=False)
    d = step(first.status, [pod(0, "Pending")], at=1)
    assert d.actions == (CreatePods((1, 2), 0),)
    assert d.status["groupStartTime"] == first.status["groupStartTime"]


def test_all_pods_created_sets_created_then_running():
    first = step(None, [], service=False)
    created = step(first.status, group(phase="Pending"), at=1)
    assert created.actions == () and created.all_pods_created
    assert created.events == (), "the handler posts PodsCreated naming the pods; no second event"
    assert conditions(created) == {"Created": ("True", "PodsCreated"), "Running": ("False", "WorkersPending")}
    assert created.status["replicaStatuses"] == {"active": 3, "ready": 0, "succeeded": 0, "failed": 0}
    running = step(created.status, group(), at=2)
    assert running.status["phase"] == "Running" and not running.all_pods_created
    assert conditions(running)["Running"] == ("True", "AllWorkersRunning")
    assert [e.reason for e in running.events] == ["AllWorkersRunning"]


def test_a_steady_state_changes_nothing_and_keeps_transition_times():
    status = running_status()
    again = step(status, group(), at=30)
    assert again.actions == () and again.events == ()
    assert again.status["conditions"] == status["conditions"]


def test_a_job_told_its_namespace_was_unlisted_is_told_once_the_operator_lists_it():
    """An operator restarted with the rights to list the namespace decides the job again: the condition its
    predecessor wrote (NamespaceUnlisted=True) turns False, the job's other conditions as they were."""
    status = running_status()
    told = unlisted_status({"metadata": {"generation": 1}, "status": status}, "could not list", T0)
    again = step({**status, **told}, group(), at=30)
    assert conditions(again)["NamespaceUnlisted"] == ("False", "NamespaceListed")
    assert conditions(again)["Running"] == ("True", "AllWorkersRunning")
    assert step(status, group(), at=30).status["conditions"] == status["conditions"], (
        "never told: no condition"
    )


def test_chief_exit_0_succeeds_with_the_mlflow_run_and_cleans_running_pods():
    status = running_status()
    pods = [pod(0, "Succeeded", exit_code=0, message=RUN), pod(1, "Succeeded", exit_code=0), pod(2)]
    d = step(status, pods, at=60)
    assert d.status["phase"] == "Succeeded"
    assert d.status["mlflow"] == {
        "runId": "r123",
        "experimentId": "7",
        "modelUri": "models:/m/1",
        "trackingUri": "http://mlflow:5000",
    }
    assert d.status["completionTime"] == format_time(T0 + timedelta(seconds=60))
    assert conditions(d)["Succeeded"] == ("True", "ChiefSucceeded")
    assert conditions(d)["Running"][0] == "False"
    # The group's post-mortem is read first, before its pods are deleted.
    assert d.actions == (KeepPostmortem(0), DeletePods(("mnist-worker-2",)))
    assert "r123" in d.events[0].message


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("Running", ("mnist-worker-2",)),
        ("All", ("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
        ("None", ()),
    ],
)
def test_clean_pod_policy(policy, deleted):
    job = spec(runPolicy={"cleanPodPolicy": policy})
    pods = [pod(0, "Succeeded", exit_code=0), pod(1, "Succeeded", exit_code=0), pod(2)]
    d = step(running_status(), pods, at=60, job=job)
    assert d.actions == (KeepPostmortem(0), *((DeletePods(deleted),) if deleted else ()))


def test_ttl_deletes_the_finished_job_only_when_due():
    job = spec(runPolicy={"ttlSecondsAfterFinished": 30})
    done = step(running_status(), [pod(0, "Succeeded", exit_code=0)], at=60, job=job)
    assert step(done.status, [], at=89, job=job).actions == ()
    late = step(done.status, [], at=90, job=job)
    assert late.actions == (DeleteJob(),)
    assert late.status["phase"] == "Succeeded"


def test_finished_jobs_stay_finished():
    done = step(running_status(), [pod(0, "Succeeded", exit_code=0)], at=60)
    after = step(done.status, [], at=61)
    assert after.status["phase"] == "Succeeded" and after.actions == () and after.events == ()


@pytest.mark.parametrize(
    ("failed", "why"),
    [
        (dict(exit_code=75, message="peer lost"), "exited with code 75: peer lost"),
        (dict(exit_code=137, reason="OOMKilled"), "exited with code 137 (OOMKilled)"),
        (dict(reason="Evicted"), "failed (Evicted)"),
    ],
)
def test_a_retryable_failure_restarts_the_whole_group(failed, why):
    status = running_status()
    pods = [pod(0), pod(1, "Failed", **failed), pod(2)]
    d = step(status, pods, at=60)
    assert d.status["phase"] == "Restarting" and d.status["restarts"] == 1
    assert d.actions == (
        KeepPostmortem(0),
        DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
    )
    assert conditions(d)["Restarting"] == ("True", "GroupRestarting")
    assert conditions(d)["Running"] == ("False", "GroupRestarting")
    assert why in d.status["conditions"][-1]["message"] or any(
        why in c["message"] for c in d.status["conditions"]
    )
    assert d.events[0].type == "Warning" and "mnist-worker-1" in d.events[0].message


def test_a_pod_deleted_while_running_restarts_the_group():
    d = step(running_status(), [pod(0), pod(2)], at=60)
    assert d.status["phase"] == "Restarting" and "mnist-worker-1 was deleted" in d.events[0].message
    d = step(running_status(), [pod(0), pod(1, deleting=True), pod(2)], at=60)
    assert d.status["phase"] == "Restarting"


def test_a_permanent_exit_fails_at_once_naming_worker_code_and_message():
    pods = [
        pod(0, "Failed", exit_code=75),
        pod(1),
        pod(2, "Failed", exit_code=2, message="epochs must be >= 1"),
    ]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Failed"
    assert conditions(d)["Failed"] == ("True", "WorkerFailed")
    message = next(c["message"] for c in d.status["conditions"] if c["type"] == "Failed")
    assert message == "worker mnist-worker-2 exited with code 2: epochs must be >= 1"
    assert d.actions == (KeepPostmortem(0), DeletePods(("mnist-worker-1",)))


def test_backoff_exhausted_fails():
    job = spec(runPolicy={"backoffLimit": 1})
    status = dict(running_status(), restarts=1)
    d = step(
        status,
        [pod(0, restart=1), pod(1, "Failed", restart=1, exit_code=75), pod(2, restart=1)],
        at=60,
        job=job,
    )
    assert conditions(d)["Failed"] == ("True", "BackoffLimitExceeded")
    assert (
        "restarted 1 times" in d.events[0].message
        and "mnist-worker-1 exited with code 75" in d.events[0].message
    )


def test_backoff_limit_0_fails_on_the_first_retryable_failure():
    job = spec(runPolicy={"backoffLimit": 0})
    d = step(running_status(), [pod(0), pod(1, "Failed", exit_code=75), pod(2)], at=60, job=job)
    assert d.status["phase"] == "Failed"


def test_suspend_deletes_pods_and_resume_recreates_them_after_they_are_gone():
    suspended_job = spec(runPolicy={"suspend": True})
    d = step(running_status(), group(), at=60, job=suspended_job)
    assert d.status["phase"] == "Suspended" and d.status["startTime"] is None
    assert d.actions == (DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),)
    assert conditions(d)["Suspended"] == ("True", "Suspended") and conditions(d)["Running"][0] == "False"
    still = step(d.status, [pod(0, deleting=True)], at=61, job=suspended_job)
    assert still.actions == () and still.events == ()
    # Resumed while a pod is still going away: wait, do not count it as a lost worker.
    wait = step(still.status, [pod(0, deleting=True)], at=62)
    assert wait.actions == () and wait.status["phase"] == "Suspended"
    resumed = step(wait.status, [], at=63)
    assert resumed.actions == (CreatePods((0, 1, 2), 0),)
    assert resumed.status["phase"] == "Pending" and resumed.status["startTime"] == format_time(
        T0 + timedelta(seconds=63)
    )
    assert conditions(resumed)["Suspended"] == ("False", "Resumed")


def test_suspend_before_start_creates_nothing():
    d = step(None, [], job=spec(runPolicy={"suspend": True}), service=False)
    assert d.status["phase"] == "Suspended" and d.actions == ()


def test_deadline_fails_and_removes_pods_whatever_the_clean_policy():
    job = spec(runPolicy={"activeDeadlineSeconds": 100, "cleanPodPolicy": "None"})
    status = running_status()
    assert step(status, group(), at=99, job=job).status["phase"] == "Running"
    d = step(status, group(), at=100, job=job)
    assert conditions(d)["Failed"] == ("True", "DeadlineExceeded")
    assert d.actions == (
        KeepPostmortem(0),
        DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
    )


def test_an_invalid_spec_fails_with_a_warning_and_creates_nothing():
    error = SpecError("spec.template.spec.containers[0].env[0].name", "TF_CONFIG is set by the operator")
    d = decide(META, error, [], service_exists=False, now=T0, previous=None)
    assert d.status["phase"] == "Failed" and d.actions == ()
    assert conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert d.events[0].type == "Warning" and "containers[0].env[0].name" in d.events[0].message


def test_pods_of_an_older_group_are_deleted_before_creating():
    status = dict(running_status(), restarts=2, phase="Restarting")
    d = step(status, [pod(0, restart=1)], at=5)
    assert d.actions == (DeletePods(("mnist-worker-0",)),)


def test_created_is_set_even_when_the_first_look_finds_the_job_done():
    first = step(None, [], service=False)
    done = step(
        first.status, [pod(0, "Succeeded", exit_code=0, message=RUN)] + group(3, "Succeeded")[1:], at=1
    )
    assert conditions(done)["Created"] == ("True", "PodsCreated") and done.all_pods_created
    assert done.status["phase"] == "Succeeded"


def test_a_refused_worker_object_fails_the_job_as_an_invalid_spec_naming_the_servers_message():
    first = step(None, [], service=False)
    d = decide(
        META, spec(), [], service_exists=True, now=T0, previous=first.status,
        refused="Pod is invalid: spec.containers[0].imagePullPolicy: Unsupported value",
    )  # fmt: skip
    assert d.status["phase"] == "Failed" and conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert "the API server refused" in d.events[0].message and "imagePullPolicy" in d.events[0].message
    assert not any(isinstance(a, CreatePods) for a in d.actions)


QUOTA_REFUSAL = CreationRefused(
    'pods "mnist-worker-1" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1',
    tries=2,
    next_try=T0 + timedelta(seconds=4),
    wait_seconds=4.0,
)


def test_a_creation_refused_for_now_keeps_no_pod_and_says_why_in_the_running_condition():
    first = step(None, [], service=False)
    partial = [pod(0, "Pending"), pod(1, "Pending", deleting=True)]  # the handler deletes a partial group
    d = decide(META, spec(), partial, service_exists=True, now=T0, previous=first.status,
               creation_refused=QUOTA_REFUSAL)  # fmt: skip
    assert d.rule == "creation-refused"
    assert d.actions == (DeletePods(("mnist-worker-0",)),)
    assert d.status["phase"] == "Pending" and d.status["restarts"] == 0, "a refusal is not a lost worker"
    running = next(c for c in d.status["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "CreatePodsRefused")
    assert "exceeded quota" in running["message"] and "2 tries" in running["message"]
    assert "next try at 2026-12-02T10:00:04Z" in running["message"]


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("WebhookUnavailable", "an admission webhook the workers need could not be called"),
        ("ApiServerThrottled", "the API server asked the operator to slow down (429)"),
        ("ApiServerError", "the API server failed to create the workers"),
        ("NameConflict", "a name the job needs is taken"),
    ],
)
def test_each_kind_of_refusal_is_its_own_reason_in_the_running_condition(reason, says):
    first = step(None, [], service=False)
    refusal = dataclasses.replace(QUOTA_REFUSAL, message="the server's message", reason=reason)
    d = decide(META, spec(), [], service_exists=True, now=T0, previous=first.status, creation_refused=refusal)
    running = next(c for c in d.status["conditions"] if c["type"] == "Running")
    assert (d.rule, d.status["phase"], running["reason"]) == ("creation-refused", "Pending", reason)
    assert running["message"].startswith(f"{says} (2 tries): the server's message;")


def test_a_refused_service_never_removes_a_whole_group_that_runs():
    """A running job's Service deleted, its name taken or its re-creation refused by a 5xx: the workers are
    already connected, so they keep running and the Service is asked for again."""
    refusal = dataclasses.replace(QUOTA_REFUSAL, reason="NameConflict")
    d = decide(META, spec(), group(), service_exists=False, now=T0, previous=running_status(),
               creation_refused=refusal)  # fmt: skip
    assert d.status["phase"] == "Running" and d.actions == (CreateService(),)


def test_once_the_next_try_is_due_and_no_pod_is_left_the_whole_group_is_created_again():
    first = step(None, [], service=False)
    due = CreationRefused("exceeded quota", 2, T0, wait_seconds=0.0)
    waiting = decide(META, spec(), [pod(1, "Pending", deleting=True)], service_exists=True, now=T0,
                     previous=first.status, creation_refused=due)  # fmt: skip
    assert waiting.rule == "creation-refused" and waiting.actions == ()
    later = T0 + timedelta(seconds=400)  # past the startup timeout: the wait for the quota does not count
    d = decide(META, spec(), [], service_exists=True, now=later, previous=first.status, creation_refused=due)
    assert d.actions == (CreatePods((0, 1, 2), 0),)
    assert d.status["groupStartTime"] == format_time(later) and d.status["phase"] == "Pending"


TEMPLATE_ERROR = SpecError("spec.template.spec.containers[0].env[0].name", "TF_CONFIG is set by the operator")


def test_an_invalid_template_edit_leaves_the_running_group_alone_and_says_why():
    running = running_status()
    d = decide(META, spec(), group(), service_exists=True, now=T0, previous=running,
               template_error=TEMPLATE_ERROR)  # fmt: skip
    assert d.status["phase"] == "Running" and d.actions == ()
    accepted = next(c for c in d.status["conditions"] if c["type"] == "TemplateAccepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidSpec")
    assert "spec.template.spec.containers[0].env[0].name" in accepted["message"]
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "InvalidSpec")]
    again = decide(META, spec(), group(), service_exists=True, now=T0, previous=d.status,
                   template_error=TEMPLATE_ERROR)  # fmt: skip
    assert again.events == (), "said once"
    fixed = decide(META, spec(), group(), service_exists=True, now=T0, previous=d.status)
    assert conditions(fixed)["TemplateAccepted"] == ("True", "TemplateValid")


def test_the_next_group_is_not_made_from_an_invalid_template():
    running = running_status()
    restarting = decide(META, spec(), [pod(0), pod(1, "Failed", exit_code=75), pod(2)], service_exists=True,
                        now=T0, previous=running, template_error=TEMPLATE_ERROR)  # fmt: skip
    assert restarting.status["phase"] == "Restarting"
    d = decide(META, spec(), [], service_exists=True, now=T0, previous=restarting.status,
               template_error=TEMPLATE_ERROR)  # fmt: skip
    assert d.status["phase"] == "Failed" and conditions(d)["Failed"] == ("True", "InvalidSpec")
    assert not any(isinstance(a, CreatePods) for a in d.actions)


def _rule_cases():
    running = running_status()
    pending = step(None, [], service=False).status
    return {
        "finished": (dict(running, phase="Succeeded", completionTime=format_time(T0)), group(), {}),
        "invalid-spec": (None, [], {"job": SpecError("spec.replicas", "is required")}),
        "refused": (pending, [], {"refused": "Pod is invalid"}),
        "creation-refused": (pending, [pod(0, "Pending")], {"creation_refused": QUOTA_REFUSAL}),
        "suspended": (running, group(), {"job": spec(runPolicy={"suspend": True})}),
        "chief-succeeded": (running, [pod(0, "Succeeded", message=RUN), pod(1), pod(2)], {}),
        "deadline-exceeded": (
            running,
            group(),
            {"job": spec(runPolicy={"activeDeadlineSeconds": 1}), "at": 99},
        ),
        "worker-failed": (running, [pod(0), pod(1, "Failed", exit_code=2), pod(2)], {}),
        "disrupted-restart": (
            running,
            [pod(0), pod(1, "Failed", exit_code=137, disruption=EVICTED), pod(2)],
            {},
        ),
        "backoff-limit-exceeded": (
            running,
            [pod(0), pod(1, "Failed", exit_code=75), pod(2)],
            {"job": spec(runPolicy={"backoffLimit": 0})},
        ),
        "group-restart": (running, [pod(0), pod(1, "Failed", exit_code=75), pod(2)], {}),
        "old-pods-leaving": (dict(running, restarts=1, phase="Restarting"), group(), {}),
        "template-invalid": (pending, [], {"template_error": TEMPLATE_ERROR}),
        "gang-unavailable": (pending, [], {"job": spec(scheduling={"gang": "Required"})}),
        "create-missing": (None, [], {}),
        "all-running": (pending, group(), {}),
        "restart-backoff": (
            dict(
                running,
                restarts=1,
                phase="Restarting",
                nextRestartTime=format_time(T0 + timedelta(seconds=60)),
            ),
            [],
            {},
        ),
        "container-error": (pending, [pod(0), pod(1), pod(2, "Pending", container_error=BAD_IMAGE)], {}),
        "startup-timeout": (
            dict(pending, stalledSince=format_time(T0)),
            [pod(0), pod(1), pod(2, "Pending", unschedulable=True)],
            {"at": 10_000},
        ),
        "workers-pending": (pending, group(phase="Pending"), {}),
    }


BAD_IMAGE = ("InvalidImageName", "container trainer: InvalidImageName: bad")


def _decide_case(name):
    previous, pods, options = _rule_cases()[name]
    at, job, refused = options.get("at", 5), options.get("job") or spec(), options.get("refused")
    return decide(META, job, pods, service_exists=True, now=T0 + timedelta(seconds=at), previous=previous,
                  refused=refused, creation_refused=options.get("creation_refused"),
                  template_error=options.get("template_error"))  # fmt: skip


@pytest.mark.parametrize("name", [name for name, _ in RULES])
def test_each_rule_decides_its_case(name):
    assert _decide_case(name).rule == name


def test_every_rule_has_a_case():
    assert sorted(name for name, _ in RULES) == sorted(_rule_cases())


@pytest.mark.parametrize("name", [name for name, _ in RULES])
def test_each_rule_says_only_reasons_of_the_contract(name):
    d = _decide_case(name)
    said = {c["reason"] for c in d.status["conditions"]} | {e.reason for e in d.events}
    assert said - set(contract.REASONS) == set()


def test_a_settled_job_keeps_no_books():
    """The bookkeeping (Created, TemplateAccepted, the startup clocks) runs only for a live job: a finished
    one with a worker still running and a peer that never joined starts no clock and gains no condition."""
    finished = dict(running_status(), phase="Failed", completionTime=format_time(T0), stalledSince=None)
    pods = [pod(0), pod(1, trainer_unready=True), pod(2, "Pending", container_error=BAD_IMAGE)]
    d = decide(META, spec(cleanPodPolicy="None"), pods, service_exists=True, now=T0, previous=finished,
               template_error=TEMPLATE_ERROR)  # fmt: skip
    assert d.rule == "finished"
    assert d.status["stalledSince"] is None and d.status["containerErrorSince"] is None
    assert "TemplateAccepted" not in conditions(d) and d.events == ()


def test_a_disruption_restarts_the_group_at_once_without_spending_the_backoff_limit():
    job = spec(runPolicy={"backoffLimit": 0})
    status = running_status()
    for n in range(1, 4):  # evicted again and again: never fails the job
        pods = [pod(i, restart=n - 1) for i in range(3)]
        pods[1] = pod(1, restart=n - 1, deleting=True, disruption=EVICTED)
        d = step(status, pods, at=60 * n, job=job)
        assert d.status["phase"] == "Restarting"
        assert d.status["restarts"] == d.status["disruptions"] == n
        assert d.status["nextRestartTime"] is None, "a disruption restarts without back-off"
        assert conditions(d)["Restarting"] == ("True", "Disrupted")
        assert f"mnist-worker-1 was disrupted ({EVICTED})" in d.events[0].message
        recreate = step(d.status, [], at=60 * n + 1, job=job)
        assert recreate.actions == (CreatePods((0, 1, 2), n),)
        status = step(recreate.status, [pod(i, restart=n) for i in range(3)], at=60 * n + 2, job=job).status
    # A real failure still fails a job with backoffLimit 0.
    failed = [pod(0, restart=3), pod(1, "Failed", restart=3, exit_code=75), pod(2, restart=3)]
    d = step(status, failed, at=999, job=job)
    assert conditions(d)["Failed"] == ("True", "BackoffLimitExceeded")
    assert "restarted 0 times for failures" in d.events[0].message


def test_a_disrupted_worker_gone_before_it_was_seen_restarts_the_group_for_free():
    job = spec(runPolicy={"backoffLimit": 0})
    gone = [pod(0), pod(2)]  # worker 1 was evicted and deleted between two looks
    lost = step(running_status(), gone, at=60, job=job)
    assert conditions(lost)["Failed"] == ("True", "BackoffLimitExceeded"), "a worker deleted by someone"
    d = step(
        running_status(),
        gone,
        at=60,
        job=job,
        disrupted={(0, 1): EVICTED, (0, 2): "of no matter: worker 2 is there"},
    )
    assert d.status["phase"] == "Restarting" and d.status["disruptions"] == 1
    assert f"mnist-worker-1 was disrupted ({EVICTED})" in d.events[0].message
    # The disruption of another group says nothing about this one.
    earlier_group = step(running_status(), gone, at=60, job=job, disrupted={(1, 1): EVICTED})
    assert conditions(earlier_group)["Failed"] == ("True", "BackoffLimitExceeded")


def test_peers_failing_after_a_disruption_do_not_make_it_a_counted_restart():
    job = spec(runPolicy={"backoffLimit": 0})
    pods = [
        pod(0, "Failed", exit_code=75, message="peer lost"),
        pod(1, "Failed", exit_code=143, disruption="PreemptionByScheduler: preempted"),
        pod(2),
    ]
    d = step(running_status(), pods, at=60, job=job)
    assert d.status["phase"] == "Restarting" and d.status["disruptions"] == 1
    # Even a permanent-looking exit of the disrupted worker itself: it was told to go.
    disrupted_with_exit_1 = [pod(0), pod(1, "Failed", exit_code=1, disruption=EVICTED), pod(2)]
    assert step(running_status(), disrupted_with_exit_1, at=60, job=job).status["phase"] == "Restarting"


def test_the_chiefs_trainer_exit_0_succeeds_while_a_sidecar_keeps_the_pod_running():
    pods = [
        pod(0, "Running", exit_code=0, message=RUN, sidecars_running=True),
        pod(1, "Running", exit_code=0, sidecars_running=True),
        pod(2, "Running"),
    ]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Succeeded" and d.status["mlflow"]["runId"] == "r123"
    # cleanPodPolicy Running: every pod still running (the sidecars) is removed.
    assert d.actions == (
        KeepPostmortem(0),
        DeletePods(("mnist-worker-0", "mnist-worker-1", "mnist-worker-2")),
    )
    # The pods it deletes count as being deleted already: none active, the two done stay counted.
    assert d.status["replicaStatuses"] == {"active": 0, "ready": 0, "succeeded": 2, "failed": 0}


def test_a_sidecar_failing_after_the_trainer_succeeded_does_not_fail_the_job():
    # The pod is Failed (a sidecar exited 1 after the trainer exited 0): the trainer's exit decides.
    chief = pod(0, "Failed", exit_code=0, message=RUN)
    d = step(running_status(), [chief, pod(1, "Failed", exit_code=0), pod(2, "Succeeded")], at=60)
    assert d.status["phase"] == "Succeeded"
    # A worker whose sidecar failed after its trainer exited 0 is not a failed worker either.
    d = step(running_status(), [pod(0), pod(1, "Failed", exit_code=0), pod(2)], at=60)
    assert d.status["phase"] == "Running" and d.actions == ()


def test_a_trainer_that_failed_while_a_sidecar_keeps_the_pod_running_is_a_failure():
    d = step(running_status(), [pod(0), pod(1, "Running", exit_code=2, message="bad"), pod(2)], at=60)
    assert conditions(d)["Failed"] == ("True", "WorkerFailed")


def test_a_chief_whose_trainer_exited_is_kept_while_its_pod_phase_catches_up():
    """The trainer has exited 0 and no sidecar runs: the kubelet is about to mark the pod Succeeded.
    cleanPodPolicy Running removes the workers still running, not the chief (its logs stay readable)."""
    pods = [pod(0, "Running", exit_code=0, message=RUN), pod(1, "Running", exit_code=0), pod(2, "Running")]
    d = step(running_status(), pods, at=60)
    assert d.status["phase"] == "Succeeded"
    assert d.actions == (KeepPostmortem(0), DeletePods(("mnist-worker-2",)))
