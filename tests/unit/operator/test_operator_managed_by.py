"""spec.managedBy: a job another controller runs gets nothing from the operator but one event (never a pod,
a Service or a status write); a job MultiKueue runs gets its one Kueue Workload on the manager cluster; and
MultiKueue's copy of it on a worker cluster marks that Workload Finished when it ends. The API server is
FakeKube here; tests/multikueue runs the two real clusters with real Kueue."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from mwms_contract import names
from mwms_contract.ownership import manager_of, own_workload
from mwms_contract.tf_config import worker_hosts
from mwms_contract.trainjob import MANAGED_BY, MANAGED_BY_MAX_LENGTH, SpecError
from mwms_kit.fake_kube import KEY, job_body, pod_body
from mwms_operator.decide.job_status import CreateWorkload, FinishWorkload, JobMeta
from mwms_operator.decide.managed_by import decide_elsewhere
from mwms_operator.decide.policy import decide
from mwms_operator.kube.refusals import ApiError
from mwms_operator.observe.pod_states import WorkerPod
from mwms_operator.reconciler import WORKLOAD_RETRY_SECONDS
from mwms_operator.render.kueue_workload import (
    MAX_NAME_LENGTH,
    build_workload,
    finished_status,
    workload_name,
)
from mwms_operator.render.spec import parse_trainjob

CRD = Path(__file__).resolve().parents[3] / "manifests" / "crd.yaml"
QUEUE = {names.LABEL_KUEUE_QUEUE: "team-queue"}
MULTIKUEUE = names.MULTIKUEUE_CONTROLLER_NAME
NOW = datetime(2026, 12, 2, 10, 5, tzinfo=UTC)
CHIEF_DONE = '{"runId": "r1", "experimentId": "1", "modelUri": "runs:/r1/model"}'


def elsewhere_job(manager: str = "example.com/batch", **fields) -> dict:
    return job_body(managedBy=manager, **fields)


def test_the_operators_own_name_or_none_is_this_operator_and_anything_else_is_not():
    assert manager_of(job_body()) == names.CONTROLLER_NAME == "mwms.dev/trainjob-controller"
    assert manager_of(job_body(managedBy=names.CONTROLLER_NAME)) == names.CONTROLLER_NAME
    assert manager_of(elsewhere_job(MULTIKUEUE)) == MULTIKUEUE
    assert manager_of({"spec": "not an object"}) == names.CONTROLLER_NAME


def test_the_crd_checks_managed_by_as_the_contract_does_and_keeps_it_immutable():
    (version,) = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    field = spec["properties"]["managedBy"]
    assert field["maxLength"] == MANAGED_BY_MAX_LENGTH
    assert field["pattern"] == f"^{MANAGED_BY.pattern}$"
    (rule,) = [r for r in spec["x-kubernetes-validations"] if r.get("fieldPath") == ".managedBy"]
    assert rule["message"] == "spec.managedBy is immutable"
    # Setting it on a job that had none, or removing it, is a change too.
    assert "has(self.managedBy) == has(oldSelf.managedBy)" in rule["rule"]
    for good in (MULTIKUEUE, names.CONTROLLER_NAME, "example.com/a/b_c.d~e"):
        assert re.fullmatch(field["pattern"], good)


def test_a_job_another_controller_runs_gets_one_event_and_nothing_else(reconciler):
    reconciler.job_event("ADDED", elsewhere_job())
    for _ in range(3):  # a resync or an event later changes nothing
        asyncio.run(reconciler.reconcile(KEY))
    kube = reconciler.kube
    assert kube.named("event") == ["ManagedElsewhere"]
    assert [call for call, _ in kube.calls if call != "event"] == []  # no Service, pod, status, Workload


def test_a_job_another_controller_runs_is_never_judged_by_this_operator(reconciler):
    """An invalid spec is its controller's to report: no InvalidSpec status is written here."""
    reconciler.job_event("ADDED", elsewhere_job(trainer={"globalBatchSize": 3}))
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("patch_status") == [] and reconciler.kube.named("event") == [
        "ManagedElsewhere"
    ]


