"""Pure: the policy, as a table of named rules: (spec, pods, now, previous status) -> the new status and what
to do about it (a Decision). The first rule that returns a decision decides; a test walks every rule."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from mwms_contract.conditions import (
    ALL_WORKERS_RUNNING,
    API_SERVER_ERROR,
    API_SERVER_THROTTLED,
    CHIEF_SUCCEEDED,
    CREATE_PODS_REFUSED,
    DEADLINE_EXCEEDED,
    FAILED,
    INVALID_SPEC,
    NAME_CONFLICT,
    NAMESPACE_LISTED,
    NAMESPACE_UNLISTED,
    PENDING,
    RESUMED,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    TERMINAL,
    TTL_EXPIRED,
    WEBHOOK_UNAVAILABLE,
    WORKERS_PENDING,
)
from mwms_contract.status import TrainJobStatus, format_time, parse_time, truncate
from mwms_contract.trainjob import SpecError, TrainJobSpec
from mwms_operator.decide.facts import (
    STOPPED_STARTUP_CLOCKS,
    Facts,
    cleanup,
    mark_created,
    mark_said,
    mark_started,
    mark_template,
)
from mwms_operator.decide.gang import gang_waits, rule_gang_unavailable, uses_pod_group
from mwms_operator.decide.job_status import (
    Builder,
    CreatePods,
    CreateService,
    Decision,
    DeleteJob,
    DeletePods,
    Event,
    FinishWorkload,
    JobMeta,
    chief_mlflow,
    with_tracking_uri,
)
from mwms_operator.decide.restarts import (
    rule_backoff_limit_exceeded,
    rule_disrupted_restart,
    rule_group_restart,
    rule_old_pods_leaving,
    rule_restart_backoff,
    rule_worker_failed,
)
from mwms_operator.decide.start import rule_container_error, rule_startup_timeout, stall_clocks
from mwms_operator.observe.findings import CreationRefused, Said
from mwms_operator.observe.pod_states import WorkerPod

# What the Running condition's message starts with for each reason creation was refused for now.
REFUSALS = {
    CREATE_PODS_REFUSED: "the API server refused to create the workers",
    WEBHOOK_UNAVAILABLE: "an admission webhook the workers need could not be called",
    API_SERVER_THROTTLED: "the API server asked the operator to slow down (429)",
    API_SERVER_ERROR: "the API server failed to create the workers",
    NAME_CONFLICT: "a name the job needs is taken",
}


def _rule_finished(f: Facts) -> Decision | None:
    """Finished: only cleanup and the TTL remain."""
    if f.b.previous_phase not in TERMINAL:
        return None
    names = cleanup(f.parsed, f.pods, remove_active=False)
    if names:
        f.b.actions.append(DeletePods(names))
    mark_said(f)  # the run's end
    done = parse_time(f.b.status.completion_time)
    ttl = f.parsed.ttl_seconds_after_finished if f.parsed is not None else None
    if ttl is not None and done is not None and f.now >= done + timedelta(seconds=ttl):
        f.b.actions.append(DeleteJob())
        f.b.events.append(Event("Normal", TTL_EXPIRED, f"deleting the TrainJob {ttl}s after it finished"))
    return f.finish()


def _rule_invalid_spec(f: Facts) -> Decision | None:
    if not isinstance(f.spec, SpecError):
        return None
    return f.terminal(FAILED, INVALID_SPEC, f"invalid TrainJob: {f.spec}; no worker pods were created")


def _rule_refused(f: Facts) -> Decision | None:
    """The API server validates spec.template more deeply than our parser: its refusal is a spec error too."""
    if f.refused is None:
        return None
    message = f"invalid TrainJob: the API server refused a worker object: {f.refused}"
    return f.terminal(FAILED, INVALID_SPEC, truncate(message))


def _rule_suspended(f: Facts) -> Decision | None:
    assert f.parsed is not None
    if not f.parsed.suspend:
        return None
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    f.b.set(**STOPPED_STARTUP_CLOCKS, start_time=None, group_start_time=None, next_restart_time=None)
    f.b.phase(SUSPENDED, SUSPENDED, "spec.runPolicy.suspend is true: worker pods deleted")
    return f.finish()


def _rule_chief_succeeded(f: Facts) -> Decision | None:
    """The chief's `trainer` container exited 0: the job is done, whatever its sidecars do."""
    chief = next((p for p in f.current if p.index == 0 and not p.deleting), None)
    if chief is None or chief.trainer_exit != 0:
        return None
    f.b.set(mlflow=chief_mlflow(chief.message, f.b.status.mlflow))
    mlflow = f.b.status.mlflow
    run = mlflow.run_id if mlflow is not None else "unknown (no termination message)"
    return f.terminal(SUCCEEDED, CHIEF_SUCCEEDED, f"worker 0 ({chief.name}) exited 0; MLflow run {run}")


