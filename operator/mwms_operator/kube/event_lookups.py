"""A starting pod's events, looked up for the start's rules (decide/start.py: is a peer still pulling its
image? what did the kubelet last say?), spaced out per pod and bounded operator-wide: each lookup costs the
API server a match against every event in the namespace (docs/design/event-lookups.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from mwms_contract.conditions import POD_EVENTS_FORBIDDEN, POD_EVENTS_UNREADABLE
from mwms_contract.status import parse_time
from mwms_operator.kube import refusals
from mwms_operator.kube.client import Kube
from mwms_operator.observe.pod_states import UNREADABLE, PodEvents, WorkerPod, pod_events
from mwms_operator.observe.state import JobKey, State

log = logging.getLogger(__name__)
# A pod's events are looked up again this long after its first lookup, then twice as long after each, at
# most EVENTS_STALE_MAX_SECONDS apart: a pull's end seen late starts the startup clock late, never early.
EVENTS_FRESH_SECONDS, EVENTS_STALE_MAX_SECONDS = 5.0, 60.0
# A pod's first lookup waits until it is this old, counting as "may be pulling" meanwhile: a younger pod's
# kubelet may not have said "Pulling" yet, and in a burst most pods have joined by then (no lookup at all).
EVENTS_FIRST_AGE_SECONDS = 5.0
# Lookups at once, operator-wide; a pod whose lookup finds no free slot counts as "may be pulling" meanwhile.
EVENT_LOOKUPS_AT_ONCE = 4
# A pod whose lookups fail this many times in a row (not a 403), over at least EVENTS_STALE_MAX_SECONDS, is
# judged without its events, as after a 403: else its job would wait for ever with no cause named.
EVENT_LOOKUP_FAILURES = 3


def too_young(pod: WorkerPod, now: datetime) -> bool:
    """Created less than EVENTS_FIRST_AGE_SECONDS ago (a pod without a creation time is not)."""
    created = parse_time(pod.created)
    return created is not None and now - created < timedelta(seconds=EVENTS_FIRST_AGE_SECONDS)


class PodEventLookups:
    def __init__(self, kube: Kube, state: State, requeue: Callable[[JobKey, float], None]) -> None:
        self.kube, self.state, self.requeue = kube, state, requeue
        self.slots = asyncio.Semaphore(EVENT_LOOKUPS_AT_ONCE)

    async def with_events(
        self, key: JobKey, pods: list[WorkerPod], wanted: list[WorkerPod]
    ) -> list[WorkerPod]:
        """The job's `pods`, those `wanted` by the start's rules (events_wanted) with their events as last
        read (pulls, last reasons). One not yet read is judged as it is (it may be pulling) and the job is
        looked at again; one whose lookups keep failing (EVENT_LOOKUP_FAILURES), or are refused (403), is
        judged without them."""
        found: dict[str, WorkerPod] = {}
        forbidden = False  # once refused, the others are not asked: judged without events (UNREADABLE)
        behind, failing = False, ""
        now = datetime.now(UTC)
        for pod in wanted:
            due = self.state.events_due(key, pod.uid, EVENTS_FRESH_SECONDS, EVENTS_STALE_MAX_SECONDS)
            if due and self.state.known_events(key, pod.uid) is None and too_young(pod, now):
                due, behind = False, True
            try:
                if due and not forbidden and not await self._look_up(key, pod, pods):
                    behind = True
            except refusals.ApiError as error:
                if error.status != 403:
                    raise
                forbidden = True
                await self._say_forbidden(key, error)
            unread = self.state.events_failing(key, pod.uid, EVENT_LOOKUP_FAILURES, EVENTS_STALE_MAX_SECONDS)
            failing = failing or unread
            if forbidden:
                events: PodEvents | None = UNREADABLE
            elif unread:  # its lookups keep failing: judged without events, as with a 403
                events = PodEvents(readable=False, error=unread)
            else:
                events = self.state.known_events(key, pod.uid)
            found[pod.uid] = dataclasses.replace(pod, events=events)
        if behind:
            self.requeue(key, EVENTS_FRESH_SECONDS)
        if failing:
            await self._say_failing(key, failing)
        return [found.get(p.uid, p) for p in pods]

    async def _look_up(self, key: JobKey, pod: WorkerPod, pods: list[WorkerPod]) -> bool:
        """Read a pod's events into the state; False if no lookup slot was free or it failed (not a 403,
        which is raised: RBAC the job's status must name)."""
        if self.slots.locked():
            return False
        async with self.slots:
            try:
                listed = await asyncio.to_thread(self.kube.pod_events, key.namespace, pod.name, pod.uid)
            except refusals.TRANSIENT_ERRORS as error:
                if isinstance(error, refusals.ApiError) and error.status == 403:
                    raise
                log.debug("%s/%s: events of %s not read (again later): %s", *key[:2], pod.name, error)
                self.state.looked_up(key, pod.uid, None, (p.uid for p in pods), str(error) or repr(error))
                return False
        self.state.looked_up(key, pod.uid, pod_events(listed), (p.uid for p in pods))
        return True

    async def _say_forbidden(self, key: JobKey, error: refusals.ApiError) -> None:
        """RBAC that lets the operator create pods but not list events must not stop the job: it goes on,
        and is told once, as a Warning event, what the startup timeout cannot see and what to grant."""
        body = self.state.jobs.get(key)
        if body is None or not self.state.tell_once(key, POD_EVENTS_FORBIDDEN):
            return
        message = (
            f"the operator may not list events in namespace {key.namespace} ({error.message}): the startup "
            "timeout cannot name why a worker has not joined (an image pull, a failing probe), nor the "
            "container-error grace why one has not started (FailedMount); grant the "
            "operator's ServiceAccount `list` on events there, as the chart and manifests/rbac.yaml do"
        )
        log.warning("%s/%s: %s", key.namespace, key.name, message)
        await asyncio.to_thread(self.kube.post_event, body, "Warning", POD_EVENTS_FORBIDDEN, message)

    async def _say_failing(self, key: JobKey, error: str) -> None:
        """A pod judged without its events as its lookups keep failing: the job is told once, as a Warning
        event, what its start's rules cannot see, and why."""
        body = self.state.jobs.get(key)
        if body is None or not self.state.tell_once(key, POD_EVENTS_UNREADABLE):
            return
        stale = f"{EVENTS_STALE_MAX_SECONDS:.0f}s"
        message = (
            f"listing events in namespace {key.namespace} has failed on every try for over {stale} "
            f"({error}): the job's starting pods are judged without them until a lookup works again, so a "
            "pod's image pull cannot be told from a stuck start, and the container-error grace cannot name "
            "why a worker has not started (e.g. FailedMount); see the API server's health"
        )
        log.warning("%s/%s: %s", key.namespace, key.name, message)
        await asyncio.to_thread(self.kube.post_event, body, "Warning", POD_EVENTS_UNREADABLE, message)