def test_a_multikueue_job_gets_its_one_workload_and_no_status_from_this_operator(reconciler):
    body = elsewhere_job(MULTIKUEUE, labels=QUEUE)
    reconciler.job_event("ADDED", body)
    asyncio.run(reconciler.reconcile(KEY))
    asyncio.run(reconciler.reconcile(KEY))
    kube = reconciler.kube
    assert kube.named("create_workload") == [workload_name(KEY.name, KEY.uid)], "made once"
    assert kube.named("event") == ["ManagedElsewhere"]
    assert kube.named("patch_status") == kube.named("create_pod") == kube.named("create_service") == []
    (workload,) = kube.workloads.values()
    assert workload["spec"]["queueName"] == "team-queue"
    (owner,) = workload["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "TrainJob",
        "mnist",
        "uid-1",
        True,
    )


def test_a_refused_workload_is_said_and_tried_again(reconciler):
    reconciler.kube.refuse_workloads = ApiError(404, "the server could not find the requested resource")
    reconciler.job_event("ADDED", elsewhere_job(MULTIKUEUE, labels=QUEUE))
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("event") == ["ManagedElsewhere", "WorkloadRefused"]
    assert reconciler.queue.scheduled(KEY)
    assert WORKLOAD_RETRY_SECONDS > 0
    reconciler.kube.refuse_workloads = None
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("create_workload") == [workload_name(KEY.name, KEY.uid)] * 2
    assert reconciler.kube.workloads


@pytest.mark.parametrize(
    ("manager", "labels", "spec", "reason", "kind"),
    [
        ("example.com/batch", QUEUE, {}, "ManagedElsewhere", "Normal"),
        (MULTIKUEUE, {}, {}, "NoQueue", "Warning"),
        (MULTIKUEUE, QUEUE, {"trainer": {"globalBatchSize": 3}}, "InvalidSpec", "Warning"),
    ],
)
def test_what_is_said_of_a_job_that_gets_no_workload(manager, labels, spec, reason, kind, config):
    parsed = _parse(elsewhere_job(manager, labels=labels, **spec), config)
    decided = decide_elsewhere(manager, parsed, told=frozenset(), workload_made=False)
    assert decided.actions == ()
    assert [(e.type, e.reason) for e in decided.events] == [(kind, reason)]
    assert decide_elsewhere(manager, parsed, told={reason}, workload_made=False).events == ()


def test_a_multikueue_job_that_gets_its_queue_later_gets_its_workload_then(config):
    told = {"NoQueue"}
    parsed = _parse(elsewhere_job(MULTIKUEUE, labels=QUEUE), config)
    decided = decide_elsewhere(MULTIKUEUE, parsed, told=told, workload_made=False)
    assert decided.actions == (CreateWorkload(),)
    assert [e.reason for e in decided.events] == ["ManagedElsewhere"]
    assert decide_elsewhere(MULTIKUEUE, parsed, told=told, workload_made=True).actions == ()


def test_the_workload_holds_every_worker_with_the_pod_the_operator_builds(config):
    parsed = _parse(
        elsewhere_job(
            MULTIKUEUE, replicas=4, labels=QUEUE, container={"resources": {"requests": {"cpu": "2"}}}
        ),
        config,
    )
    hosts = worker_hosts("mnist", "team-a", 4, parsed.port, "")
    workload = build_workload(
        parsed, "team-queue", job_name="mnist", namespace="team-a", uid="u", hosts=hosts
    )
    assert workload["apiVersion"] == "kueue.x-k8s.io/v1beta2" and workload["kind"] == "Workload"
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["count"] == 4
    (trainer,) = pod_set["template"]["spec"]["containers"]
    assert trainer["name"] == "trainer" and trainer["resources"] == {"requests": {"cpu": "2"}}