def _rule_deadline_exceeded(f: Facts) -> Decision | None:
    assert f.parsed is not None
    start = parse_time(f.b.status.start_time)
    deadline = f.parsed.active_deadline_seconds
    if start is None or deadline is None or f.now < start + timedelta(seconds=deadline):
        return None
    return f.terminal(
        FAILED,
        DEADLINE_EXCEEDED,
        f"ran longer than spec.runPolicy.activeDeadlineSeconds={deadline}s; worker pods removed",
        remove_active=True,
    )


def _rule_creation_refused(f: Facts) -> Decision | None:
    """Pod creation was refused for now: hold no part of the group while waiting (a partial MWMS group only
    holds quota others could use), say why, and let the next try (when due, with no pod left) create it all.
    Before worker-failed: the pods removed here are not lost workers. A whole group is never removed for
    a refused Service (a running job's lost Service is made again by create-missing at each look)."""
    assert f.parsed is not None
    refusal = f.creation_refused
    complete = {p.index for p in f.current if not p.deleting} >= set(range(f.parsed.replicas))
    if refusal is None or complete or (refusal.wait_seconds <= 0 and not f.pods):
        return None
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    message = (
        f"{REFUSALS[refusal.reason]} ({refusal.tries} "
        f"{'try' if refusal.tries == 1 else 'tries'}): {refusal.message}; no worker pod is kept while "
        f"waiting; next try at {format_time(refusal.next_try)}"
    )
    f.b.condition(RUNNING, False, refusal.reason, truncate(message))
    return f.finish()


def _rule_template_invalid(f: Facts) -> Decision | None:
    """Pods must be made and spec.template is invalid: nothing runs that an edit could spare, so fail."""
    assert f.parsed is not None
    present = {p.index for p in f.current}
    if f.template_error is None or present >= set(range(f.parsed.replicas)):
        return None
    return f.terminal(
        FAILED, INVALID_SPEC, f"invalid TrainJob: {f.template_error}; no worker pods were created"
    )


def _rule_create_missing(f: Facts) -> Decision | None:
    assert f.parsed is not None
    b, replicas = f.b, f.parsed.replicas
    if not f.service_exists:
        b.actions.append(CreateService())  # kept if a later rule decides: a lost Service comes back
    present = {p.index for p in f.current}
    missing = tuple(i for i in range(replicas) if i not in present)
    if not missing:
        return None
    b.actions.append(CreatePods(missing, f.restarts, uses_pod_group(f.parsed, served=f.gang_served)))
    b.set(start_time=b.status.start_time or format_time(f.now))
    if not f.current:
        b.set(group_start_time=format_time(f.now))
    if f.resuming:
        b.phase(PENDING, RESUMED, "spec.runPolicy.suspend is false: recreating the worker pods")
    # A new job is Pending from its first decision (Builder); its first event is the creation's PodsCreated.
    return f.finish()


def _rule_all_running(f: Facts) -> Decision | None:
    assert f.parsed is not None
    if any(not p.started for p in f.current):
        return None
    if f.b.status.phase != RUNNING:
        message = f"all {f.parsed.replicas} workers are running (restart {f.restarts})"
        f.b.phase(RUNNING, ALL_WORKERS_RUNNING, message)
    return f.finish()


def _rule_workers_pending(f: Facts) -> Decision | None:
    """The last rule, always decides: say why while waiting (e.g. the scheduler's "Insufficient cpu"), not
    only when the timeout strikes."""
    assert f.parsed is not None
    not_started = [p for p in f.current if not p.started]
    reasons = "; ".join(f"{p.name}: {p.waiting}" for p in not_started if p.waiting)
    message = f"waiting for {len(not_started)} of {f.parsed.replicas} workers to run"
    if gang := gang_waits(f.current, f.parsed.replicas):
        message += f": {gang}"
    elif reasons:
        message += f" ({reasons})"
    f.b.condition(RUNNING, False, WORKERS_PENDING, truncate(message))
    return f.finish()


