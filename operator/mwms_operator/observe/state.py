"""What the watches told us, in memory: TrainJobs, the worker pods and Services each one owns, and the books
kept between reconciles (refusals, deferred writes, event lookups). No I/O. Pods and Services live in kopf's
indexes, filled before any other handler runs: the first reconcile after a start already sees every pod.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from mwms_contract import names
from mwms_contract.conditions import NAME_CONFLICT
from mwms_contract.status import typed
from mwms_operator.observe.findings import CreationRefused
from mwms_operator.observe.pod_states import PodEvents, WorkerPod

# A creation refused for now (quota, LimitRange, webhook, 429/5xx) is tried again after a decorrelated jitter
# backoff: each delay is drawn between the first and three times the previous one, up to the maximum, so two
# jobs refused by one quota do not retry in lockstep.
CREATE_RETRY_FIRST_SECONDS, CREATE_RETRY_MAX_SECONDS = 2.0, 300.0
# A name taken by an object the operator does not watch (not its own): no event says when it is freed, so the
# retry that notices stays this frequent.
NAME_CONFLICT_RETRY_MAX_SECONDS = 30.0
# A status write that may wait (job_status.deferrable: counts, the start's clocks) is made at most this long
# after the first change it holds, with whatever came meanwhile: one write per job per window.
STATUS_COALESCE_SECONDS = 2.0
# A pod this operator created counts as there until the pod watch reports it, or this long at most (as
# client-go's controller expectations): a reconcile running before the watch caught up creates nothing twice.
EXPECTATION_SECONDS = 300.0


class JobKey(NamedTuple):
    namespace: str
    name: str
    uid: str


def job_key(body: Mapping[str, Any]) -> JobKey | None:
    meta = body.get("metadata") or {}
    if not (meta.get("namespace") and meta.get("name") and meta.get("uid")):
        return None
    return JobKey(meta["namespace"], meta["name"], meta["uid"])


def owner_key(body: Mapping[str, Any]) -> JobKey | None:
    """The TrainJob that controls this pod or Service, from its owner reference."""
    meta = body.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == names.KIND and ref.get("controller") and meta.get("namespace"):
            return JobKey(meta["namespace"], ref.get("name", ""), ref.get("uid", ""))
    return None


# What a reconcile reads of a TrainJob's metadata. The rest (managedFields, kubectl's last-applied annotation,
# which repeats the whole spec) is left out of the state: memory grows with the number of TrainJobs.
KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
)


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a TrainJob the operator reads (kept metadata, spec and status), its strings interned."""
    meta = body.get("metadata") or {}
    kept: dict[str, Any] = {k: _interned(body[k]) for k in ("spec", "status") if k in body}
    kept["metadata"] = {k: _interned(meta[k]) for k in KEPT_METADATA if k in meta}
    return kept


def _interned(value: Any) -> Any:
    """A copy of parsed JSON whose strings are shared with every other job's equal strings: each watch event
    is parsed anew, and each job would otherwise hold its own copy of every key, condition and phase."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): _interned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_interned(v) for v in value]
    return value


@dataclass
class _Refusal:
    reason: str
    message: str
    tries: int
    delay: float  # seconds from this refusal to the next try
    retry_at: float  # clock time of the next try
    next_try: datetime  # the same moment, for people


def retry_delay(previous: float | None, draw: float, maximum: float = CREATE_RETRY_MAX_SECONDS) -> float:
    """Decorrelated jitter: `draw` in [0, 1) picks a delay between the first and three times the previous."""
    low = CREATE_RETRY_FIRST_SECONDS
    high = 3 * (previous if previous is not None else low)
    return min(maximum, low + draw * (high - low))


def _rv(body: Mapping[str, Any]) -> int:
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class _Lookups(NamedTuple):
    """A starting pod's events lookups: when the last was, how many so far, the events last read (None: none
    yet), and those that failed since the last that worked: how many, since when, the last one's error."""

    when: float
    lookups: int
    events: PodEvents | None
    failures: int = 0
    failing_since: float = 0.0
    error: str = ""


