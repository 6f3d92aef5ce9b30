"""Pure: when a group restarts. MWMS cannot go on without any of its workers, so one lost worker restarts the
whole group: which failures may be retried (classify), what a disruption costs (nothing), the back-off and
backoffLimit of the others, and the wait for the old group's pods to be gone (rules of policy.RULES)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from mwms_contract import termination
from mwms_contract.conditions import (
    BACKOFF_LIMIT_EXCEEDED,
    DISRUPTED,
    FAILED,
    GROUP_RESTARTING,
    INVALID_SPEC,
    RESTART_BACKOFF,
    RESTARTING,
    RUNNING,
    WAITING_FOR_OLD_PODS,
    WORKER_FAILED,
)
from mwms_contract.names import EXIT_INVALID_CONFIG, EXIT_RETRYABLE, pod_name
from mwms_contract.status import format_time, parse_time, truncate
from mwms_operator.decide.facts import STOPPED_STARTUP_CLOCKS, Facts, keep_postmortem
from mwms_operator.decide.job_status import Decision, DeletePods
from mwms_operator.observe.pod_states import WorkerPod

# The first counted group restart is immediate, the later ones wait 10 s doubling up to 5 min (the kubelet's
# CrashLoopBackOff): one transient loss (a lost node, exit 75) costs no idle wait, a crash loop is slowed.
RESTART_BACKOFF_SECONDS, RESTART_BACKOFF_MAX_SECONDS = 10, 300


@dataclass(frozen=True)
class Failure:
    pod: WorkerPod
    retryable: bool
    description: str


def classify(pod: WorkerPod, *, missing: bool = False) -> Failure:
    """Exit 75 and >= 128 (signals), deleted and evicted pods are retryable; any other exit is permanent."""
    if pod.disruption:  # whatever it exited with: it was told to go
        return Failure(pod, True, f"worker {pod.name} was disrupted ({pod.disruption})")
    if missing:
        return Failure(pod, True, f"worker {pod.name} was deleted")
    if pod.deleting:
        return Failure(pod, True, f"worker {pod.name} is being deleted")
    code = pod.trainer_exit
    if code is None:
        reason = pod.reason or "no exit code"
        return Failure(pod, True, f"worker {pod.name} failed ({reason})")
    text = f"worker {pod.name} exited with code {code}"
    if pod.reason and pod.reason not in ("Error", "Completed"):
        text += f" ({pod.reason})"
    if pod.message:
        text += f": {pod.message}"
    return Failure(pod, code == EXIT_RETRYABLE or code >= 128, truncate(text))


def failure_reason(failure: Failure) -> str:
    """spec.code names what only a worker can check (the ConfigMap exists, holds the entrypoint): the
    trainer says so with exit 2 naming the field, and that is a spec error like those the parser finds."""
    pod = failure.pod
    kind, what = termination.parse_failure(pod.message) or ("", "")
    if pod.exit_code == EXIT_INVALID_CONFIG and kind == termination.INVALID_CONFIG:
        return INVALID_SPEC if what.startswith("spec.code.") else WORKER_FAILED
    return WORKER_FAILED


def restart_backoff(counted: int) -> int:
    """Seconds before the `counted`-th counted group restart (1-based): 0, 10, 20, 40, … at most 300."""
    if counted <= 1:
        return 0
    return min(RESTART_BACKOFF_MAX_SECONDS, RESTART_BACKOFF_SECONDS * 2 ** (counted - 2))


def failures(f: Facts) -> list[Failure]:
    """The pods of this group that failed, or were deleted or lost while the group ran: MWMS cannot continue
    with any of them gone."""
    assert f.parsed is not None
    found = [classify(p) for p in f.current if p.failed and not p.deleting]
    if f.expecting_pods:
        found += [classify(p) for p in f.current if p.deleting]
        if f.b.previous_phase == RUNNING:
            present = {p.index for p in f.current}
            found += [
                classify(
                    WorkerPod(
                        pod_name(f.meta.name, i),
                        i,
                        f.restarts,
                        "Unknown",
                        disruption=f.disrupted.get((f.restarts, i), ""),
                    ),
                    missing=True,
                )
                for i in range(f.parsed.replicas)
                if i not in present
            ]
    return found


def restart(f: Facts, first: Failure, reason: str, plan: str) -> Decision:
    """The next group: every pod of this one goes, and the restart is counted in the status."""
    assert f.parsed is not None
    keep_postmortem(f)  # of the group that ends, before its restart count moves on
    f.b.set(**STOPPED_STARTUP_CLOCKS, restarts=f.restarts + 1, group_start_time=None)
    names = tuple(p.name for p in f.pods if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    f.b.phase(
        RESTARTING,
        reason,
        truncate(f"{first.description}; restarting all {f.parsed.replicas} workers {plan}"),
    )
    return f.finish()


def rule_worker_failed(f: Facts) -> Decision | None:
    """A pod of this group exited for good (a permanent exit code): the job fails."""
    permanent = [x for x in failures(f) if not x.retryable]
    if not permanent:
        return None
    first = min(permanent, key=lambda x: x.pod.index)
    return f.terminal(FAILED, failure_reason(first), first.description)


def rule_disrupted_restart(f: Facts) -> Decision | None:
    """A disruption (eviction, preemption, drain) is not the job's fault, and the failures that follow it
    (peers losing the evicted worker) are its consequence: such a restart is free and immediate."""
    disrupted = [x for x in failures(f) if x.pod.disruption]
    if not disrupted:
        return None
    f.b.set(disruptions=f.b.status.disruptions + 1, next_restart_time=None)
    plan = "now (a disruption: not counted against spec.runPolicy.backoffLimit)"
    return restart(f, min(disrupted, key=lambda x: x.pod.index), DISRUPTED, plan)


def rule_backoff_limit_exceeded(f: Facts) -> Decision | None:
    """Any other failure restarts the group only while spec.runPolicy.backoffLimit allows another restart."""
    assert f.parsed is not None
    counted, limit, failed = f.counted_restarts, f.parsed.backoff_limit, failures(f)
    if not failed or counted < limit:
        return None
    first = min(failed, key=lambda x: x.pod.index)
    return f.terminal(
        FAILED,
        BACKOFF_LIMIT_EXCEEDED,
        truncate(
            f"the group was restarted {counted} times for failures "
            f"(spec.runPolicy.backoffLimit={limit}); last failure: {first.description}"
        ),
    )


def rule_group_restart(f: Facts) -> Decision | None:
    """A retryable failure restarts the whole group (MWMS cannot continue without a worker), counted against
    spec.runPolicy.backoffLimit: the first at once, the later ones after a back-off (restart_backoff)."""
    assert f.parsed is not None
    failed = failures(f)
    if not failed:
        return None
    counted, limit = f.counted_restarts, f.parsed.backoff_limit
    delay = restart_backoff(counted + 1)
    count = f"restart {counted + 1} of at most {limit}"
    if delay:
        due = format_time(f.now + timedelta(seconds=delay))
        f.b.set(next_restart_time=due)
        plan = f"at {due} after a {delay}s back-off ({count})"
    else:  # no nextRestartTime: nothing to wait for, so no RestartBackoff condition either
        f.b.set(next_restart_time=None)
        plan = f"now ({count})"
    return restart(f, min(failed, key=lambda x: x.pod.index), GROUP_RESTARTING, plan)


def rule_old_pods_leaving(f: Facts) -> Decision | None:
    """Pods of an earlier group (or from before a suspend) must be gone before the new group starts: two
    groups must never talk to each other. On resume the phase stays Suspended until they are gone, so they
    are not mistaken for lost workers."""
    leaving = [p for p in f.pods if p.restart != f.restarts or (p.deleting and not f.expecting_pods)]
    if not leaving:
        return None
    names = tuple(p.name for p in leaving if not p.deleting)
    if names:
        f.b.actions.append(DeletePods(names))
    # Say what the new group waits for: a pod stuck Terminating (a lost node, a finalizer) shows here.
    message = f"waiting for pods of an earlier group to be gone: {', '.join(p.name for p in leaving)}"
    f.b.condition(RUNNING, False, WAITING_FOR_OLD_PODS, truncate(message))
    return f.finish()


def rule_restart_backoff(f: Facts) -> Decision | None:
    """A counted restart waits until status.nextRestartTime before it creates the new group."""
    due = parse_time(f.b.status.next_restart_time)
    if due is None:
        return None
    if f.current or f.now >= due:
        f.b.set(next_restart_time=None)
        return None
    message = f"restarting the group at {format_time(due)} (exponential back-off after a failure)"
    f.b.condition(RUNNING, False, RESTART_BACKOFF, message)
    return f.finish()