Rule = Callable[[Facts], Decision | None]
# The policy, in order: the first rule that returns a decision decides. A job that is over, invalid or
# suspended is settled by the first rules; the others see a valid spec and the books prepare() kept.
SETTLED_RULES: tuple[tuple[str, Rule], ...] = (
    ("finished", _rule_finished),
    ("invalid-spec", _rule_invalid_spec),
    ("refused", _rule_refused),
    ("suspended", _rule_suspended),
)
LIVE_RULES: tuple[tuple[str, Rule], ...] = (
    ("chief-succeeded", _rule_chief_succeeded),
    ("deadline-exceeded", _rule_deadline_exceeded),
    ("creation-refused", _rule_creation_refused),
    ("worker-failed", rule_worker_failed),
    ("disrupted-restart", rule_disrupted_restart),
    ("backoff-limit-exceeded", rule_backoff_limit_exceeded),
    ("group-restart", rule_group_restart),
    ("old-pods-leaving", rule_old_pods_leaving),
    ("template-invalid", _rule_template_invalid),
    ("gang-unavailable", rule_gang_unavailable),
    ("restart-backoff", rule_restart_backoff),
    ("create-missing", _rule_create_missing),
    ("container-error", rule_container_error),
    ("startup-timeout", rule_startup_timeout),  # also once all run: a worker may not join its peers
    ("all-running", _rule_all_running),
    ("workers-pending", _rule_workers_pending),
)
RULES = SETTLED_RULES + LIVE_RULES


def prepare(f: Facts) -> None:
    """The bookkeeping of a live job (valid, not finished, not suspended), before its rules decide."""
    mark_started(f)
    mark_created(f)
    mark_template(f)
    stall_clocks(f)
    mark_said(f)


def _first(rules: tuple[tuple[str, Rule], ...], facts: Facts) -> Decision | None:
    for name, rule in rules:
        decision = rule(facts)
        if decision is not None:
            return dataclasses.replace(decision, rule=name)
    return None


def decide(
    meta: JobMeta,
    spec: TrainJobSpec | SpecError,
    pods: Iterable[WorkerPod],
    *,
    service_exists: bool,
    now: datetime,
    previous: TrainJobStatus | Mapping[str, Any] | None = None,
    refused: str | None = None,
    creation_refused: CreationRefused | None = None,
    template_error: SpecError | None = None,
    disrupted: Mapping[tuple[int, int], str] | None = None,
    said: Iterable[Said] = (),
    gang_served: bool = False,
    open_workload: str | None = None,
) -> Decision:
    """The new status and what to do, by the first of RULES that decides. `refused`: the API server's message
    when it refused to create this job's Service or a pod as invalid; `creation_refused`: when it refused
    them for now (quota, LimitRange, webhook); `template_error`: spec.template is invalid and `spec` was
    parsed without it; `disrupted`: (restart, index) -> disruption of pods that were gone before this
    decision saw them disrupted; `said`: conditions a look at the job's tracking server decided;
    `gang_served`: the API server serves the PodGroup API;
    `open_workload`: the job's own Kueue Workload while it is not yet marked Finished."""
    b = Builder(meta, previous or {}, now)
    if b.holds(NAMESPACE_UNLISTED):  # decided at all: the operator lists the namespace now
        b.condition(NAMESPACE_UNLISTED, False, NAMESPACE_LISTED, "the operator lists the namespace's pods")
    if isinstance(spec, TrainJobSpec):  # where the run is: `mwms logs` and `describe` read it there
        b.set(mlflow=with_tracking_uri(b.status.mlflow, spec.tracking_uri))
    ordered = sorted(pods, key=lambda p: (p.restart, p.index))
    restarts = b.status.restarts
    current = [p for p in ordered if p.restart == restarts]
    facts = Facts(
        meta,
        spec,
        ordered,
        current,
        service_exists,
        now,
        refused,
        b,
        creation_refused,
        template_error,
        disrupted or {},
        tuple(said),
        gang_served,
    )
    decision = _first(SETTLED_RULES, facts)
    if decision is None:
        prepare(facts)
        decision = _first(LIVE_RULES, facts)
    if decision is None:
        raise AssertionError("the last rule always decides")
    return _end_workload(decision, open_workload)


def _end_workload(decision: Decision, workload: str | None) -> Decision:
    """A job admitted through a Workload of its own (MultiKueue's copy on a worker cluster) marks it Finished
    once it has ended, as Kueue's job framework does for its own kinds: Kueue frees the quota, and MultiKueue
    copies the final status to the manager cluster's job and removes the copy."""
    new = decision.new
    ended = next((c for c in new.conditions if c.type == new.phase and c.true), None)
    if workload is None or new.phase not in TERMINAL or ended is None:
        return decision
    end = FinishWorkload(workload, new.phase == SUCCEEDED, ended.message, ended.last_transition_time)
    return dataclasses.replace(decision, actions=(*decision.actions, end))