class State:
    def __init__(self, clock: Any = time.monotonic, draw: Any = random.random) -> None:
        self.clock, self.draw = clock, draw  # draw: the jitter's random numbers in [0, 1)
        self.jobs: dict[JobKey, Mapping[str, Any]] = {}
        # kopf's indexes once bound: (namespace, owner uid) -> the WorkerPods / the Service names.
        self.pod_index: Mapping[Any, Iterable[WorkerPod]] = {}
        self.service_index: Mapping[Any, Any] = {}
        self.refused: dict[JobKey, str] = {}  # the API server's message when it refused a worker object
        self._creation_refused: dict[JobKey, _Refusal] = {}  # refused for now: tried again later
        self._written: dict[JobKey, tuple[int, Mapping[str, Any]]] = {}  # our last status write
        self._gone: dict[
            JobKey, set[str]
        ] = {}  # uids of pods found gone though still indexed (missed DELETE)
        self._leaving_since: dict[tuple[JobKey, str], float] = {}
        # (restart, index) -> disruption of pods whose DELETED event said they were disrupted.
        self._disrupted: dict[JobKey, dict[tuple[int, int], str]] = {}
        # Namespaces being deleted -> uids of their TrainJobs known then (see end_namespace).
        self._ending: dict[str, set[str]] = {}
        # The reasons of the events each job was told once (tell_once: PodEventsForbidden…).
        self._told: dict[JobKey, set[str]] = {}
        # A decided status not yet written (deferred), with the resourceVersion of the status it was decided
        # from, and when it must be written at the latest (clock time).
        self._pending: dict[JobKey, tuple[int, Mapping[str, Any]]] = {}
        self._flush_at: dict[JobKey, float] = {}
        # Pod uid -> its events lookups (_Lookups), of a starting pod, by job.
        self._pod_events: dict[JobKey, dict[str, _Lookups]] = {}
        # Jobs whose Kueue Workload this operator has made (MultiKueue's, on the manager cluster) or marked
        # Finished (a worker cluster's copy): done once.
        self.workload_done: set[JobKey] = set()
        # Pod uid -> (the pod as created, when) of pods created but not yet reported by the watch (expect).
        self._expected: dict[JobKey, dict[str, tuple[WorkerPod, float]]] = {}

    def job_event(self, type_: str | None, body: Mapping[str, Any]) -> JobKey | None:
        key = job_key(body)
        if key is None:
            return None
        self._note_in_ending_namespace(type_, key)
        if type_ == "DELETED":
            self.jobs.pop(key, None)
            self.refused.pop(key, None)
            self._creation_refused.pop(key, None)
            self._written.pop(key, None)
            self._gone.pop(key, None)
            self._disrupted.pop(key, None)
            self._told.pop(key, None)
            self.settle(key)
            self._pod_events.pop(key, None)
            self.workload_done.discard(key)
            self._expected.pop(key, None)
            for mark in [m for m in self._leaving_since if m[0] == key]:
                del self._leaving_since[mark]
        else:
            kept = self.jobs[key] = slim(body)
            written = self._written.get(key)
            if written is not None and written[1] and written[0] <= _rv(kept):
                self._written[key] = (written[0], {})  # the watch has caught up: one copy of the status
        return key

    def end_namespace(self, namespace: str) -> bool:
        """The API server creates nothing in this namespace: it is being deleted, and its TrainJobs with it.
        They are left alone until they are gone (no status writes, no creates that would be refused: while
        the namespace controller deletes their pods, each job would otherwise see its group lost). True the
        first time."""
        if namespace in self._ending:
            return False
        self._ending[namespace] = {key.uid for key in self.jobs if key.namespace == namespace}
        return True

    def tell_once(self, key: JobKey, reason: str) -> bool:
        """Whether this job is to be told (an event of this reason): True the first time only."""
        told = self._told.setdefault(key, set())
        if reason in told:
            return False
        told.add(reason)
        return True

    def told(self, key: JobKey) -> frozenset[str]:
        """The reasons this job was told of (tell_once)."""
        return frozenset(self._told.get(key, ()))

    def namespace_ending(self, namespace: str) -> bool:
        return namespace in self._ending

    def _note_in_ending_namespace(self, type_: str | None, key: JobKey) -> None:
        known = self._ending.get(key.namespace)
        if known is None:
            return
        if type_ == "DELETED":
            known.discard(key.uid)
            if not known:  # the last of them: the namespace is gone, or soon
                del self._ending[key.namespace]
        elif key.uid not in known:
            # A namespace being deleted takes no new TrainJobs: one we did not know means it was created
            # again (or a job's first event came late: then the next create finds the namespace ending again).
            del self._ending[key.namespace]

    def pod_deleted(self, key: JobKey, pod: WorkerPod) -> None:
        """A pod's DELETED event, with its last state. An evicted pod can be gone before a reconcile looks
        at its job (evictions are quick when the trainer exits on SIGTERM); remembering that it was
        disrupted keeps its group's restart free, as if it had been seen terminating."""
        if not pod.disruption:
            return
        kept = {m: text for m, text in self._disrupted.get(key, {}).items() if m[0] >= pod.restart}
        kept[(pod.restart, pod.index)] = pod.disruption
        self._disrupted[key] = kept

    def disruptions(self, key: JobKey) -> dict[tuple[int, int], str]:
        """(restart, index) -> disruption, of this job's pods deleted as disrupted (pod_deleted)."""
        return self._disrupted.get(key, {})

    def forget_pod(self, key: JobKey, pod: WorkerPod) -> None:
        """The API server says this pod is gone, though its DELETE never reached the index."""
        self._gone.setdefault(key, set()).add(pod.uid)
        self._leaving_since.pop((key, pod.name), None)

    def refuse_creation(self, key: JobKey, reason: str, message: str) -> tuple[int, float]:
        """The API server refused this job's workers for now (a reason of policy.REFUSALS): (which try that
        was, seconds to the next)."""
        last = self._creation_refused.get(key)
        maximum = NAME_CONFLICT_RETRY_MAX_SECONDS if reason == NAME_CONFLICT else CREATE_RETRY_MAX_SECONDS
        delay = retry_delay(last.delay if last else None, self.draw(), maximum)
        tries = last.tries + 1 if last else 1
        next_try = datetime.now(UTC) + timedelta(seconds=delay)
        self._creation_refused[key] = _Refusal(reason, message, tries, delay, self.clock() + delay, next_try)
        return tries, delay

    def creation_accepted(self, key: JobKey) -> None:
        self._creation_refused.pop(key, None)

    def creation_refused(self, key: JobKey) -> CreationRefused | None:
        """The last refusal while the group is not yet created, and whether its next try is due."""
        refusal = self._creation_refused.get(key)
        if refusal is None:
            return None
        wait = max(0.0, refusal.retry_at - self.clock())
        return CreationRefused(refusal.message, refusal.tries, refusal.next_try, wait, refusal.reason)

    # --- reads

    def expect(self, key: JobKey, pods: Iterable[WorkerPod]) -> None:
        """Pods just created: pods_of shows them until the pod watch reports them (observed)."""
        now = self.clock()
        self._expected.setdefault(key, {}).update((pod.uid, (pod, now)) for pod in pods)

    def observed(self, key: JobKey, uid: str) -> None:
        """The pod watch reported this pod (any event): from now on the index speaks for it."""
        expected = self._expected.get(key)
        if expected is not None and expected.pop(uid, None) is not None and not expected:
            del self._expected[key]

    def pods_of(self, key: JobKey) -> list[WorkerPod]:
        gone = self._gone.get(key, ())
        pods = [p for p in self.pod_index.get((key.namespace, key.uid), ()) if p.uid not in gone]
        expected = self._expected.get(key)
        if expected:
            indexed, oldest = {p.uid for p in pods}, self.clock() - EXPECTATION_SECONDS
            for uid, (pod, since) in list(expected.items()):
                if uid in indexed or since < oldest:
                    self.observed(key, uid)
                else:
                    pods.append(pod)
        return pods

    def has_service(self, key: JobKey) -> bool:
        return (key.namespace, key.uid) in self.service_index

    def _server(self, key: JobKey) -> tuple[int, Mapping[str, Any]]:
        """(resourceVersion, status): the newer of the watched status and our last write (the watch may lag
        behind our own patch)."""
        body = self.jobs.get(key) or {}
        written = self._written.get(key)
        if written is not None and written[0] > _rv(body):
            return written
        return _rv(body), body.get("status") or {}

    def server_status(self, key: JobKey) -> dict[str, Any]:
        """The status the API server holds, as far as we know: what a write is compared with."""
        return dict(self._server(key)[1])

    def status(self, key: JobKey) -> dict[str, Any]:
        """The status the next decision starts from: the API server's, with a deferred write's fields over it
        (a clock it started keeps its start). A deferred write decided from a status that has changed since
        (another writer's patch, e.g. progress) is left out: the next decision decides it again."""
        rv, status = self._server(key)
        pending = self._pending.get(key)
        if pending is None or pending[0] != rv:
            return dict(status)
        merged = dict(status)
        for field, value in pending[1].items():
            if value is None:
                merged.pop(field, None)
            else:
                merged[field] = value
        return merged

    def defer(self, key: JobKey, patch: Mapping[str, Any]) -> float:
        """Keep a decided status that may wait; seconds until it is due (the first deferral starts the
        window; later ones join it, so a job that keeps changing is still written once a window)."""
        self._pending[key] = (self._server(key)[0], patch)
        due = self._flush_at.setdefault(key, self.clock() + STATUS_COALESCE_SECONDS)
        return due - self.clock()

    def settle(self, key: JobKey) -> None:
        """The API server holds the decided status (written, or nothing to write): nothing waits."""
        self._pending.pop(key, None)
        self._flush_at.pop(key, None)

    def wrote(self, key: JobKey, response: Mapping[str, Any]) -> None:
        self._written[key] = (_rv(response), response.get("status") or {})

    def is_own_write(self, key: JobKey, body: Mapping[str, Any]) -> bool:
        """The watch echoing our own status patch: nothing new to react to."""
        written = self._written.get(key)
        return written is not None and written[0] == _rv(body)

    def known_events(self, key: JobKey, uid: str) -> PodEvents | None:
        """A starting pod's events as last read, however long ago; None if none were read yet."""
        found = self._pod_events.get(key, {}).get(uid)
        return found.events if found is not None else None

    def events_failing(self, key: JobKey, uid: str, tries: int, seconds: float) -> str:
        """The last error of a starting pod's events lookups if at least `tries` of them in a row failed, the
        first at least `seconds` ago; "" otherwise (none failed since the last that worked)."""
        found = self._pod_events.get(key, {}).get(uid)
        if found is None or found.failures < tries or self.clock() - found.failing_since < seconds:
            return ""
        return found.error

    def events_due(self, key: JobKey, uid: str, first: float, most: float) -> bool:
        """Whether a starting pod's events should be looked up (again): `first` seconds after its first
        lookup, then twice as long after each, at most `most` seconds apart."""
        found = self._pod_events.get(key, {}).get(uid)
        if found is None:
            return True
        return self.clock() - found.when >= min(most, first * 2 ** (found.lookups - 1))

    def looked_up(
        self, key: JobKey, uid: str, events: PodEvents | None, current: Iterable[str], error: str = ""
    ) -> None:
        """Count a lookup of a pod's events (None: it failed with `error`; those read before are kept, and
        the failures in a row counted); the lookups of pods no longer `current` (uids) are forgotten."""
        live = set(current)
        kept = {u: v for u, v in self._pod_events.get(key, {}).items() if u in live}
        now, last = self.clock(), kept.get(uid, _Lookups(0.0, 0, None))
        if events is not None:
            kept[uid] = _Lookups(now, last.lookups + 1, events)
        else:
            since = last.failing_since if last.failures else now
            kept[uid] = _Lookups(now, last.lookups + 1, last.events, last.failures + 1, since, error)
        self._pod_events[key] = kept

    def leaving(self, key: JobKey, grace: float) -> tuple[list[WorkerPod], list[WorkerPod]]:
        """(all, overdue): pods of an earlier group or being deleted, and those of them known as such for
        longer than `grace` seconds. The status's restart count says which group is current."""
        restarts = typed(self.status(key)).restarts
        now, leaving, overdue = self.clock(), [], []
        for pod in self.pods_of(key):
            mark = (key, pod.name)
            if pod.restart == restarts and not pod.deleting:
                self._leaving_since.pop(mark, None)
                continue
            leaving.append(pod)
            if now - self._leaving_since.setdefault(mark, now) >= grace:
                overdue.append(pod)
        return leaving, overdue