def test_a_workloads_name_fits_a_label_value_and_differs_for_a_job_created_again():
    long = "j" * 52  # the longest TrainJob name
    assert len(workload_name(long, "uid-1")) <= MAX_NAME_LENGTH
    assert workload_name("mnist", "uid-1") != workload_name("mnist", "uid-2")
    assert workload_name("mnist", "uid-1") == workload_name("mnist", "uid-1")


def test_the_worker_copy_reads_its_workload_from_the_label_multikueue_sets():
    body = job_body(labels={**QUEUE, names.LABEL_KUEUE_PREBUILT_WORKLOAD: "trainjob-mnist-abcde"})
    assert own_workload(body) == "trainjob-mnist-abcde"
    assert own_workload(job_body(labels=QUEUE)) is None


def test_a_job_with_a_workload_of_its_own_marks_it_finished_when_it_ends(config):
    spec = _parse(job_body(), config)
    meta = JobMeta("mnist", "team-a", "uid-1")
    chief = WorkerPod("mnist-worker-0", 0, 0, "Succeeded", exit_code=0, message=CHIEF_DONE)
    running = decide(meta, spec, [], service_exists=True, now=NOW, open_workload="w-1")
    assert not [a for a in running.actions if isinstance(a, FinishWorkload)], "not before it ends"
    done = decide(
        meta, spec, [chief], service_exists=True, now=NOW, previous=running.status, open_workload="w-1"
    )
    (end,) = [a for a in done.actions if isinstance(a, FinishWorkload)]
    assert (end.name, end.succeeded) == ("w-1", True) and "worker 0" in end.message
    assert end.time == done.status["completionTime"]
    # Marked once: without an open Workload, nothing; a job of no Workload of its own, nothing.
    again = decide(meta, spec, [chief], service_exists=True, now=NOW, previous=done.status)
    assert not [a for a in again.actions if isinstance(a, FinishWorkload)]


def test_a_failed_job_marks_its_workload_failed():
    meta = JobMeta("mnist", "team-a", "uid-1")
    failed = decide(
        meta, SpecError("spec.replicas", "bad"), [], service_exists=False, now=NOW, open_workload="w"
    )
    (end,) = [a for a in failed.actions if isinstance(a, FinishWorkload)]
    assert end.succeeded is False and "spec.replicas" in end.message
    body = finished_status("w", "team-a", succeeded=False, message=end.message, time=end.time or "")
    (condition,) = body["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Finished", "True", "Failed")


def test_the_worker_copy_applies_finished_once_after_the_final_status(reconciler, indexes):
    labels = {**QUEUE, names.LABEL_KUEUE_PREBUILT_WORKLOAD: "trainjob-mnist-abcde"}
    reconciler.job_event("ADDED", job_body(labels=labels))
    asyncio.run(reconciler.reconcile(KEY))
    assert reconciler.kube.named("apply_workload_status") == []
    for index in (0, 1):
        done = pod_body(index, phase="Succeeded")
        done["status"]["containerStatuses"] = [
            {
                "name": "trainer",
                "state": {"terminated": {"exitCode": 0, "message": CHIEF_DONE if index == 0 else ""}},
            }
        ]
        indexes.pod(done)
    asyncio.run(reconciler.reconcile(KEY))
    asyncio.run(reconciler.reconcile(KEY))
    kube = reconciler.kube
    assert kube.named("apply_workload_status") == ["trainjob-mnist-abcde"]
    order = [call for call, _ in kube.calls if call in ("patch_status", "apply_workload_status")]
    assert order[-2:] == ["patch_status", "apply_workload_status"], "the job's final status is written first"
    (applied,) = kube.workload_statuses
    (condition,) = applied["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("Finished", "Succeeded")


def _parse(body, config):
    try:
        return parse_trainjob(body, config.spec_defaults())
    except SpecError as error:
        return error
